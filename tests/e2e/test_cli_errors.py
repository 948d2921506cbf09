#!/usr/bin/python3
"""engine-run and engine-build on bad input: each case must exit non-zero with exactly one line on
stderr that names the problem, and never crash (no signal, no 'internal error').

  test_cli_errors.py --engine-run PATH --engine-build PATH --workdir DIR"""
import argparse
import pathlib
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-run", required=True)
    ap.add_argument("--engine-build", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    work = pathlib.Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    model = work / "add.onnx"
    make_model(str(model))
    good = work / "x.npy"
    np.save(good, np.ones((3, 4), np.float32))
    np.save(work / "x_int.npy", np.ones((3, 4), np.int64))
    np.save(work / "x_bad_shape.npy", np.ones((3, 5), np.float32))
    (work / "corrupt.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    (work / "garbage.onnx").write_bytes(b"not a model")
    (work / "garbage.engine").write_bytes(b"KILNENG\x00" + b"\x00" * 50)
    (work / "bad.yaml").write_text("model: add.onnx\nprofiles:\n  p:\n    dimz: {n: 3}\n")
    (work / "unset.yaml").write_text("model: add.onnx\nprofiles:\n  p:\n    dims: {}\n")
    (work / "ok.yaml").write_text("model: add.onnx\noutput: add.engine\nprofiles:\n  p:\n    dims: {n: {min: 1, opt: 3, max: 4}}\n")
    ok_profile = "model: add.onnx\noutput: add_s.engine\nprofiles:\n  p:\n    dims: {n: {min: 1, opt: 3, max: 4}}\n"
    (work / "stream_bad_output.yaml").write_text(ok_profile + "streaming: {cold_start: p, step: p, state: [{output: kv, input: x, axis: 0}], "
                                                 "window: {tokens_per_step: 1, max_steps: 2}}\n")
    (work / "stream_bad_profile.yaml").write_text(ok_profile + "streaming: {cold_start: p, step: q, state: [{output: y, input: x, axis: 0}], "
                                                  "window: {tokens_per_step: 1, max_steps: 2}}\n")
    out = str(work / "out")
    er, eb = a.engine_run, a.engine_build
    cases = [
        ("missing input", [er, str(model), "--output-dir", out], ["missing input 'x'"]),
        ("unknown input", [er, str(model), "--input", f"x={good}", "--input", f"z={good}", "--output-dir", out], ["'z'"]),
        ("wrong dtype", [er, str(model), "--input", f"x={work / 'x_int.npy'}", "--output-dir", out], ["'x'", "float32", "int64"]),
        ("contradicting shape", [er, str(model), "--input", f"x={work / 'x_bad_shape.npy'}", "--output-dir", out], ["'x'", "dim 1", "4", "5"]),
        ("unreadable file", [er, str(model), "--input", f"x={work / 'nope.npy'}", "--output-dir", out], ["nope.npy"]),
        ("corrupt npy", [er, str(model), "--input", f"x={work / 'corrupt.npy'}", "--output-dir", out], ["corrupt.npy"]),
        ("not a model", [er, str(work / "garbage.onnx"), "--input", f"x={good}", "--output-dir", out], ["garbage.onnx"]),
        ("corrupt engine", [er, str(work / "garbage.engine"), "--input", f"x={good}", "--output-dir", out], ["garbage.engine"]),
        ("bad option", [er, str(model), "--bogus"], ["--bogus"]),
        ("config unknown key", [eb, str(work / "bad.yaml"), "--no-bench"], ["dimz", "bad.yaml:4"]),
        ("config dim unset", [eb, str(work / "unset.yaml"), "--no-bench"], ["profile 'p'", "'x'", "dim 0", "'n'"]),
        ("missing config", [eb, str(work / "absent.yaml")], ["absent.yaml"]),
        ("streaming unknown output", [eb, str(work / "stream_bad_output.yaml"), "--no-bench"], ["streaming.state", "'kv'"]),
        ("streaming unknown profile", [eb, str(work / "stream_bad_profile.yaml"), "--no-bench"], ["'q'"]),
        ("bad --set", [eb, str(work / "ok.yaml"), "--set", "benchmark.iterations=zero", "--no-bench"], ["benchmark.iterations"]),
    ]
    passed = failed = 0
    for name, cmd, needles in cases:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        lines = [l for l in r.stderr.splitlines() if l.strip() and not l.startswith("usage:") and not l.startswith("  ") and not l.startswith("[engine-build]")]
        problems = []
        if r.returncode <= 0:
            problems.append(f"exit code {r.returncode}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} error lines: {lines}")
        if "internal error" in r.stderr:
            problems.append("internal error")
        for n in needles:
            if n not in r.stderr:
                problems.append(f"message lacks {n!r}")
        if problems:
            failed += 1
            print(f"FAIL {name}: {'; '.join(problems)}\n     stderr: {r.stderr.strip()}")
        else:
            passed += 1
            print(f"PASS {name}: {lines[0]}")
    # The good paths still work, and a built engine rejects a shape outside its profile.
    r = subprocess.run([eb, str(work / "ok.yaml"), "--no-bench"], capture_output=True, text=True, timeout=300)
    if r.returncode == 0:
        np.save(work / "x5.npy", np.ones((5, 4), np.float32))
        r2 = subprocess.run([er, str(work / "add.engine"), "--profile", "p", "--input", f"x={work / 'x5.npy'}", "--output-dir", out],
                            capture_output=True, text=True, timeout=120)
        if r2.returncode != 0 and "outside profile 'p' range [1, 4]" in r2.stderr and len(r2.stderr.strip().splitlines()) == 1:
            passed += 1
            print(f"PASS shape outside profile: {r2.stderr.strip()}")
        else:
            failed += 1
            print(f"FAIL shape outside profile: exit {r2.returncode}, stderr {r2.stderr.strip()}")
    else:
        failed += 1
        print(f"FAIL engine-build ok.yaml: {r.stderr.strip()}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
