#!/usr/bin/python3
"""Peer benchmark: ONNX Runtime (onnxruntime-node, CPU) against kiln's engine-run on kiln's full-size models
and on "unseen exports" (attention written with other module code, bench/unseen_exports.py).

  /usr/bin/python3 bench/run_peer_bench.py [--rounds R] [--iterations N] [--threads T] [--only NAME ...]
      [--kiln-env NAME=VALUE ...] [--ort-config KEY=VALUE ...] [--results FILE] [--markdown FILE]
      [--zoo | --zoo-only] [--fusion-off] [--busy] [--p99] [--peak-gflops G] [--baseline-engine-run PATH]

--zoo adds (--zoo-only runs only) the torchvision zoo of models/torchvision_zoo.py at batch 1, each compared
with PyTorch's output too. --fusion-off adds a third engine in every round: kiln with attention fusion off
(`--disable-pass attention_fusion`, i.e. `fusions: {attention: off}`). --busy keeps a spinning process on one
core for the whole run (the co-tenant case) and adds p99 columns (--p99 alone adds them to a quiet run).
--baseline-engine-run PATH adds another kiln build (engine kiln_base, e.g. main's engine-run) to every
round, so before/after ratios come from one alternated run.

For each workload (model/profile) both engines get the same .onnx and the same input .npy files, and run
IN ALTERNATION: round r runs ORT (1 warm-up + N timed runs), then kiln (engine-run: build for the input
shapes, 1 warm-up + N timed runs), R rounds. Each round gives one p50 per engine; the table reports the
median of those p50s, the ratio ORT/kiln (> 1 means kiln is faster), and the largest absolute difference
between kiln's and ORT's outputs (and ORT's against PyTorch where the export script wrote reference outputs).
Threads: ORT intraOpNumThreads T, interOpNumThreads 1; kiln OMP_NUM_THREADS=T. Session creation and engine
building are not timed.

Models are exported with models/export_models.py --size full into bench/out/ (skipped when present). gpt2's
reference cases are 7-token prefill / 9-token past decode, so this script writes its own inputs: prefill of
128 tokens on an empty past, decode of 1 token on a 1024-token past (random ids and past K/V, fixed seed).
The unseen exports (gpt_sep_qkv, rotary_runtime_mask, scaled_q_bsd, mha_batch_first) come from
models/attention_variants.py --size bench with their cases (inputs and PyTorch outputs) in bench/out.

The compute floor: kiln's first round also writes its per-layer trace (one profiled run after the timed
ones), whose FLOP count (matmuls, convolutions, attention) at the f32 matmul peak (build/gemm-bench's
onednn_peak, measured at the start of every round and the median taken, or --peak-gflops) is the least
time any fp32 engine doing those FLOPs needs; ORT's p50 over it is the largest ORT/kiln ratio reachable.

--kiln-env sets an environment variable for engine-run (e.g. OMP_WAIT_POLICY=passive), --ort-config an ORT
session config entry (e.g. session.intra_op.allow_spinning=0); both are recorded in the results.

Writes bench/results.json and its own section of bench/RESULTS.md (the rest of that file is kept). --only NAME (repeatable) keeps the workloads whose model or
model/profile is NAME. This is a benchmark, not a test: it is not part of ctest.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx

import unseen_exports

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))
import torchvision_zoo  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
OUT = os.path.join(BENCH, "out")
EXPORT = os.path.join(ROOT, "models", "export_models.py")

# (model, profile, reference case written by export_models.py, or None when this script generates inputs)
WORKLOADS = [
    ("control_transformer", "full", "full"),
    ("control_transformer", "incremental", "incremental"),
    ("gpt2", "prefill128", None),
    ("gpt2", "decode1024", None),
    ("resnet18", "batch1", "batch1"),
    ("resnet18", "batch2", "batch2"),
    ("vit", "batch1", "batch1"),
    ("vit", "batch2", "batch2"),
] + unseen_exports.WORKLOADS
WORKLOAD_NOTES = {
    "control_transformer/full": "6 timesteps (1644 tokens), empty cache",
    "control_transformer/incremental": "1 timestep (274 tokens) on 1370 cached tokens",
    "gpt2/prefill128": "128 tokens, past 0",
    "gpt2/decode1024": "1 token on 1024 past tokens",
    "resnet18/batch1": "1x3x224x224",
    "resnet18/batch2": "2x3x224x224",
    "vit/batch1": "1x3x224x224",
    "vit/batch2": "2x3x224x224",
    **unseen_exports.NOTES,
}
# --zoo: every architecture of models/torchvision_zoo.py at batch 1 (random weights, PyTorch reference).
ZOO_WORKLOADS = [(name, "batch1", "batch1") for name in torchvision_zoo.ZOO]
WORKLOAD_NOTES.update({f"{name}/batch1": f"zoo: 1x3x224x224, {family}" for name, (_, family) in torchvision_zoo.ZOO.items()})
GPT2_SHAPES = {"prefill128": (128, 0), "decode1024": (1, 1024)}  # (new tokens, past tokens)


def sanitize(name):
    """The file name export_models.py and engine-run give a tensor."""
    s = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return "_" + s if s in ("", ".", "..") else s


def log(msg):
    print(msg, flush=True)


def run(cmd, env=None, timeout=None, cwd=ROOT):
    return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True)


def first_error_line(proc):
    lines = [l for l in (proc.stderr + "\n" + proc.stdout).splitlines() if l.strip()]
    return lines[-1] if lines else f"exit status {proc.returncode}"


def model_path(model):
    return os.path.join(OUT, "models", model + ".onnx")


def case_dir(model, case):
    return os.path.join(OUT, "cases", model, case)


def ensure_export(model, cases):
    """Exports MODEL (full size, or bench size for an unseen export) and its reference CASES unless all
    are already in bench/out."""
    onnx_path = model_path(model)
    missing = [c for c in cases if not os.path.isdir(os.path.join(case_dir(model, c), "expected"))]
    if os.path.exists(onnx_path) and not missing:
        return
    os.makedirs(os.path.dirname(onnx_path), exist_ok=True)
    if model in torchvision_zoo.ZOO:
        log(f"exporting {model} (torchvision zoo) ...")
        torchvision_zoo.export(model, OUT, 224, quiet=True, onnx_path=onnx_path, case=case_dir(model, "batch1"))
        return
    if model in unseen_exports.CASES:
        unseen_exports.export(model, onnx_path, os.path.join(OUT, "cases", model), missing, log)
        return
    tmp = onnx_path + ".tmp.onnx"  # renamed only after a complete export, so a killed run leaves no half file
    cmd = [sys.executable, EXPORT, model, "--size", "full", "--out", tmp, "--quiet"]
    if missing:
        cmd += ["--reference-dir", os.path.join(OUT, "cases", model), "--case", *missing]
    log(f"exporting {model} (full){' with cases ' + ', '.join(missing) if missing else ''} ...")
    t0 = time.time()
    p = run(cmd)
    if p.returncode != 0:
        raise RuntimeError(f"export of {model} failed: {first_error_line(p)}")
    os.replace(tmp, onnx_path)
    log(f"  done in {time.time() - t0:.0f} s")


def graph_inputs(onnx_path):
    """[(name, numpy dtype, dims with None for symbolic)] of the graph's real inputs."""
    m = onnx.load(onnx_path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    out = []
    for v in m.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        out.append((v.name, onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t.elem_type], dims))
    return out, m


