#!/usr/bin/python3
"""Per-layer profile and GFLOP/s: engine-build's report and `engine-run --profile-layers`.

  test_layer_profile.py --engine-build PATH --engine-run PATH --workdir DIR

A tiny model (MatMul, Relu, Gemm, Reshape, Conv; batch dim n = 1..4..8) whose FLOPs at opt are
hand-computed: MatMul 2*8*(4*16) = 1024, Gemm 2*16*(4*4) = 512, Conv 2*(4*3) outputs * 4 MACs = 96.
Checks:
  1. engine-build (benchmark 1+3 runs): the report has machine.matmul_peak_gflops_f32 > 0 and per
     profile gflop = 1.632e-6, gflops_per_s, peak_fraction, layers (<= 15, slowest first,
     {name, op_type, ms}), by_op_type and gflop_by_op_type; the console prints the GFLOP/s line.
  2. engine-run ENGINE --profile-layers: valid Chrome trace JSON with exactly one "X" event per
     layer of `engine-run --inspect`, in plan order, ts/dur >= 0, shapes in args.
  3. engine-run MODEL.onnx --profile-layers alone (no --output-dir / --iterations).
  4. --profile-runs N: each step's N run times (args.run_us), its duration their mean; 0 is refused.
The last line is `N passed, N failed`; the exit status is non-zero if anything failed.
"""
import json
import os
import pathlib
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln_e2e  # noqa: E402

EXPECTED_FLOPS = 1024 + 512 + 96


