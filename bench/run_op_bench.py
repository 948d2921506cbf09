#!/usr/bin/python3
"""Op microbenchmarks: kiln's elementwise / reduction kernels (build/op-bench, Google benchmark) against
ONNX Runtime's kernel for the same op on the same shape (a single-op ONNX model run by bench/ort_bench.js
with ORT's own profiler on; the kernel time of the op's node, not the session.run call around it).

  /usr/bin/python3 bench/run_op_bench.py [--op-bench build/op-bench] [--threads T] [--rounds R]
      [--only NAME ...] [--markdown FILE]

Both sides run with T threads (default 2). Rounds alternate kiln and ORT; each reports the median per-run
time of its round; the table gives the median over rounds. Writes bench/RESULTS-ops.md (--markdown).
This is a benchmark, not a test.
"""
import argparse
import datetime
import glob
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)

GPT = [1, 32, 1536]
EFF = [1, 96, 112, 112]
F, B, H = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.FLOAT16


def inp(shape, lo=-4.0, hi=4.0, dtype=F):
    return (shape, lo, hi, dtype)


# name: (kiln benchmark name, ONNX op, attributes, inputs, domain)
CASES = {}
for op in ["Tanh", "Erf", "Exp", "Sigmoid", "Softplus", "Relu", "HardSwish", "Log", "Sqrt", "Reciprocal"]:
    fam = "positive_unary" if op in ("Log", "Sqrt", "Reciprocal") else "unary"
    lo = 0.01 if fam == "positive_unary" else -4.0
    CASES[f"{op} {GPT}"] = (f"{fam}/{op}_gpt", op, {}, [inp(GPT, lo)], "")
    CASES[f"{op} {EFF}"] = (f"{fam}/{op}_effnet", op, {}, [inp(EFF, lo)], "")
