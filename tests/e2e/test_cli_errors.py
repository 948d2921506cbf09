#!/usr/bin/python3
"""engine-run and engine-build on bad input: each case must exit non-zero with exactly one line on
stderr that names the problem, and never crash (no signal, no 'internal error').

  test_cli_errors.py --engine-run PATH --engine-build PATH --workdir DIR"""
import os
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln_e2e  # noqa: E402


def make_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def main():
    a = kiln_e2e.parse_tool_args(kiln_e2e.tool_parser(__doc__, timeout=None))
    work = pathlib.Path(a.workdir)
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
    res = kiln_e2e.Results()
    for name, cmd, needles in cases:
        r, _ = kiln_e2e.run_cmd(cmd, 120)
        res.check(name, kiln_e2e.one_line_error_problems(r, needles), r.stderr.strip())
    # The good paths still work, and a built engine rejects a shape outside its profile.
    r, _ = kiln_e2e.run_cmd([eb, str(work / "ok.yaml"), "--no-bench"], 300)
    res.record("engine-build ok.yaml", r.returncode == 0, r.stderr.strip())
    if r.returncode == 0:
        np.save(work / "x5.npy", np.ones((5, 4), np.float32))
        r2, _ = kiln_e2e.run_cmd([er, str(work / "add.engine"), "--profile", "p", "--input", f"x={work / 'x5.npy'}",
                                  "--output-dir", out], 120)
        res.check("shape outside profile", kiln_e2e.one_line_error_problems(r2, ["outside profile 'p' range [1, 4]"]),
                  r2.stderr.strip())
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
