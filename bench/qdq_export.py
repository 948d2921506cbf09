#!/usr/bin/python3
"""Writes an explicitly quantized (QDQ) copy of an ONNX model from a kiln calibration cache: every
MatMul whose name has a scale in the cache reads its input through QuantizeLinear/DequantizeLinear
(int8, zero point 0, the cache's scale) and its weights as int8 per output column (max |W[:, n]| ->
127) behind a DequantizeLinear. The result is what a QDQ export with kiln's calibration carries:
kiln builds it without calibration (qdq_matmul_fusion puts those matmuls on its int8 kernel) and
ONNX Runtime runs the same file, so the two can be compared.

  /usr/bin/python3 bench/qdq_export.py MODEL.onnx CALIBRATION_CACHE OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def read_cache(path):
    scales = {}
    with open(path) as f:
        lines = f.read().splitlines()
    if not lines or not lines[0].startswith("# kiln int8 calibration cache"):
        sys.exit(f"{path}: not a kiln calibration cache")
    for line in lines[2:]:
        scale, name = line.split("\t", 1)
        scales[name] = float.fromhex(scale)
    return scales


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model = onnx.load(sys.argv[1])
    scales = read_cache(sys.argv[2])
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    uses = {}
    for n in g.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    nodes, added = [], 0
    for n in g.node:
        if n.op_type == "MatMul" and n.name in scales and n.input[1] in inits and uses[n.input[1]] == 1:
            w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
            if w.ndim == 2:
                base = n.name.strip("/").replace("/", "_")
                sw = np.abs(w).max(axis=0) / 127.0
                sw[sw == 0] = 1.0
                sw = sw.astype(np.float32)
                wq = np.clip(np.rint(w / sw), -127, 127).astype(np.int8)
                g.initializer.remove(inits[n.input[1]])
                g.initializer.extend([
                    numpy_helper.from_array(wq, base + "_wq"), numpy_helper.from_array(sw, base + "_ws"),
                    numpy_helper.from_array(np.zeros(w.shape[1], np.int8), base + "_wz"),
                    numpy_helper.from_array(np.array(scales[n.name], np.float32), base + "_xs"),
                    numpy_helper.from_array(np.array(0, np.int8), base + "_xz")])
                nodes += [
                    helper.make_node("QuantizeLinear", [n.input[0], base + "_xs", base + "_xz"], [base + "_xq"], name=base + "_quantize"),
                    helper.make_node("DequantizeLinear", [base + "_xq", base + "_xs", base + "_xz"], [base + "_xdq"], name=base + "_dequantize"),
                    helper.make_node("DequantizeLinear", [base + "_wq", base + "_ws", base + "_wz"], [base + "_wdq"],
                                     name=base + "_dequantize_weights", axis=1)]
                n.input[0], n.input[1] = base + "_xdq", base + "_wdq"
                added += 1
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(model, sys.argv[3])
    print(f"{sys.argv[3]}: {added} MatMuls quantized (QDQ, int8, scales from {sys.argv[2]})")


if __name__ == "__main__":
    main()