def make_model(path):
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, 1, 1])
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 16)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b2"),
        numpy_helper.from_array(np.array([-1, 1, 2, 2], np.int64), "shape"),
        numpy_helper.from_array(rng.standard_normal((3, 1, 2, 2)).astype(np.float32), "w3"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="proj"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["g"], name="gemm", transB=1),
        helper.make_node("Reshape", ["g", "shape"], ["img"], name="to_image"),
        helper.make_node("Conv", ["img", "w3"], ["y"], name="conv"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def run(cmd):
    print("  $ " + " ".join(str(c) for c in cmd), flush=True)
    return kiln_e2e.run_cmd(cmd, 600)[0]


def check_trace(path, expected_layers):
    problems = []
    with open(path) as f:
        trace = json.load(f)
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    if trace.get("displayTimeUnit") != "ms":
        problems.append(f"displayTimeUnit {trace.get('displayTimeUnit')!r}")
    if not isinstance(trace.get("otherData"), dict):
        problems.append("no otherData object")
    xs = [e for e in events if e.get("ph") == "X"]
    if len(xs) != len(events):
        problems.append(f"{len(events) - len(xs)} events are not 'X'")
    names = [e.get("name") for e in xs]
    if expected_layers is not None and names != [n for _, n in expected_layers]:
        problems.append(f"event names {names} != layers {[n for _, n in expected_layers]}")
    for e in xs:
        if not (isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0 and isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            problems.append(f"event {e.get('name')}: ts {e.get('ts')} dur {e.get('dur')}")
        if e.get("pid") != 1 or e.get("tid") != 1 or not e.get("cat"):
            problems.append(f"event {e.get('name')}: pid/tid/cat {e.get('pid')}/{e.get('tid')}/{e.get('cat')}")
        args = e.get("args", {})
        if args.get("op_type") != e.get("cat") or not args.get("outputs"):
            problems.append(f"event {e.get('name')}: args {args}")
    if [e["ts"] for e in xs] != sorted(e["ts"] for e in xs):
        problems.append("events are not in time order")
    proj = [e for e in xs if e["name"] == "proj"]
    if not proj or proj[0]["args"].get("inputs") != ["float32[4,8]", "float32[8,16]"] or proj[0]["args"].get("outputs") != ["float32[4,16]"]:
        problems.append(f"proj event args: {proj[0]['args'] if proj else 'missing'}")
    return problems


def main():
    a = kiln_e2e.parse_tool_args(kiln_e2e.tool_parser(__doc__, timeout=None))
    work = pathlib.Path(a.workdir)
    model = work / "tiny.onnx"
    make_model(str(model))
    np.save(work / "x.npy", np.linspace(-1, 1, 4 * 8, dtype=np.float32).reshape(4, 8))
    (work / "tiny.yaml").write_text(
        "model: tiny.onnx\noutput: tiny.engine\nprofiles:\n  p:\n    dims: {n: {min: 1, opt: 4, max: 8}}\n"
        "benchmark: {rate_hz: 10, warmup: 1, iterations: 3}\n")
    res = kiln_e2e.Results()

    proc = run([a.engine_build, str(work / "tiny.yaml"), "--report", str(work / "report.json")])
    problems = [] if proc.returncode == 0 else [f"exit {proc.returncode}: {proc.stderr[-2000:]}"]
    if not problems:
        print("\n".join("    " + l for l in proc.stdout.strip().splitlines()), flush=True)
        if not re.search(r"GFLOP/s [0-9.]+, [0-9]+% of the peak of each FLOP's precision \(GFLOP/s: f32 [0-9]+", proc.stdout):
            problems.append("console lacks the 'GFLOP/s x, z% of the peak of each FLOP's precision (GFLOP/s: f32 y)' line")
        rep = json.loads((work / "report.json").read_text())
        peak = rep.get("machine", {}).get("matmul_peak_gflops_f32")
        if not (isinstance(peak, (int, float)) and peak > 0):
            problems.append(f"machine.matmul_peak_gflops_f32 = {peak!r}")
        pr = rep.get("profiles", {}).get("p", {})
        if not abs(pr.get("gflop", 0) * 1e9 - EXPECTED_FLOPS) < 1e-3:
            problems.append(f"gflop {pr.get('gflop')} != {EXPECTED_FLOPS / 1e9}")
        if pr.get("gflop_upper_bound") is not False:
            problems.append(f"gflop_upper_bound {pr.get('gflop_upper_bound')!r}")
        p50 = pr.get("latency_ms", {}).get("p50", 0)
        gps = pr.get("gflops_per_s")
        # p50 is written with 4 decimals (ms): allow its rounding.
        if not (isinstance(gps, (int, float)) and p50 > 5e-5 and
                EXPECTED_FLOPS / 1e6 / (p50 + 5e-5) * 0.999 <= gps <= EXPECTED_FLOPS / 1e6 / (p50 - 5e-5) * 1.001):
            problems.append(f"gflops_per_s {gps!r} is not gflop / p50 ({p50} ms)")
        elif isinstance(peak, (int, float)) and not abs(pr.get("peak_fraction", -1) - gps / peak) <= 1e-3 * gps / peak:
            problems.append(f"peak_fraction {pr.get('peak_fraction')!r} is not gflops_per_s / peak")
        layers = pr.get("layers")
        if not (isinstance(layers, list) and 0 < len(layers) <= 15 and all({"name", "op_type", "ms"} <= set(l) for l in layers)):
            problems.append(f"layers {layers!r}")
        elif [l["ms"] for l in layers] != sorted((l["ms"] for l in layers), reverse=True):
            problems.append("layers are not slowest first")
        by_op = pr.get("by_op_type")
        if not (isinstance(by_op, dict) and {"FusedMatMul", "FusedConv"} <= set(by_op) and all(v >= 0 for v in by_op.values())):
            problems.append(f"by_op_type {by_op!r}")
        gflop_by_op = pr.get("gflop_by_op_type", {})
        # matmul_epilogue_fusion turns the MatMul and the Gemm (constant weights) into FusedMatMuls.
        want = {"FusedMatMul": 1024e-9 + 512e-9, "FusedConv": 96e-9}  # and the Conv a FusedConv
        if set(gflop_by_op) != set(want) or any(abs(gflop_by_op[k] - v) > 1e-12 for k, v in want.items()):
            problems.append(f"gflop_by_op_type {gflop_by_op!r} != {want}")
    res.check("[report] engine-build layers, gflop, gflops_per_s, peak_fraction", problems)

    engine = work / "tiny.engine"
    proc = run([a.engine_run, "--inspect", str(engine)])
    layers = re.findall(r"^\s+\d+\s+(\S+)\s+\S+\s+(\S+)$", proc.stdout, re.M)
    trace = work / "trace_engine.json"
    proc = run([a.engine_run, str(engine), "--profile", "p", "--input", f"x={work / 'x.npy'}", "--iterations", "3",
                "--profile-layers", str(trace)])
    problems = [] if proc.returncode == 0 else [f"exit {proc.returncode}: {proc.stderr[-2000:]}"]
    if not layers:
        problems.append(f"no layers in --inspect output:\n{proc.stdout}")
    if not problems:
        problems = check_trace(trace, layers)
        if "layer profile:" not in proc.stdout or "latency over 3 iterations" not in proc.stdout:
            problems.append(f"stdout: {proc.stdout}")
    res.check(f"[trace] engine-run ENGINE --iterations 3 --profile-layers ({len(layers)} layers)", problems)

    trace = work / "trace_onnx.json"
    proc = run([a.engine_run, str(model), "--input", f"x={work / 'x.npy'}", "--profile-layers", str(trace)])
    problems = [] if proc.returncode == 0 else [f"exit {proc.returncode}: {proc.stderr[-2000:]}"]
    if not problems:
        problems = check_trace(trace, None)
        other = json.loads(trace.read_text())["otherData"]
        if float(other.get("gflop", 0)) * 1e9 != EXPECTED_FLOPS:
            problems.append(f"otherData {other}")
    res.check("[trace] engine-run MODEL.onnx --profile-layers alone", problems)

    # --profile-runs N: every step lists N run times, and its duration is their mean.
    trace = work / "trace_runs.json"
    proc = run([a.engine_run, str(model), "--input", f"x={work / 'x.npy'}", "--profile-layers", str(trace),
                "--profile-runs", "4"])
    problems = [] if proc.returncode == 0 else [f"exit {proc.returncode}: {proc.stderr[-2000:]}"]
    if not problems:
        problems = check_trace(trace, None)
        for e in (e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"):
            runs = e["args"].get("run_us")
            if not (isinstance(runs, list) and len(runs) == 4 and all(r >= 0 for r in runs)):
                problems.append(f"{e['name']}: run_us {runs!r}")
            elif abs(sum(runs) / 4 - e["dur"]) > 0.01 + 1e-6 * e["dur"]:
                problems.append(f"{e['name']}: dur {e['dur']} is not the mean of {runs}")
        if "the mean of 4 runs" not in proc.stdout:
            problems.append(f"stdout: {proc.stdout}")
    bad = run([a.engine_run, str(model), "--input", f"x={work / 'x.npy'}", "--profile-layers", str(work / "t0.json"),
               "--profile-runs", "0"])
    if bad.returncode == 0 or "--profile-runs" not in bad.stderr:
        problems.append(f"--profile-runs 0: exit {bad.returncode}, stderr {bad.stderr[-500:]!r}")
    res.check("[trace] engine-run --profile-runs 4: each step's run times, their mean as its duration", problems)

    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