def ensure_gpt2_inputs(profile):
    """Writes bench/out/cases/gpt2/PROFILE/inputs/*.npy at the benchmark's sizes (idempotent, seeded)."""
    d = os.path.join(case_dir("gpt2", profile), "inputs")
    inputs, m = graph_inputs(model_path("gpt2"))
    if os.path.isdir(d) and all(os.path.exists(os.path.join(d, sanitize(n) + ".npy")) for n, _, _ in inputs):
        return
    seq, past = GPT2_SHAPES[profile]
    logits = next(o for o in m.graph.output if o.name == "logits")
    vocab = logits.type.tensor_type.shape.dim[-1].dim_value
    if vocab <= 0:
        raise RuntimeError("gpt2: the vocabulary size (last dim of 'logits') is not static")
    rng = np.random.default_rng(1234 + seq + past)
    os.makedirs(d, exist_ok=True)
    for name, dtype, dims in inputs:
        if name == "input_ids":
            a = rng.integers(0, vocab, size=(1, seq)).astype(dtype)
        else:  # past_key_i / past_value_i: [1, heads, past, head_dim] with heads, head_dim static
            if len(dims) != 4 or dims[1] is None or dims[3] is None:
                raise RuntimeError(f"gpt2: unexpected shape {dims} for input {name!r}")
            a = rng.standard_normal((1, dims[1], past, dims[3])).astype(dtype)
        np.save(os.path.join(d, sanitize(name) + ".npy"), np.ascontiguousarray(a))


