#!/usr/bin/python3
"""precision: int8 end to end through engine-build, on a small MLP whose second layer's input has
one outlier feature (x100), so per-tensor int8 loses that layer's small features:

  1. calibration (minmax) runs, writes the cache, and the report's int8_vs_fp32 is within tolerance;
  2. a rebuild with the cache skips calibration and writes byte-identical engine bytes;
  3. a tolerance no int8 engine meets fails the build in one line naming calibration.tolerance,
     and leaves no engine file behind;
  4. --sensitivity ranks the outlier layer first, writes <engine>.sensitivity.json, and keeping
     it in fp32 with precision_overrides reduces the error the report measures;
  5. engine-run runs the int8 engine and --inspect shows its kernels as onednn_int8;
  6. calibration from a folder of .npy batches (calibration: {inputs: DIR}): it reads the
     calibrating subfolders, writes the cache, a rebuild from the cache is byte-identical, changed
     data recalibrates, --sensitivity runs on the held-out subfolders, and a file whose shape is not
     the profile's opt shape fails in one line naming the file, the input and the dim, leaving no
     engine;
  7. a QDQ model (QuantizeLinear/DequantizeLinear around activations, int8 weights per channel)
     builds without calibration, runs its matmuls on onednn_int8, and matches the model's own
     semantics (numpy) and the same model with qdq_matmul_fusion off (reference QDQ kernels);
  8. a small residual conv net (3-channel stem, 3x3 convs with a residual, a depthwise conv, a 1x1
     stride-2 conv, pool, MatMul) built in int8: its five quantizable convolutions and the MatMul run on
     onednn_int8 (the depthwise conv, a 9-long reduction, stays fp32), the report's error against
     fp32 is small, a rebuild from the calibration cache is byte-identical, and a cache lacking
     one of the int8 steps recalibrates; --sensitivity ranks its six int8 steps.

  test_int8.py --engine-build PATH --engine-run PATH --workdir DIR
The last line is `N passed, N failed`; the exit status is non-zero if anything failed.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(path):
    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((64, 96)) * 0.2).astype(np.float32)
    w1[:, 5] *= 100.0  # feature 5 of the hidden layer dwarfs the others: per-tensor int8 rounds them away
    w2 = (rng.standard_normal((96, 48)) * 0.2).astype(np.float32)
    w3 = (rng.standard_normal((48, 32)) * 0.2).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(w3, "w3"),
             numpy_helper.from_array(np.full(96, 0.1, np.float32), "b1"), numpy_helper.from_array(np.zeros(48, np.float32), "b2")]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="fc1"),
        helper.make_node("Add", ["h1", "b1"], ["h1b"], name="fc1_bias"),
        helper.make_node("MatMul", ["h1b", "w2"], ["h2"], name="fc2"),
        helper.make_node("Add", ["h2", "b2"], ["h2b"], name="fc2_bias"),
        helper.make_node("Relu", ["h2b"], ["r2"], name="relu2"),
        helper.make_node("MatMul", ["r2", "w3"], ["y"], name="fc3"),
    ]
    graph = helper.make_graph(nodes, "mlp", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def make_qdq_model(path):
    """x -> Q/DQ(s_x) -> MatMul(DQ(W1_q, per-column s_1)) + b1 -> Relu -> Q/DQ(s_h) -> Gemm(DQ(W2_q), transB) -> y."""
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((64, 48)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((16, 48)) * 0.2).astype(np.float32)  # Gemm transB: [N, K]
    s1 = (np.abs(w1).max(axis=0) / 127).astype(np.float32)
    s2 = (np.abs(w2).max(axis=1) / 100).astype(np.float32)  # max |q| = 100: the kernel must use the model's scales
    w1q = np.clip(np.rint(w1 / s1), -127, 127).astype(np.int8)
    w2q = np.clip(np.rint(w2 / s2[:, None]), -127, 127).astype(np.int8)
    b1 = (rng.standard_normal(48) * 0.1).astype(np.float32)
    sx, sh = np.float32(1.0 / 127), np.float32(0.02)
    inits = [numpy_helper.from_array(a, n) for a, n in [(w1q, "w1q"), (s1, "s1"), (np.zeros(48, np.int8), "z1"), (w2q, "w2q"),
                                                        (s2, "s2"), (b1, "b1"), (np.array(sx, np.float32), "sx"),
                                                        (np.array(0, np.int8), "zx"), (np.array(sh, np.float32), "sh"),
                                                        (np.array(128, np.uint8), "zh")]]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xdq"], name="dqx"),
        helper.make_node("DequantizeLinear", ["w1q", "s1", "z1"], ["w1dq"], name="dqw1", axis=1),
        helper.make_node("MatMul", ["xdq", "w1dq"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        helper.make_node("Relu", ["hb"], ["hr"], name="relu"),
        helper.make_node("QuantizeLinear", ["hr", "sh", "zh"], ["hq"], name="qh"),
        helper.make_node("DequantizeLinear", ["hq", "sh", "zh"], ["hdq"], name="dqh"),
        helper.make_node("DequantizeLinear", ["w2q", "s2"], ["w2dq"], name="dqw2", axis=0),
        helper.make_node("Gemm", ["hdq", "w2dq"], ["y"], name="fc2", transB=1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])
    onnx.save(helper.make_model(helper.make_graph(nodes, "qdq", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)]), path)

    def reference(xv):
        xd = np.clip(np.rint(xv / sx), -128, 127).astype(np.float32) * sx
        h = np.maximum(xd @ (w1q.astype(np.float32) * s1) + b1, 0)
        hd = (np.clip(np.rint(h / sh) + 128, 0, 255) - 128).astype(np.float32) * sh
        return hd @ (w2q.astype(np.float32) * s2[:, None]).T
    return reference


def make_conv_model(path):
    """x[n,3,16,16] -> conv3x3(3->16)+relu -> conv3x3(16->16)+relu -> conv3x3(16->16) + residual, relu
    -> depthwise 3x3 -> conv1x1 stride 2 (16->24)+relu -> conv3x3 dilation 2 (24->24, group 2)
    -> GlobalAveragePool -> Flatten -> MatMul(24->10) + bias."""
    rng = np.random.default_rng(7)
    def w(*shape):
        fan_in = np.prod(shape[1:])
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    inits = {"w0": w(16, 3, 3, 3), "b0": np.full(16, 0.05, np.float32), "w1": w(16, 16, 3, 3), "w2": w(16, 16, 3, 3),
             "b2": (rng.standard_normal(16) * 0.1).astype(np.float32), "wd": w(16, 1, 3, 3), "w3": w(24, 16, 1, 1),
             "w4": w(24, 12, 3, 3), "wf": (rng.standard_normal((24, 10)) * 0.3).astype(np.float32),
             "bf": np.zeros(10, np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="stem", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"], name="stem_relu"),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r0"], ["s2"], name="residual"),
        helper.make_node("Relu", ["s2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "wd"], ["cd"], name="depthwise", pads=[1, 1, 1, 1], group=16),
        helper.make_node("Conv", ["cd", "w3"], ["c3"], name="down", strides=[2, 2]),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("Conv", ["r3", "w4"], ["c4"], name="dilated", pads=[2, 2, 2, 2], dilations=[2, 2], group=2),
        helper.make_node("GlobalAveragePool", ["c4"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "wf"], ["m"], name="fc"),
        helper.make_node("Add", ["m", "bf"], ["y"], name="fc_bias"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])
    graph = helper.make_graph(nodes, "convnet", [x], [y], [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def conv_net(a, work, res):
    make_conv_model(str(work / "convnet.onnx"))
    def cfg(name):
        text = f"""model: convnet.onnx
