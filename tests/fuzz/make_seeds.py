#!/usr/bin/python3
"""Seed inputs for scripts/fuzz.sh that the test data does not have: valid .npy files of every
dtype and a few shapes (npy), and small engines built by engine-build (engine_load; each prefixed
with the harness's mode byte, odd = recompute checksums after mutation).

  make_seeds.py npy DIR
  make_seeds.py engine_load DIR --engine-build PATH"""
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def npy(out):
    for dt in ("<f4", "<f8", "<f2", "<i8", "<i4", "<i2", "|i1", "|u1", "<u2", "<u4", "<u8", "|b1"):
        for shape in ((), (0,), (3,), (2, 3), (1, 2, 1, 2)):
            np.save(out / f"seed_{dt[1:]}_{'x'.join(map(str, shape)) or 'scalar'}.npy", np.zeros(shape, dtype=np.dtype(dt)))


def engine_load(out, engine_build):
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])
        w = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2), "w")
        b = numpy_helper.from_array(np.ones(2, np.float32), "b")
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["a"], name="add"),
                 helper.make_node("Relu", ["a"], ["y"], name="relu")]
        onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w, b]), opset_imports=[helper.make_opsetid("", 17)]), d / "m.onnx")
        for i, prof in enumerate(("{n: 3}", "{n: {min: 1, opt: 2, max: 4}}")):
            (d / "c.yaml").write_text(f"model: m.onnx\noutput: e{i}.engine\nprofiles:\n  p: {{dims: {prof}}}\n  q: {{dims: {{n: 2}}}}\n")
            subprocess.run([engine_build, str(d / "c.yaml"), "--no-bench"], check=True, capture_output=True)
            data = (d / f"e{i}.engine").read_bytes()
            (out / f"engine{i}_fixsum.bin").write_bytes(b"\x01" + data)
            (out / f"engine{i}_raw.bin").write_bytes(b"\x00" + data)


def main():
    out = pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    if sys.argv[1] == "npy":
        npy(out)
    elif sys.argv[1] == "engine_load":
        engine_load(out, sys.argv[sys.argv.index("--engine-build") + 1])


if __name__ == "__main__":
    main()