def input_args(model, case):
    """[(name, path)] for every graph input of MODEL from CASE's inputs directory."""
    inputs, _ = graph_inputs(model_path(model))
    d = os.path.join(case_dir(model, case), "inputs")
    pairs = []
    for name, _, _ in inputs:
        p = os.path.join(d, sanitize(name) + ".npy")
        if not os.path.exists(p):
            raise RuntimeError(f"{model}/{case}: no input file {p}")
        pairs.append((name, p))
    return pairs


def run_ort(args, onnx_path, inputs, json_path, out_dir):
    cmd = ["node", os.path.join(BENCH, "ort_bench.js"), onnx_path, "--threads", str(args.threads),
           "--warmup", "1", "--iterations", str(args.iterations), "--json", json_path, "--output-dir", out_dir]
    for name, p in inputs:
        cmd += ["--input", f"{name}={p}"]
    for kv in args.ort_config:
        cmd += ["--config", kv]
    return cmd, dict(os.environ)


def run_kiln(args, onnx_path, inputs, json_path, out_dir):
    cmd = [args.engine_run, onnx_path, "--iterations", str(args.iterations), "--json", json_path,
           "--output-dir", out_dir]
    for name, p in inputs:
        cmd += ["--input", f"{name}={p}"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    env.update(kv.split("=", 1) for kv in args.kiln_env)
    return cmd, env


def run_kiln_unfused(args, onnx_path, inputs, json_path, out_dir):
    """kiln with attention fusion off (what `fusions: {attention: off}` does in a build config)."""
    cmd, env = run_kiln(args, onnx_path, inputs, json_path, out_dir)
    return cmd + ["--disable-pass", "attention_fusion"], env


def run_kiln_base(args, onnx_path, inputs, json_path, out_dir):
    """A second engine-run build (--baseline-engine-run, e.g. main's) in the same alternation: before/after."""
    cmd, env = run_kiln(args, onnx_path, inputs, json_path, out_dir)
    return [args.baseline_engine_run] + cmd[1:], env


def compare_dirs(test_dir, ref_dir):
    """{output file: {max_abs_err, max_abs_ref} or {error}} for every .npy in REF_DIR."""
    res = {}
    for f in sorted(os.listdir(ref_dir)):
        if not f.endswith(".npy"):
            continue
        ref = np.load(os.path.join(ref_dir, f))
        p = os.path.join(test_dir, f)
        if not os.path.exists(p):
            res[f[:-4]] = {"error": "missing"}
            continue
        got = np.load(p)
        if got.shape != ref.shape:
            res[f[:-4]] = {"error": f"shape {list(got.shape)} vs {list(ref.shape)}"}
            continue
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        res[f[:-4]] = {
            "max_abs_err": float(diff.max()) if diff.size else 0.0,
            "max_abs_ref": float(np.abs(ref.astype(np.float64)).max()) if ref.size else 0.0,
            "dtype": f"{got.dtype} vs {ref.dtype}" if got.dtype != ref.dtype else str(ref.dtype),
        }
    return res


def worst(cmp):
    """(max error over outputs, output name) or (None, error text)."""
    errs = [(v["max_abs_err"], k) for k, v in cmp.items() if "max_abs_err" in v]
    bad = [f"{k}: {v['error']}" for k, v in cmp.items() if "error" in v]
    if bad:
        return None, "; ".join(bad)
    if not errs:
        return None, "no outputs"
    return max(errs)


def bench_workload(args, model, profile, case):
    key = f"{model}/{profile}"
    onnx_path = model_path(model)
    inputs = input_args(model, case)
    run_dir = os.path.join(OUT, "runs", f"{model}_{profile}")
    shutil.rmtree(run_dir, ignore_errors=True)
    engines = {"ort": run_ort, "kiln": run_kiln}
    if args.fusion_off:
        engines["kiln_unfused"] = run_kiln_unfused
    if args.baseline_engine_run:
        engines["kiln_base"] = run_kiln_base
    rec = {"workload": key, "shape": WORKLOAD_NOTES[key], "rounds": []}
    failed = {}
    peaks = []
    for r in range(args.rounds):
        rnd = {}
        if args.peak_gflops is None:  # the machine's speed moves within a run: a peak per round, beside the engines
            peak = measure_peak_gflops(args.engine_run, args.threads)
            if peak:
                peaks.append(peak)
        for eng, make in engines.items():  # alternation: ORT then kiln within every round
            if eng in failed:
                continue
            json_path = os.path.join(run_dir, f"{eng}_round{r}.json")
            out_dir = os.path.join(run_dir, eng)
            os.makedirs(run_dir, exist_ok=True)
            cmd, env = make(args, onnx_path, inputs, json_path, out_dir)
            trace_path = os.path.join(run_dir, "kiln_layers.json")
            if r == 0 and eng == "kiln":  # one profiled run after the timed ones: the FLOPs of the compute floor
                cmd += ["--profile-layers", trace_path]
            if r == 0:
                rec[f"{eng}_command"] = " ".join(shlex.quote(c.replace(ROOT + os.sep, "")) for c in cmd)
            t0 = time.time()
            try:
                p = run(cmd, env=env, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                failed[eng] = f"timed out after {args.timeout} s"
                log(f"  {key} round {r + 1}: {eng} {failed[eng]}")
                continue
            wall = time.time() - t0
            if p.returncode != 0:
                failed[eng] = first_error_line(p)
                log(f"  {key} round {r + 1}: {eng} FAILED: {failed[eng]}")
                continue
            with open(json_path) as f:
                stats = json.load(f)
            lat = stats["latency_ms"]
            rnd[eng] = {"p50": lat["p50"], "p99": lat["p99"], "min": lat["min"], "max": lat["max"], "mean": lat["mean"],
                        "wall_s": round(wall, 1)}
            # kiln's per-run thread counts (engine-run --json): a round whose OpenMP team ran solo
            # (late probes) is told apart from one on a slow machine.
            threads = stats.get("threads_per_run")
            if threads is not None:
                rnd[eng]["threads_per_run"] = threads
            if r == 0 and eng == "kiln":
                rec["kiln_gflop"] = trace_gflop(trace_path)
            solo = f", {threads['solo_regions']:.1f} solo OpenMP regions/run" if threads and threads["solo_regions"] >= 0.05 else ""
            log(f"  {key} round {r + 1}/{args.rounds}: {eng:4s} p50 {lat['p50']:10.2f} ms "
                f"(min {lat['min']:.2f}, max {lat['max']:.2f}; process {wall:.0f} s{solo})")
        rec["rounds"].append(rnd)
    for eng in engines:
        p50s = [rnd[eng]["p50"] for rnd in rec["rounds"] if eng in rnd]
        rec[f"{eng}_p50_rounds"] = p50s
        rec[f"{eng}_p50"] = statistics.median(p50s) if p50s and eng not in failed else None
        p99s = [rnd[eng]["p99"] for rnd in rec["rounds"] if eng in rnd]
        rec[f"{eng}_p99_rounds"] = p99s
        rec[f"{eng}_p99"] = statistics.median(p99s) if p99s and eng not in failed else None
        rec[f"{eng}_error"] = failed.get(eng)
    ratio = lambda a, b: (a / b) if a and b else None
    rec["ratio_ort_over_kiln"] = ratio(rec["ort_p50"], rec["kiln_p50"])
    rec["ratio_ort_over_kiln_p99"] = ratio(rec["ort_p99"], rec["kiln_p99"])
    if args.fusion_off:
        rec["ratio_ort_over_kiln_unfused"] = ratio(rec["ort_p50"], rec.get("kiln_unfused_p50"))
        rec["ratio_ort_over_kiln_unfused_p99"] = ratio(rec["ort_p99"], rec.get("kiln_unfused_p99"))
    rec["peak_gflops_rounds"] = peaks
    peak = args.peak_gflops if args.peak_gflops is not None else (statistics.median(peaks) if peaks else None)
    rec["peak_gflops"] = peak
    if rec.get("kiln_gflop") and peak:
        rec["floor_ms"] = rec["kiln_gflop"] / peak * 1e3
        rec["ratio_ort_over_floor"] = ratio(rec["ort_p50"], rec["floor_ms"])

    ort_dir, kiln_dir = os.path.join(run_dir, "ort"), os.path.join(run_dir, "kiln")
    if os.path.isdir(ort_dir) and os.path.isdir(kiln_dir):
        rec["kiln_vs_ort"] = compare_dirs(kiln_dir, ort_dir)
    expected = os.path.join(case_dir(model, case), "expected")
    if os.path.isdir(expected) and os.path.isdir(ort_dir):
        rec["ort_vs_pytorch"] = compare_dirs(ort_dir, expected)
    if os.path.isdir(expected) and os.path.isdir(kiln_dir):
        rec["kiln_vs_pytorch"] = compare_dirs(kiln_dir, expected)
    return rec


def trace_gflop(path):
    """The GFLOP engine-run's per-layer trace counts (matmuls, convolutions, attention), or None."""
    try:
        with open(path) as f:
            return float(json.load(f)["otherData"]["gflop"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def measure_peak_gflops(engine_run, threads):
    """The f32 matmul peak: build/gemm-bench's oneDNN 1024^3 case (the best of 5), or None."""
    gemm = os.path.join(os.path.dirname(engine_run), "gemm-bench")
    if not os.access(gemm, os.X_OK):
        return None
    p = run([gemm, "--benchmark_filter=^onednn_peak", "--benchmark_repetitions=5", "--benchmark_format=json"],
            env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    try:
        rates = [b["GFLOP/s"] for b in json.loads(p.stdout)["benchmarks"] if b.get("run_type") == "iteration"]
    except (ValueError, KeyError):
        return None
    return max(rates) if rates else None


def fmt_ms(v):
    return "—" if v is None else f"{v:.2f}"


def fmt_err(cmp):
    if cmp is None:
        return "n/a"
    v, what = worst(cmp)
    return what if v is None else f"{v:.2e} ({what})"


def fmt_ratio(v):
    return "—" if v is None else f"{v:.3f}"


def table(records, p99=False):
    unfused = any("kiln_unfused_p50" in rec for rec in records)
    head = ["model/profile", "shape", "ORT p50 ms", "kiln p50 ms", "ORT/kiln"]
    if unfused:
        head += ["kiln attention-off p50 ms", "ORT/kiln attention-off"]
    if p99:
        head += ["ORT p99 ms", "kiln p99 ms", "ORT/kiln p99"] + (["ORT/kiln attention-off p99"] if unfused else [])
    head += ["max |kiln-ORT| (output)", "max |ORT-PyTorch| (output)", "max |kiln-PyTorch| (output)"]
    rows = []
    for rec in records:
        row = [
            rec["workload"], rec["shape"],
            fmt_ms(rec["ort_p50"]) if not rec["ort_error"] else "FAILED",
            fmt_ms(rec["kiln_p50"]) if not rec["kiln_error"] else "FAILED",
            fmt_ratio(rec["ratio_ort_over_kiln"]),
        ]
        if unfused:
            row += [fmt_ms(rec.get("kiln_unfused_p50")) if not rec.get("kiln_unfused_error") else "FAILED",
                    fmt_ratio(rec.get("ratio_ort_over_kiln_unfused"))]
        if p99:
            row += [fmt_ms(rec.get("ort_p99")), fmt_ms(rec.get("kiln_p99")), fmt_ratio(rec.get("ratio_ort_over_kiln_p99"))]
            row += [fmt_ratio(rec.get("ratio_ort_over_kiln_unfused_p99"))] if unfused else []
        row += [fmt_err(rec.get("kiln_vs_ort")), fmt_err(rec.get("ort_vs_pytorch")), fmt_err(rec.get("kiln_vs_pytorch"))]
        rows.append(row)
    return head, rows


def text_table(head, rows):
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(w[i]) for i, c in enumerate(r))
    return "\n".join([line(head), line(["-" * x for x in w])] + [line(r) for r in rows])


def md_table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def machine_info():
    info = {}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for l in lscpu.splitlines():
            k, _, v = l.partition(":")
            if k.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "Flags"):
                info[k.strip()] = v.strip()
    except OSError:
        pass
    flags = info.pop("Flags", "").split()
    info["simd"] = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags)
    info["online_cpus"] = os.cpu_count()
    return info


def versions(args):
    v = {}
    p = run(["node", "--version"])
    v["node"] = p.stdout.strip()
    p = run(["node", "-e", "console.log(require('onnxruntime-node').env.versions.common)"], cwd=BENCH)
    v["onnxruntime-node"] = p.stdout.strip() if p.returncode == 0 else f"unavailable: {first_error_line(p)}"
    p = run(["git", "rev-parse", "--short", "HEAD"])
    v["kiln_commit"] = p.stdout.strip()
    # The result files this script (re)writes do not count as changes to the code being measured.
    p = run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results*.json",
             ":!bench/RESULTS*.md"])
    v["kiln_worktree_dirty"] = bool(p.stdout.strip())
    return v