output: {name}.engine
precision: int8
calibration: {{method: minmax, batches: 4, holdout: 2, tolerance: 0.1, cache: convnet.calib}}
profiles:
  p:
    dims: {{n: {{min: 1, opt: 2, max: 4}}}}
inputs:
  x: {{generator: uniform, low: -1, high: 1}}
tactics: {{select: true, timing_cache: convnet.timing_cache}}
"""
        (work / f"{name}.yaml").write_text(text)
        return work / f"{name}.yaml"
    r = build(a.engine_build, cfg("conv1"))
    problems = [] if r.returncode == 0 else [f"exit {r.returncode}: {r.stderr.strip()[-600:]}"]
    if not problems:
        if "wrote 6 scales" not in r.stderr:
            problems.append("calibration did not measure the 5 convolutions and the MatMul: " + r.stderr.strip()[-600:])
        err, section = int8_error(work / "conv1.engine.report.json")
        if not section["within_tolerance"] or not 0 < err < 0.05:
            problems.append(f"int8 error {err}: {section}")
        i = subprocess.run([a.engine_run, "--inspect", str(work / "conv1.engine")], capture_output=True, text=True, timeout=120)
        int8_lines = [l for l in i.stdout.splitlines() if "onednn_int8" in l]
        if len(int8_lines) != 6 or sum("FusedConv" in l for l in int8_lines) != 5:
            problems.append(f"inspect shows {len(int8_lines)} int8 kernels, want 5 FusedConv and 1 FusedMatMul: {int8_lines}")
        if any("depthwise" in l for l in int8_lines):
            problems.append("the depthwise conv (a 9-long reduction) was quantized")
        r2 = build(a.engine_build, cfg("conv2"))
        if r2.returncode != 0 or "from cache" not in r2.stderr:
            problems.append(f"the rebuild did not use the cache: {r2.stderr.strip()[-400:]}")
        elif (work / "conv1.engine").read_bytes() != (work / "conv2.engine").read_bytes():
            problems.append("engine bytes differ after the rebuild from the cache")
        # A cache without one of the plan's int8 steps (written before convolutions were quantized)
        # is stale: the build recalibrates and, from the same data, writes the same engine.
        calib = work / "convnet.calib"
        calib.write_text("".join(l for l in calib.read_text().splitlines(keepends=True) if not l.rstrip().endswith("\tconv2")))
        r3 = build(a.engine_build, cfg("conv3"))
        if r3.returncode != 0 or "recalibrating" not in r3.stderr or "wrote 6 scales" not in r3.stderr:
            problems.append(f"a cache lacking conv2 did not recalibrate: {r3.stderr.strip()[-400:]}")
        elif (work / "conv1.engine").read_bytes() != (work / "conv3.engine").read_bytes():
            problems.append("engine bytes differ after recalibrating a stale cache")
        # --sensitivity ranks the convolutions with the MatMul.
        r4 = build(a.engine_build, work / "conv1.yaml", "--sensitivity")
        sens_path = work / "conv1.engine.sensitivity.json"
        if r4.returncode != 0 or not sens_path.exists():
            problems.append(f"--sensitivity on the conv net: {r4.stderr.strip()[-400:]}")
        elif sorted(l["step"] for l in json.loads(sens_path.read_text())["layers"]) != sorted(["stem", "conv1", "conv2", "down", "dilated", "fc"]):
            problems.append(f"sensitivity ranks {[l['step'] for l in json.loads(sens_path.read_text())['layers']]}")
        print(f"     conv net int8 error {err:.4g}")
    res.record("int8 conv net: convolutions on onednn_int8, cache rebuild byte-identical", problems)


def config(work, name, tolerance=0.5, overrides="", calibration="batches: 3, cache: mlp.calib"):
    text = f"""model: mlp.onnx