CASES.update({
    f"Gelu(erf) {GPT}": ("gelu/erf", "Gelu", {}, [inp(GPT)], "com.microsoft"),
    f"Gelu(tanh) {GPT}": ("gelu/tanh", "FastGelu", {}, [inp(GPT)], "com.microsoft"),
    f"Pow(x, 2) {GPT}": ("pow_const/square", "Pow", {}, [inp(GPT, 0.01), ([], 2.0, 2.0, F)], ""),
    f"Pow(x, 3) {GPT}": ("pow_const/cube", "Pow", {}, [inp(GPT, 0.01), ([], 3.0, 3.0, F)], ""),
    f"Pow(x, 0.5) {GPT}": ("pow_const/sqrt", "Pow", {}, [inp(GPT, 0.01), ([], 0.5, 0.5, F)], ""),
    f"Pow(x, 1.7) {GPT}": ("pow_const/general", "Pow", {}, [inp(GPT, 0.01), ([], 1.7, 1.7, F)], ""),
    f"Add {GPT}": ("binary/Add", "Add", {}, [inp(GPT), inp(GPT, 0.5)], ""),
    f"Add {GPT} + [1536]": ("binary/Add_bias", "Add", {}, [inp(GPT), inp([1536], 0.5)], ""),
    f"Mul {GPT} * [1536]": ("binary/Mul_bias", "Mul", {}, [inp(GPT), inp([1536], 0.5)], ""),
    f"Div {GPT}": ("binary/Div", "Div", {}, [inp(GPT), inp(GPT, 0.5)], ""),
    f"Less {GPT}": ("binary/Less", "Less", {}, [inp(GPT), inp(GPT, 0.5)], ""),
    f"Mul {EFF} * [1,96,1,1] (SE gate)": ("se_gate", "Mul", {}, [inp(EFF), inp([1, 96, 1, 1], 0, 1)], ""),
    f"Where {GPT}": ("where", "Where", {}, [inp(GPT, -1, 1, B), inp(GPT), inp(GPT)], ""),
    f"Cast f32->f16 {GPT}": ("cast/f32_f16", "Cast", {"to": TensorProto.FLOAT16}, [inp(GPT)], ""),
    f"Cast f16->f32 {GPT}": ("cast/f16_f32", "Cast", {"to": F}, [inp(GPT, dtype=H)], ""),
    f"Cast f32->bf16 {GPT}": ("cast/f32_bf16", "Cast", {"to": TensorProto.BFLOAT16}, [inp(GPT)], ""),
    f"Cast f32->f16 {EFF}": ("cast/f32_f16_effnet", "Cast", {"to": TensorProto.FLOAT16}, [inp(EFF)], ""),
    f"ReduceMean(-1) {GPT}": ("reduce/ReduceMean", "ReduceMean", {"axes": [-1]}, [inp(GPT)], ""),
    f"ReduceSum(-1) {GPT}": ("reduce/ReduceSum", "ReduceSum", {"axes": [-1], "_axes_input": True}, [inp(GPT)], ""),
    f"ReduceMax(-1) {GPT}": ("reduce/ReduceMax", "ReduceMax", {"axes": [-1]}, [inp(GPT)], ""),
    f"Softmax(-1) {GPT}": ("softmax", "Softmax", {}, [inp(GPT)], ""),
    f"GlobalAveragePool {EFF}": ("global_avg_pool", "GlobalAveragePool", {}, [inp(EFF)], ""),
    "LayerNorm [1,32,384] (kiln: written-out, fused)": ("layer_norm/fused_elementwise", "LayerNormalization", {"axis": -1},
                                                        [inp([1, 32, 384]), inp([384], 0.5, 2), inp([384], -1, 1)], ""),
    "LayerNormalization [1,32,384]": ("layer_norm/LayerNormalization", "LayerNormalization", {"axis": -1},
                                      [inp([1, 32, 384]), inp([384], 0.5, 2), inp([384], -1, 1)], ""),
    "LayerNormalization [1,197,768] (vit_b_16)": ("layer_norm_zoo/vit_b_16", "LayerNormalization", {"axis": -1, "epsilon": 1e-6},
                                                  [inp([1, 197, 768]), inp([768], 0.5, 2), inp([768], -1, 1)], ""),
    "LayerNormalization [1,56,56,96] (convnext_tiny)": ("layer_norm_zoo/convnext_stage1", "LayerNormalization",
                                                        {"axis": -1, "epsilon": 1e-6},
                                                        [inp([1, 56, 56, 96]), inp([96], 0.5, 2), inp([96], -1, 1)], ""),
    "LayerNormalization [1,7,7,768] (convnext_tiny)": ("layer_norm_zoo/convnext_stage4", "LayerNormalization",
                                                       {"axis": -1, "epsilon": 1e-6},
                                                       [inp([1, 7, 7, 768]), inp([768], 0.5, 2), inp([768], -1, 1)], ""),
    # kiln: BN + ReLU with the 2x2 pool fused (nChw8c, 256 channels, as pool_before_pointwise_conv runs
    # it); ORT: its transition's own pool, over the 1x1 conv's 128 output channels.
    "densenet transition1 pool (kiln: BN+ReLU+pool [1,256,56,56]; ORT: AveragePool [1,128,56,56])": (
        "transition_bn_relu_pool/256/56", "AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [inp([1, 128, 56, 56])], ""),
    "AveragePool 2x2/2 [1,256,56,56] (kiln nChw8c)": (
        "transition_avg_pool/256/56", "AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [inp([1, 256, 56, 56])], ""),
    "MaxPool 3x3/2 pad 1 [1,64,112,112] (kiln nChw8c)": (
        "max_pool_layout/nchw8c", "MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        [inp([1, 64, 112, 112])], ""),
    f"BatchNormalization {EFF}": ("batchnorm", "BatchNormalization", {},
                                  [inp(EFF), inp([96], 0.5, 2), inp([96], -1, 1), inp([96], -1, 1), inp([96], 0.5, 2)], ""),
    # Swin-T / ViT-B/16 (issue 19's zoo per-step check): window attention's Softmax, unmasked and with
    # the shifted blocks' -100 region mask; the patch merging's and the roll's Concat; Transposes.
    "Softmax(-1) [4,12,49,49] Swin stage 3": ("softmax_window/swin_stage3", "Softmax", {}, [inp([4, 12, 49, 49])], ""),
    "Softmax(-1) [64,3,49,49] Swin stage 1": ("softmax_window/swin_stage1", "Softmax", {}, [inp([64, 3, 49, 49])], ""),
    "Softmax(-1) [4,12,49,49] Swin stage 3, shifted mask": ("softmax_window_masked/swin_stage3", "Softmax", {},
                                                            [inp([4, 12, 49, 49], "swin")], ""),
    "Softmax(-1) [64,3,49,49] Swin stage 1, shifted mask": ("softmax_window_masked/swin_stage1", "Softmax", {},
                                                            [inp([64, 3, 49, 49], "swin")], ""),
    "Concat(3) 4 x [1,14,14,192] Swin merge": ("concat/swin_merge4/real_time", "Concat", {"axis": 3}, [inp([1, 14, 14, 192])] * 4, ""),
    "Concat(3) 4 x [1,28,28,96] Swin merge": ("concat/swin_merge2/real_time", "Concat", {"axis": 3}, [inp([1, 28, 28, 96])] * 4, ""),
    "Concat(2) [1,28,25,192] + [1,28,3,192] Swin roll": ("concat/swin_roll_w/real_time", "Concat", {"axis": 2},
                                                         [inp([1, 28, 25, 192]), inp([1, 28, 3, 192])], ""),
    "Concat(2) [1,56,53,96] + [1,56,3,96] Swin roll": ("concat/swin_roll_w1/real_time", "Concat", {"axis": 2},
                                                       [inp([1, 56, 53, 96]), inp([1, 56, 3, 96])], ""),
    "Transpose(0,2,1) [1,768,196] ViT patches": ("transpose/vit_patches/real_time", "Transpose", {"perm": [0, 2, 1]},
                                                  [inp([1, 768, 196])], ""),
    "Transpose(0,1,3,2,4,5) [1,4,4,7,7,192] Swin": ("transpose/swin_window_reverse/real_time", "Transpose",
                                                    {"perm": [0, 1, 3, 2, 4, 5]}, [inp([1, 4, 4, 7, 7, 192])], ""),
    "Transpose(2,0,3,1,4) [16,49,3,6,32] Swin qkv": ("transpose/swin_qkv/real_time", "Transpose", {"perm": [2, 0, 3, 1, 4]},
                                                     [inp([16, 49, 3, 6, 32])], ""),
    "Add [1,197,768] ViT residual": ("residual_add/vit/real_time", "Add", {}, [inp([1, 197, 768]), inp([1, 197, 768])], ""),
    "Add [1,56,56,96] Swin residual": ("residual_add/swin_stage1/real_time", "Add", {}, [inp([1, 56, 56, 96]), inp([1, 56, 56, 96])], ""),
})


def swin_shifted_scores(shape, rng):
    """Scores in [-4, 4) with Swin's shifted-window mask added (-100 across regions), as op_bench.cpp's."""
    windows, heads = shape[0], shape[1]
    g, ws, shift = int(round(windows ** 0.5)), 7, 3
    side = g * ws
    region = lambda p: 0 if p < side - ws else (1 if p < side - shift else 2)
    x = rng.uniform(-4, 4, shape).astype(np.float32)
    for w in range(windows):
        wy, wx = w // g * ws, w % g * ws
        rid = np.array([region(wy + i // ws) * 3 + region(wx + i % ws) for i in range(49)])
        x[w] -= 100.0 * (rid[:, None] != rid[None, :]).astype(np.float32)[None]
    return x


def single_op_model(name, op, attrs, inputs, domain, path, data_dir):
    """Writes a one-node model; constant-looking inputs (shape []) become initializers. Returns feeds."""
    rng = np.random.RandomState(1)
    graph_inputs, inits, names, feeds = [], [], [], []
    for i, (shape, lo, hi, dt) in enumerate(inputs):
        n = f"in{i}"
        names.append(n)
        if shape == [] or (op == "BatchNormalization" and i > 0) or (op == "LayerNormalization" and i > 0):
            arr = np.full(shape, lo, np.float32) if shape == [] else rng.uniform(lo, hi, shape).astype(np.float32)
            inits.append(numpy_helper.from_array(arr, n))
            continue
        graph_inputs.append(helper.make_tensor_value_info(n, dt, shape))
        if lo == "swin":
            arr = swin_shifted_scores(shape, rng)
        else:
            arr = (rng.uniform(-1, 1, shape) > 0) if dt == B else rng.uniform(lo, hi, shape).astype(np.float16 if dt == H else np.float32)
        p = os.path.join(data_dir, f"{n}.npy")
        np.save(p, arr)
        feeds.append((n, p))
    attrs = dict(attrs)
    if attrs.pop("_axes_input", False):  # ReduceSum takes axes as an input from opset 13
        inits.append(numpy_helper.from_array(np.array(attrs.pop("axes"), np.int64), "axes"))
        names.append("axes")
    node = helper.make_node(op, names, ["y"], domain=domain or None, **attrs)
    out_type = attrs["to"] if op == "Cast" else (TensorProto.BOOL if op == "Less" else F)
    out = helper.make_tensor_value_info("y", out_type, None)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(helper.make_graph([node], name.replace(" ", "_"), graph_inputs, [out], inits), opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, path)
    return feeds


def ort_kernel_us(args, case, work):
    """Median kernel time (us) of the op's node over the profiled runs of one ORT process."""
    _, op, attrs, inputs, domain = CASES[case]
    d = tempfile.mkdtemp(dir=work)
    model = os.path.join(d, "model.onnx")
    feeds = single_op_model(case, op, attrs, inputs, domain, model, d)
    prefix = os.path.join(d, "ort_profile")
    cmd = ["node", os.path.join(BENCH, "ort_bench.js"), model, "--threads", str(args.threads), "--warmup", "5",
           "--iterations", str(args.iterations), "--profile", prefix]
    for n, p in feeds:
        cmd += ["--input", f"{n}={p}"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=BENCH)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
    files = glob.glob(prefix + "*.json")
    if not files:
        raise RuntimeError("ORT wrote no profile")
    with open(files[0]) as f:
        events = json.load(f)
    durs = [e["dur"] for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    if not durs:
        raise RuntimeError("no kernel events in ORT's profile")
    return statistics.median(durs[5:] if len(durs) > 10 else durs)


def kiln_us(args, names):
    """{benchmark name: median us} from one op-bench process."""
    filt = "^(" + "|".join(n.replace("/", "/") for n in names) + ")$"
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    cmd = [args.op_bench, f"--benchmark_filter={filt}", "--benchmark_format=json", "--benchmark_min_time=0.2"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip()[-400:])
    out = {}
    for b in json.loads(p.stdout)["benchmarks"]:
        if "error_message" in b:
            continue
        scale = {"us": 1.0, "ms": 1000.0, "ns": 1e-3}[b["time_unit"]]
        # One thread: CPU time, which leaves out the time the process sat descheduled on a shared
        # machine (ORT's per-run median does the same by ignoring the runs that were preempted). More
        # threads: wall time (CPU time would add up the threads).
        out[b["name"]] = (b["cpu_time"] if args.threads == 1 else b["real_time"]) * scale
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op-bench", default=os.path.join(ROOT, "build", "op-bench"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=50, help="ORT runs per round")
    p.add_argument("--only", action="append", default=[], help="keep cases whose name contains NAME")
    p.add_argument("--markdown", default=os.path.join(BENCH, "RESULTS-ops.md"))
    a = p.parse_args(argv)
    cases = [c for c in CASES if not a.only or any(o in c for o in a.only)]
    if not cases:
        p.error("--only matches nothing")
    load_start = os.getloadavg()
    work = tempfile.mkdtemp(prefix="kiln_op_bench_")
    kiln, ort = {c: [] for c in cases}, {c: [] for c in cases}
    errors = {}
    for r in range(a.rounds):
        k = kiln_us(a, [CASES[c][0] for c in cases])
        for c in cases:
            if CASES[c][0] in k:
                kiln[c].append(k[CASES[c][0]])
            try:
                ort[c].append(ort_kernel_us(a, c, work))
            except RuntimeError as e:
                errors[c] = str(e)
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    subprocess.run(["rm", "-rf", work])
    load_end = os.getloadavg()
    rows = []
    for c in cases:
        km = statistics.median(kiln[c]) if kiln[c] else None
        om = statistics.median(ort[c]) if ort[c] else None
        ratio = f"{om / km:.2f}" if km and om else "—"
        rows.append((c, f"{km:.1f}" if km else "—", f"{om:.1f}" if om else errors.get(c, "—"), ratio))
    w = [max(len(r[i]) for r in rows + [("op and shape", "kiln us", "ORT us", "ORT/kiln")]) for i in range(4)]
    for r in [("op and shape", "kiln us", "ORT us", "ORT/kiln")] + rows:
        print("  ".join(x.ljust(w[i]) for i, x in enumerate(r)))
    cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name'"], capture_output=True, text=True).stdout.split(":")[-1].strip()
    lines = [
        "# Op microbenchmarks: kiln kernels vs ONNX Runtime kernels",
        "",
        f"Generated by `bench/run_op_bench.py` on {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}:",
        "",
        "```",
        "/usr/bin/python3 bench/run_op_bench.py" + "".join(" " + shlex.quote(x) for x in (argv or sys.argv[1:])),
        "```",
        "",
        f"- Machine: {cpu}, {os.cpu_count()} CPUs, shared with other work; load average at start "
        f"{', '.join(f'{x:.2f}' for x in load_start)}, at end {', '.join(f'{x:.2f}' for x in load_end)}.",
        f"- {a.threads} threads each. kiln: `build/op-bench` (Google benchmark, the kernel's run() as a plan step "
        "calls it, created and prepared once; with 1 thread its CPU time per run, with more its wall time); "
        "ORT: the median of the op's node kernel time over the runs, from ORT's own profiler "
        f"(enableProfiling) in a single-op model, {a.iterations} runs per round after 5 warm-ups. "
        f"{a.rounds} rounds alternating kiln and ORT; medians over rounds. ORT/kiln > 1: kiln is faster.",
        "- kiln's Gelu rows are its vector GELU (what elementwise_fusion emits for a written-out GELU) against "
        "ORT's com.microsoft Gelu / FastGelu; the written-out LayerNorm row is kiln's fused normalisation "
        "(kiln::FusedElementwise) against ORT's LayerNormalization.",
        "",
        "| op and shape | kiln µs | ORT µs | ORT/kiln |",
        "|---|---|---|---|",
    ] + [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" for r in rows] + [""]
    with open(a.markdown, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {os.path.relpath(a.markdown, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
