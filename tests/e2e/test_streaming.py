#!/usr/bin/python3
"""The streaming control loop against PyTorch: engine-run --stream on the small ControlTransformer.

  /usr/bin/python3 tests/e2e/test_streaming.py --engine-build PATH --engine-run PATH --workdir DIR

The loop of seed 000: one full forward over 6 timesteps, then one incremental step per new timestep
attending to the 5 most recent cached timesteps (the window drops the oldest). PyTorch runs the same
loop with the cache sliced to the window before every step. Every step's predictions and its state
(kv_cache, projected_embeddings) must match within atol 1e-4 / rtol 1e-3. engine-build's own
streaming checks (equivalence, paced benchmark) run as part of the build. `N passed, N failed`.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "models"))

import control_transformer as ct  # noqa: E402
import export_models  # noqa: E402

SIZE = "small"
COLD_T = 6
STEPS = 16  # incremental steps after the cold start: the window slides from the first, the ring wraps (512 rows) after ~9
WINDOW_STEPS = 5
ATOL, RTOL = 1e-4, 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-build", required=True)
    ap.add_argument("--engine-run", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    a.workdir = os.path.abspath(a.workdir)
    os.makedirs(a.workdir, exist_ok=True)
    onnx_path = os.path.join(a.workdir, "control_transformer.small.onnx")
    export_models.export("control_transformer", SIZE, onnx_path)
    engine = os.path.join(a.workdir, "ct_stream.engine")
    config = os.path.join(HERE, "configs", "control_transformer_small.yaml")
    build = subprocess.run([a.engine_build, config, "--set", f"model={onnx_path}", "--output", engine, "--report",
                            engine + ".report.json", "--set", "benchmark.iterations=2", "--set", "benchmark.warmup=1",
                            "--set", "streaming.steps=3"], capture_output=True, text=True, timeout=900)
    if build.returncode != 0:
        print(f"FAIL engine-build: {build.stderr[-3000:]}")
        print("0 passed, 1 failed")
        return 1

    # The inputs of every step, and PyTorch's loop over them.
    model = ct.build_model(SIZE)
    tpt = ct.tokens_per_timestep(SIZE)
    batch = ct.random_batch(SIZE, COLD_T + STEPS, seed=7)
    stream_dir = os.path.join(a.workdir, "stream_in")
    expected = []
    cache = ct.empty_cache(SIZE)
    for k in range(STEPS + 1):
        lo, hi = (0, COLD_T) if k == 0 else (COLD_T + k - 1, COLD_T + k)
        step_batch = ct.slice_timesteps(batch, lo, hi)
        step_dir = os.path.join(stream_dir, f"step_{k:03d}")
        os.makedirs(step_dir, exist_ok=True)
        for name, arr in step_batch.items():
            np.save(os.path.join(step_dir, name + ".npy"), np.ascontiguousarray(arr))
        if k > 0:  # the window keeps the most recent WINDOW_STEPS timesteps
            keep = WINDOW_STEPS * tpt
            cache = (cache[0][:, -keep:], cache[1][:, :, :, -keep:])
        out = ct.run(model, ct.make_inputs(SIZE, step_batch, *cache))
        expected.append(out)
        cache = (out["projected_embeddings"], out["kv_cache"])

    out_dir = os.path.join(a.workdir, "stream_out")
    run = subprocess.run([a.engine_run, engine, "--stream", stream_dir, "--output-dir", out_dir], capture_output=True, text=True, timeout=600)
    passed = failed = 0
    if run.returncode != 0:
        print(f"FAIL engine-run --stream: exit {run.returncode}: {run.stderr.strip()}")
        failed += 1
    else:
        print(run.stdout.strip())
        for k, want in enumerate(expected):
            problems = []
            for name in ct.OUTPUT_NAMES:
                got = np.load(os.path.join(out_dir, f"step_{k:03d}", name + ".npy"))
                if got.shape != want[name].shape:
                    problems.append(f"{name} shape {got.shape} != {want[name].shape}")
                elif not np.allclose(got, want[name], atol=ATOL, rtol=RTOL):
                    problems.append(f"{name} max abs err {np.abs(got - want[name]).max():.3g}")
            err = max(float(np.abs(np.load(os.path.join(out_dir, f"step_{k:03d}", n + ".npy")) - want[n]).max())
                      for n in ct.OUTPUT_NAMES) if not problems else float("nan")
            label = f"[stream] step {k} ({'cold start, 6 timesteps' if k == 0 else 'incremental on the 5-step window'})"
            if problems:
                failed += 1
                print(f"FAIL {label}: {'; '.join(problems)}")
            else:
                passed += 1
                print(f"PASS {label}: max abs err {err:.2e}")
        # Every incremental step kept its state in place (the CLI says so otherwise).
        if "not in place" in run.stdout:
            failed += 1
            print("FAIL [stream] a step did not keep its state in place")
        else:
            passed += 1
            print("PASS [stream] every step kept its state in place")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