output: {name}.engine
precision: int8
calibration: {{method: minmax, holdout: 2, tolerance: {tolerance}, {calibration}}}
{overrides}
profiles:
  p:
    dims: {{n: {{min: 1, opt: 64, max: 64}}}}
inputs:
  x: {{generator: uniform, low: -1, high: 1}}
tactics: {{select: true, timing_cache: mlp.timing_cache}}
"""
    path = work / f"{name}.yaml"
    path.write_text(text)
    return path


class Results:
    def __init__(self):
        self.passed, self.failed = 0, []

    def record(self, name, problems):
        print(f"{'FAIL' if problems else 'PASS'} {name}{': ' + '; '.join(problems) if problems else ''}", flush=True)
        if problems:
            self.failed.append(name)
        else:
            self.passed += 1


def build(eb, cfg, *extra):
    return subprocess.run([eb, str(cfg), "--no-bench", *extra], capture_output=True, text=True, timeout=600)


def int8_error(report_path):
    rep = json.loads(pathlib.Path(report_path).read_text())
    outs = rep["profiles"]["p"]["int8_vs_fp32"]["outputs"]
    return max(o["relative_err"] for o in outs.values()), rep["profiles"]["p"]["int8_vs_fp32"]


def write_batches(folder, count, shape=(64, 64), seed=10):
    """`count` batch subfolders b00, b01, ... of x.npy (the model's one input), uniform in [-1, 1)."""
    rng = np.random.default_rng(seed)
    for b in range(count):
        (folder / f"b{b:02d}").mkdir(parents=True, exist_ok=True)
        np.save(folder / f"b{b:02d}" / "x.npy", rng.uniform(-1, 1, shape).astype(np.float32))


def folder_calibration(a, work, res):
    write_batches(work / "data", 5)  # 3 calibrate, the last 2 are held out
    calib = "inputs: data, cache: folder.calib"
    r = build(a.engine_build, config(work, "folder", calibration=calib))
    problems = [] if r.returncode == 0 else [f"exit {r.returncode}: {r.stderr.strip()[-600:]}"]
    if not problems:
        if "3 batches read from folder" not in r.stderr or "wrote 3 scales" not in r.stderr:
            problems.append("the log does not say 3 batches were read from the folder: " + r.stderr.strip()[-600:])
        if not (work / "folder.calib").exists():
            problems.append("no calibration cache written")
        err, section = int8_error(work / "folder.engine.report.json")
        if not section["within_tolerance"] or section["holdout_batches"] != 2 or not 0 < err < 0.5:
            problems.append(f"report: {section}")
        r2 = build(a.engine_build, config(work, "folder2", calibration=calib))
        if r2.returncode != 0 or "from cache" not in r2.stderr or "calibration: method" in r2.stderr:
            problems.append(f"the rebuild did not use the cache: {r2.stderr.strip()[-400:]}")
        elif (work / "folder.engine").read_bytes() != (work / "folder2.engine").read_bytes():
            problems.append("engine bytes differ after the rebuild from the cache")
        # New data in a calibrating subfolder: the cache no longer matches.
        write_batches(work / "data", 1, seed=11)
        r3 = build(a.engine_build, config(work, "folder3", calibration=calib), "--sensitivity")
        if r3.returncode != 0 or "3 batches read from folder" not in r3.stderr:
            problems.append(f"changed data did not recalibrate: {r3.stderr.strip()[-400:]}")
        elif not (work / "folder3.engine.sensitivity.json").exists():
            problems.append("no sensitivity ranking from the held-out subfolders")
    res.record("calibration from a folder of .npy batches", problems)

    write_batches(work / "bad", 4)
    np.save(work / "bad" / "b01" / "x.npy", np.zeros((64, 65), np.float32))
    r = build(a.engine_build, config(work, "bad", calibration="inputs: bad"))
    lines = [l for l in r.stderr.splitlines() if not l.startswith("[engine-build]")]
    want = [str(work / "bad" / "b01" / "x.npy"), "input 'x'", "dim 1 is 65, expected 64", "opt shapes"]
    problems = []
    if r.returncode == 0 or len(lines) != 1 or not all(w in r.stderr for w in want):
        problems.append(f"exit {r.returncode}, error lines {lines}")
    if (work / "bad.engine").exists():
        problems.append("the failed build left bad.engine behind")
    res.record("a batch file of the wrong shape fails in one line", problems)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-build", required=True)
    ap.add_argument("--engine-run", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    work = pathlib.Path(a.workdir)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    make_model(str(work / "mlp.onnx"))
    res = Results()

    # 1. Calibrate, write the cache, report within tolerance.
    cfg = config(work, "first")
    r = build(a.engine_build, cfg)
    problems = [] if r.returncode == 0 else [f"exit {r.returncode}: {r.stderr.strip()[-600:]}"]
    if not problems:
        if "calibration: method minmax" not in r.stderr or "wrote 3 scales" not in r.stderr:
            problems.append("no calibration of 3 steps in the log")
        if not (work / "mlp.calib").exists():
            problems.append("no calibration cache written")
        err, section = int8_error(work / "first.engine.report.json")
        if not section["within_tolerance"] or section["holdout_batches"] != 2:
            problems.append(f"report: {section}")
        if not 0 < err < 0.5:
            problems.append(f"int8 error {err} not in (0, 0.5)")
    res.record("calibration, cache written, error report", problems)

    # 2. The rebuild reads the cache and writes the same bytes.
    cfg2 = config(work, "second")
    r = build(a.engine_build, cfg2)
    problems = [] if r.returncode == 0 else [f"exit {r.returncode}: {r.stderr.strip()[-600:]}"]
    if not problems:
        if "from cache" not in r.stderr or "calibration: method" in r.stderr:
            problems.append("the rebuild calibrated again")
        if (work / "first.engine").read_bytes() != (work / "second.engine").read_bytes():
            problems.append("engine bytes differ")
    res.record("rebuild with the cache is byte-identical", problems)

    # 3. A tolerance no int8 engine meets fails the build in one line, leaving no engine.
    cfg3 = config(work, "strict", tolerance=1e-7)
    r = build(a.engine_build, cfg3)
    lines = [l for l in r.stderr.splitlines() if not l.startswith("[engine-build]")]
    problems = []
    if r.returncode == 0 or len(lines) != 1 or "calibration.tolerance" not in r.stderr:
        problems.append(f"exit {r.returncode}, error lines {lines}")
    if (work / "strict.engine").exists():
        problems.append("the failed build left strict.engine behind")
    res.record("beyond the tolerance the build fails", problems)

    # 4. Sensitivity ranks fc2 (the outlier-scaled input) first; keeping it fp32 cuts the error.
    r = build(a.engine_build, cfg, "--sensitivity")
    problems = [] if r.returncode == 0 else [f"exit {r.returncode}: {r.stderr.strip()[-600:]}"]
    if not problems:
        sens = json.loads((work / "first.engine.sensitivity.json").read_text())
        names = [l["step"] for l in sens["layers"]]
        alone = [l["alone"] for l in sens["layers"]]
        if len(names) != 3 or alone != sorted(alone, reverse=True) or names[0] != "fc2":
            problems.append(f"ranking {sens['layers']}")
        if "rank" not in r.stdout or "fc2" not in r.stdout:
            problems.append("no ranking printed")
        cfg4 = config(work, "kept", overrides='precision_overrides: {"fc2": fp32}')
        r4 = build(a.engine_build, cfg4)
        if r4.returncode != 0:
            problems.append(f"override build: {r4.stderr.strip()[-400:]}")
        else:
            before, _ = int8_error(work / "first.engine.report.json")
            after, _ = int8_error(work / "kept.engine.report.json")
            if not after < 0.5 * before:
                problems.append(f"keeping fc2 in fp32: error {before} -> {after}")
            print(f"     error all int8 {before:.4g}, fc2 in fp32 {after:.4g}")
    res.record("sensitivity ranking and precision_overrides", problems)

    # 5. engine-run runs it; --inspect shows the int8 kernels.
    np.save(work / "x.npy", np.random.default_rng(1).uniform(-1, 1, (5, 64)).astype(np.float32))
    r = subprocess.run([a.engine_run, str(work / "first.engine"), "--profile", "p", "--input", f"x={work / 'x.npy'}",
                        "--output-dir", str(work / "out")], capture_output=True, text=True, timeout=120)
    i = subprocess.run([a.engine_run, "--inspect", str(work / "first.engine")], capture_output=True, text=True, timeout=120)
    problems = []
    if r.returncode != 0 or not (work / "out" / "y.npy").exists():
        problems.append(f"engine-run: {r.stderr.strip()[-400:]}")
    if i.stdout.count("onednn_int8") != 3 or "precision int8" not in i.stdout:
        problems.append(f"inspect shows {i.stdout.count('onednn_int8')} int8 kernels")
    res.record("engine-run and --inspect", problems)

    folder_calibration(a, work, res)

    # 7. The QDQ model: int8 kernels with the model's scales, no calibration.
    reference = make_qdq_model(str(work / "qdq.onnx"))
    xv = np.random.default_rng(2).uniform(-1.2, 1.2, (9, 64)).astype(np.float32)
    np.save(work / "xq.npy", xv)
    want = reference(xv)
    problems = []
    outs = {}
    for label, extra in (("fused", []), ("reference", ["--disable-pass", "qdq_matmul_fusion"])):
        r = subprocess.run([a.engine_run, str(work / "qdq.onnx"), "--input", f"x={work / 'xq.npy'}", "--output-dir", str(work / label), *extra],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            problems.append(f"engine-run {label}: {r.stderr.strip()[-400:]}")
        else:
            outs[label] = np.load(work / label / "y.npy")
    for label, got in outs.items():
        err = np.abs(got - want).max()
        if not err < 1e-4 * max(1.0, np.abs(want).max()):
            problems.append(f"{label}: max |kiln - numpy QDQ| {err}")
    (work / "qdq.yaml").write_text("model: qdq.onnx\noutput: qdq.engine\nprofiles:\n  p:\n    dims: {n: {min: 1, opt: 9, max: 16}}\n")
    r = subprocess.run([a.engine_build, str(work / "qdq.yaml"), "--no-bench"], capture_output=True, text=True, timeout=300)
    i = subprocess.run([a.engine_run, "--inspect", str(work / "qdq.engine")], capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or "calibration:" in r.stderr:
        problems.append(f"engine-build qdq: {r.stderr.strip()[-400:]}")
    elif i.stdout.count("onednn_int8") != 2:
        problems.append(f"inspect shows {i.stdout.count('onednn_int8')} int8 kernels, want 2")
    res.record("QDQ model on the int8 kernels", problems)

    conv_net(a, work, res)

    print(f"{res.passed} passed, {len(res.failed)} failed")
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