PEER_BEGIN = "<!-- run_peer_bench.py writes from here to the end marker; earlier runs are in git and below -->"
PEER_END = "<!-- end of run_peer_bench.py's section -->"


def floor_table(records):
    """The compute floor of every workload kiln ran: its counted GFLOP at the f32 matmul peak."""
    head = ["model/profile", "GFLOP", "peak GFLOP/s", "floor ms", "kiln p50 / floor", "ORT p50 / floor"]
    rows = []
    for rec in records:
        if rec.get("floor_ms"):
            kiln = rec["kiln_p50"] / rec["floor_ms"] if rec.get("kiln_p50") else None
            rows.append([rec["workload"], f"{rec['kiln_gflop']:.3f}", f"{rec['peak_gflops']:.1f}", f"{rec['floor_ms']:.2f}", fmt_ratio(kiln),
                         fmt_ratio(rec.get("ratio_ort_over_floor"))])
    return head, rows


def write_markdown(path, result, head, rows):
    """Writes the run as PATH's section between PEER_BEGIN and PEER_END, keeping the rest of the file
    (bench/RESULTS.md holds other dated measurements); a file without the markers gets the section
    appended, a missing file is created."""
    m = result["machine"]
    lines = [
        "## Peer benchmark: ONNX Runtime vs kiln (CPU), latest run",
        "",
        f"Generated by `bench/run_peer_bench.py` on {result['finished']}. Command:",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"- Machine: {m.get('Model name', '?')}, {m.get('CPU(s)', '?')} CPUs "
        f"({m.get('Core(s) per socket', '?')} cores/socket, {m.get('Thread(s) per core', '?')} threads/core), "
        f"SIMD: {m.get('simd') or '?'}; shared with other work.",
        f"- Load average (1, 5, 15 min) at start: {', '.join(f'{x:.2f}' for x in result['loadavg_start'])}; "
        f"at end: {', '.join(f'{x:.2f}' for x in result['loadavg_end'])}.",
        f"- onnxruntime-node {result['versions']['onnxruntime-node']} (node {result['versions']['node']}), "
        f"kiln commit {result['versions']['kiln_commit']}"
        f"{' (+ uncommitted changes)' if result['versions']['kiln_worktree_dirty'] else ''}.",
        f"- {result['rounds']} rounds × {result['iterations']} timed iterations per engine per round, "
        f"1 warm-up run before each; {result['threads']} threads for both (ORT intraOpNumThreads, "
        "interOpNumThreads 1, graphOptimizationLevel 'all'; kiln OMP_NUM_THREADS). "
        "ORT and kiln alternate (ORT, kiln, ORT, kiln, ...) on the same .onnx and input files.",
        f"- Co-tenant: {'one spinning process (busy loop) for the whole run' if result.get('busy_loop') else 'none'}. "
        "'attention-off' = kiln built with attention fusion disabled (`--disable-pass attention_fusion`, as "
        "`fusions: {attention: off}` in a build config).",
        f"- kiln environment: {' '.join(['OMP_NUM_THREADS=' + str(result['threads'])] + result['kiln_env'])}; "
        f"ORT session config entries: {', '.join(result['ort_config']) or 'none (defaults)'}.",
        "- p50 = median over rounds of each round's p50. ORT/kiln > 1 means kiln is faster. Session creation "
        "(ORT) and engine building (kiln) are not timed. ORT's time is one `await session.run(feeds)` of "
        "onnxruntime-node, so it includes the Node binding's per-call work (wrapping the inputs, turning the "
        "outputs into JS typed arrays); kiln's is one `ExecutionContext::run()` inside engine-run.",
        "- max |kiln-ORT|: largest absolute difference over all outputs (named: the output where it occurs). "
        "max |ORT-PyTorch|: ORT against the PyTorch outputs the export script wrote (n/a for gpt2, whose "
        "inputs this script generates).",
    ]
    if result.get("p99"):
        lines.append("- p99 = median over rounds of each round's p99 (nearest rank over that round's "
                     f"{result['iterations']} timed runs).")
    lines += [
        "",
        md_table(head, rows),
        "",
        "Per-round p50s (ms):",
        "",
        "| model/profile | ORT | kiln |",
        "|---|---|---|",
    ]
    for rec in result["workloads"]:
        lines.append(f"| {rec['workload']} | {', '.join(f'{x:.2f}' for x in rec['ort_p50_rounds'])} | "
                     f"{', '.join(f'{x:.2f}' for x in rec['kiln_p50_rounds'])} |")
    fhead, frows = floor_table(result["workloads"])
    if frows:
        lines += ["", "Compute floor: the FLOPs kiln's per-layer trace counts (matmuls, convolutions, attention; "
                  "elementwise work counts 0) at the f32 matmul peak (`build/gemm-bench` onednn_peak, the best of 5, "
                  "measured at the start of every round beside the engines: the median; with --busy, under the busy "
                  "loop too). No fp32 engine doing these FLOPs runs faster than the floor (Winograd convolutions do fewer: a bound for "
                  "the transformers, a guide for the CNNs), so 'ORT p50 / floor' is the largest ORT/kiln reachable.",
                  "", md_table(fhead, frows)]
    errs = [(rec["workload"], e, rec[f"{e}_error"]) for rec in result["workloads"] for e in ("ort", "kiln")
            if rec[f"{e}_error"]]
    if errs:
        lines += ["", "Failures:", ""] + [f"- {w}, {e}: `{msg}`" for w, e, msg in errs]
    lines += ["", "Full numbers (every round, every output's error): `bench/results.json`."]
    section = "\n".join([PEER_BEGIN] + lines + [PEER_END])
    text = open(path).read() if os.path.exists(path) else "# Measured results\n"
    begin, end = text.find(PEER_BEGIN), text.find(PEER_END)
    if begin >= 0 and end > begin:
        text = text[:begin] + section + text[end + len(PEER_END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", action="append", default=[],
                   help="keep workloads whose model or model/profile is NAME (repeatable)")
    p.add_argument("--engine-run", default=os.path.join(ROOT, "build", "engine-run"))
    p.add_argument("--baseline-engine-run", default=None, metavar="PATH",
                   help="also run this engine-run (e.g. main's build) as engine kiln_base in every round, for before/after "
                        "ratios from one alternated run (results.json: kiln_base_p50, kiln_base_p50_rounds)")
    p.add_argument("--kiln-env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment variable for engine-run (repeatable)")
    p.add_argument("--ort-config", action="append", default=[], metavar="KEY=VALUE",
                   help="ORT session config entry (repeatable)")
    p.add_argument("--timeout", type=int, default=3600, help="seconds allowed for one engine process")
    p.add_argument("--zoo", action="store_true", help="add the torchvision zoo (models/torchvision_zoo.py) at batch 1")
    p.add_argument("--zoo-only", action="store_true", help="run the zoo only")
    p.add_argument("--fusion-off", action="store_true",
                   help="also run kiln with attention fusion off (engine-run --disable-pass attention_fusion)")
    p.add_argument("--busy", action="store_true", help="keep one core busy with a spinning process during the runs "
                   "(implies --p99)")
    p.add_argument("--p99", action="store_true", help="add p99 columns (median over rounds of each round's p99; "
                   "use --iterations 100 or more, or a round's p99 is its slowest run)")
    p.add_argument("--peak-gflops", type=float, default=None, metavar="GFLOPS",
                   help="the f32 matmul peak of the compute floor (default: measured with build/gemm-bench at the "
                        "start of every round; 0 leaves the floor out)")
    p.add_argument("--results", default=os.path.join(BENCH, "results.json"))
    p.add_argument("--markdown", default=os.path.join(BENCH, "RESULTS.md"))
    a = p.parse_args(argv)
    if a.rounds < 1 or a.iterations < 1 or a.threads < 1:
        p.error("--rounds, --iterations and --threads must be >= 1")
    for kv in a.kiln_env + a.ort_config:
        if "=" not in kv or kv.startswith("="):
            p.error(f"'{kv}': expected NAME=VALUE")
    a.engine_run = os.path.abspath(a.engine_run)
    if not os.access(a.engine_run, os.X_OK):
        p.error(f"{a.engine_run} is not an executable; build it: cmake --build build --target engine-run")
    if not os.path.isdir(os.path.join(BENCH, "node_modules", "onnxruntime-node")):
        p.error("onnxruntime-node is not installed: cd bench && npm install --ignore-scripts")

    pool = ([] if a.zoo_only else WORKLOADS) + (ZOO_WORKLOADS if a.zoo or a.zoo_only else [])
    selected = [w for w in pool if not a.only or w[0] in a.only or f"{w[0]}/{w[1]}" in a.only]
    if not selected:
        p.error(f"--only matches nothing; workloads: {', '.join(f'{m}/{c}' for m, c, _ in WORKLOADS)}")

    command = "/usr/bin/python3 bench/run_peer_bench.py" + "".join(" " + shlex.quote(x) for x in sys.argv[1:])
    load_start = os.getloadavg()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    log(f"load average at start: {' '.join(f'{x:.2f}' for x in load_start)}")

    for model in dict.fromkeys(m for m, _, _ in selected):
        ensure_export(model, [c for m, _, c in selected if m == model and c])
    for model, profile, case in selected:
        if case is None:
            ensure_gpt2_inputs(profile)

    busy = None
    if a.busy:  # a co-tenant: one process spinning on the CPU for the whole run
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        log(f"busy loop running (pid {busy.pid})")
    records = []
    for model, profile, case in selected:
        log(f"{model}/{profile}:")
        try:
            records.append(bench_workload(a, model, profile, case or profile))
        except (RuntimeError, OSError, ValueError) as e:
            log(f"  ERROR: {e}")
            records.append({"workload": f"{model}/{profile}", "shape": WORKLOAD_NOTES[f"{model}/{profile}"],
                            "ort_p50": None, "kiln_p50": None, "ratio_ort_over_kiln": None,
                            "ort_p50_rounds": [], "kiln_p50_rounds": [], "ort_error": str(e),
                            "kiln_error": str(e), "rounds": []})

    if busy:
        busy.kill()
        busy.wait()
    load_end = os.getloadavg()
    result = {
        "command": command, "started": started,
        "finished": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(), "loadavg_start": list(load_start), "loadavg_end": list(load_end),
        "versions": versions(a), "rounds": a.rounds, "iterations": a.iterations, "threads": a.threads,
        "kiln_env": a.kiln_env, "ort_config": a.ort_config, "busy_loop": a.busy, "fusion_off": a.fusion_off,
        "p99": a.p99 or a.busy, "f32_peak_gflops_given": a.peak_gflops, "workloads": records,
    }
    head, rows = table(records, p99=result["p99"])
    print()
    print(text_table(head, rows))
    fhead, frows = floor_table(records)
    if frows:
        print("\ncompute floor (f32 matmul peak per workload):")
        print(text_table(fhead, frows))
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in load_end)}")
    with open(a.results, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    write_markdown(a.markdown, result, head, rows)
    log(f"wrote {os.path.relpath(a.results, ROOT)} and {os.path.relpath(a.markdown, ROOT)}")
    return 0 if all(not r["ort_error"] and not r["kiln_error"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
