#!/usr/bin/python3
"""Runs examples/python (the seed's inference loop and the control loop) on the small
ControlTransformer: exports it, builds its engine with engine-build (configs of tests/e2e), runs
each example with that engine; each example exits non-zero when its own checks fail.

  run_examples.py --engine-build PATH --workdir DIR   (PYTHONPATH must reach the kiln package)
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "models"))

import export_models  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-build", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    work = os.path.abspath(a.workdir)
    os.makedirs(work, exist_ok=True)
    onnx_path = os.path.join(work, "ct.small.onnx")
    export_models.export("control_transformer", "small", onnx_path)
    engine = os.path.join(work, "ct.engine")
    b = subprocess.run([a.engine_build, os.path.join(REPO, "tests", "e2e", "configs", "control_transformer_small.yaml"), "--set",
                        f"model={onnx_path}", "--set", "streaming.steps=2", "--output", engine, "--no-bench"],
                       capture_output=True, text=True, timeout=900)
    if b.returncode != 0:
        print(f"FAIL engine-build: {b.stderr.strip()[-2000:]}\n0 passed, 1 failed")
        return 1
    failed = 0
    examples = os.path.join(REPO, "examples", "python")
    for script, extra in (("infer.py", ["--steps", "8"]), ("control_loop.py", ["--steps", "8", "--rate-hz", "50"])):
        r = subprocess.run([sys.executable, os.path.join(examples, script), "--engine", engine] + extra, capture_output=True, text=True,
                           timeout=600)
        print(r.stdout.strip())
        ok = r.returncode == 0
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} examples/python/{script}" + ("" if ok else f": exit {r.returncode}: {r.stderr.strip()[-2000:]}"))
    print(f"{2 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
