#!/usr/bin/python3
"""End-to-end test of multi-profile engine files: engine-build, then engine-run --profile, against PyTorch.

  /usr/bin/python3 tests/e2e/test_engine_profiles.py --engine-build PATH --engine-run PATH --workdir DIR

Small model sizes (models/README.md), so it runs in a few minutes on 2 cores. Checks:
  1. ControlTransformer, tests/e2e/configs/control_transformer_small.yaml: profiles `full` (timesteps
     1..6..6 on an empty cache) and `incremental` (1 timestep on 1..5..5 cached timesteps). Built with
     --no-bench, and once more with a 3-iteration benchmark whose report JSON is checked (with the
     layer profile and GFLOP/s keys; test_layer_profile.py checks their values). Each profile
     is run at its min, opt and max shapes and at shapes in between, against PyTorch references from
     `export_models.py --case full:T=N / incremental:T=1,cached=N` (the cache comes from a PyTorch
     full forward over the earlier timesteps), np.allclose(atol 1e-4, rtol 1e-3).
  2. GPT-2, tests/e2e/configs/gpt2_small.yaml: profiles `prefill` (seq 1..16..32, past 0) and `decode`
     (seq 1, past 1..24..40), the same way (cases prefill:seq=N / decode:seq=1,past=N).
  3. Range errors: inputs outside a profile's range (and a fixed dim, inconsistent dims, an unknown
     profile) make engine-run exit non-zero with one stderr line naming the input and the range.
  4. Engine size: the engine file is at most 1.05 x the ONNX file (weights stored once for all profiles).
The last line is `N passed, N failed`; the exit status is non-zero if anything failed.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODELS_DIR = os.path.join(REPO, "models")
CONFIGS_DIR = os.path.join(HERE, "configs")
EXPORT_SCRIPT = os.path.join(MODELS_DIR, "export_models.py")
sys.path.insert(0, MODELS_DIR)

import export_models  # noqa: E402

SIZE = "small"
ATOL, RTOL = 1e-4, 1e-3
SIZE_FACTOR = 1.05
CT_TPT = 34  # control transformer tokens per timestep at the small size

# model -> config, and per profile the reference cases to run: (case, what it exercises).
MODELS = {
    "control_transformer": {
        "config": "control_transformer_small.yaml",
        "streaming": {"steps": 5},
        "profiles": {
            "full": [("full:T=1", "min"), ("full:T=3", "between"), ("full:T=5", "between"), ("full:T=6", "opt=max")],
            "incremental": [("incremental:T=1,cached=1", "min"), ("incremental:T=1,cached=3", "between"),
                            ("incremental:T=1,cached=5", "opt=max")],
        },
    },
    "gpt2": {
        "config": "gpt2_small.yaml",
        "profiles": {
            "prefill": [("prefill:seq=1", "min"), ("prefill:seq=7", "between"), ("prefill:seq=16", "opt"),
                        ("prefill:seq=32", "max")],
            "decode": [("decode:seq=1,past=1", "min"), ("decode:seq=1,past=9", "between"),
                       ("decode:seq=1,past=24", "opt"), ("decode:seq=1,past=40", "max")],
        },
    },
}


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = []
        self.timings = []

    def record(self, name, ok, detail=""):
        print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)

    def timed(self, label, seconds):
        self.timings.append((label, seconds))


def run_cmd(cmd, timeout):
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return proc, time.perf_counter() - start


def tail(text, n=2000):
    return text if len(text) <= n else "..." + text[-n:]


def all_cases(model):
    return [c for cases in MODELS[model]["profiles"].values() for c, _ in cases]


def prepare(model, workdir, timeout, res):
    """Exports MODEL.small.onnx and writes every reference case, unless an up-to-date export is there."""
    onnx_path = os.path.join(workdir, f"{model}.{SIZE}.onnx")
    ref_dir = os.path.join(workdir, "ref", model)
    cases = all_cases(model)
    newest_script = max(os.path.getmtime(os.path.join(MODELS_DIR, f))
                        for f in os.listdir(MODELS_DIR) if f.endswith(".py"))
    fresh = os.path.exists(onnx_path) and os.path.getmtime(onnx_path) > newest_script
    if fresh and all(os.path.isdir(os.path.join(ref_dir, export_models.sanitize(c), "expected")) for c in cases):
        print(f"  {model}: export and references in {workdir} are up to date", flush=True)
        return onnx_path, ref_dir
    cmd = [sys.executable, EXPORT_SCRIPT, model, "--size", SIZE, "--out", onnx_path,
           "--reference-dir", ref_dir, "--quiet", "--case"] + cases
    proc, secs = run_cmd(cmd, timeout)
    res.timed(f"export {model} + {len(cases)} PyTorch references", secs)
    if proc.returncode != 0:
        raise RuntimeError(f"export failed ({proc.returncode}): {' '.join(cmd)}\n{tail(proc.stderr)}")
    return onnx_path, ref_dir


def build(model, onnx_path, engine_path, report_path, args, res, bench):
    config = os.path.join(CONFIGS_DIR, MODELS[model]["config"])
    cmd = [args.engine_build, config, "--set", f"model={onnx_path}", "--output", engine_path, "--report", report_path]
    cmd += ["--set", "benchmark.iterations=3", "--set", "benchmark.warmup=1"] if bench else ["--no-bench"]
    print("  $ " + " ".join(cmd), flush=True)
    proc, secs = run_cmd(cmd, args.timeout)
    res.timed(f"engine-build {model}{' (benchmark 1+3 runs)' if bench else ' --no-bench'}", secs)
    name = f"[build] {model}{' with benchmark' if bench else ' --no-bench'}"
    ok = proc.returncode == 0 and os.path.exists(engine_path)
    res.record(name, ok, f"{secs:.1f} s" if ok else f"exit {proc.returncode}\n{tail(proc.stderr)}")
    if ok and bench:
        print("\n".join("    " + l for l in proc.stdout.strip().splitlines()), flush=True)
    return ok


def check_report(model, report_path, engine_path, profiles, bench, res):
    name = f"[report] {model}{' with benchmark' if bench else ' --no-bench'}"
    problems = []
    try:
        with open(report_path) as f:
            rep = json.load(f)
        eng = rep.get("engine", {})
        if os.path.realpath(eng.get("path", "")) != os.path.realpath(engine_path):
            problems.append(f"engine.path {eng.get('path')!r} is not {engine_path!r}")
        if eng.get("bytes") != os.path.getsize(engine_path):
            problems.append(f"engine.bytes {eng.get('bytes')} != file size {os.path.getsize(engine_path)}")
        if eng.get("profiles") != profiles:
            problems.append(f"engine.profiles {eng.get('profiles')} != {profiles}")
        for p in profiles:
            pr = rep.get("profiles", {}).get(p)
            if pr is None:
                problems.append(f"profiles.{p} missing")
                continue
            if not bench:
                if "latency_ms" in pr:
                    problems.append(f"profiles.{p} has latency_ms although --no-bench")
                continue
            lat = pr.get("latency_ms", {})
            keys = ["p50", "p90", "p99", "max", "mean"]
            missing = [k for k in keys if not isinstance(lat.get(k), (int, float))]
            if missing:
                problems.append(f"profiles.{p}.latency_ms lacks {missing}")
            elif not (0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"] and lat["mean"] <= lat["max"]):
                problems.append(f"profiles.{p}.latency_ms is not ordered 0 < p50 <= p90 <= p99 <= max: {lat}")
            if pr.get("iterations") != 3:
                problems.append(f"profiles.{p}.iterations = {pr.get('iterations')}, expected 3")
            if pr.get("budget_ms") != 100:
                problems.append(f"profiles.{p}.budget_ms = {pr.get('budget_ms')}, expected 100 (rate_hz 10)")
            wb = pr.get("within_budget")
            if not isinstance(wb, bool):
                problems.append(f"profiles.{p}.within_budget = {wb!r} is not a boolean")
            elif "p99" not in missing and isinstance(pr.get("budget_ms"), (int, float)) and wb != (lat["p99"] <= pr["budget_ms"]):
                problems.append(f"profiles.{p}.within_budget = {wb} contradicts p99 {lat['p99']} vs budget {pr['budget_ms']}")
            missing = [k for k in ("gflop", "gflops_per_s", "peak_fraction", "layers", "by_op_type") if k not in pr]
            if missing or not pr["layers"] or "matmul_peak_gflops_f32" not in rep.get("machine", {}):
                problems.append(f"profiles.{p} lacks {missing} or layers, or machine lacks matmul_peak_gflops_f32")
            if not problems:
                print(f"    {p}: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, budget {pr['budget_ms']} ms, "
                      f"within_budget {wb}", flush=True)
        if "streaming" in MODELS[model]:
            problems += check_streaming(rep.get("streaming"), bench)
    except Exception as e:  # noqa: BLE001 - any malformed report is a failure
        problems.append(f"{type(e).__name__}: {e}")
    res.record(name, not problems, "; ".join(problems))


def check_streaming(st, bench):
    """The report's streaming section: equivalence within 1e-4, and every paced step in place."""
    if not isinstance(st, dict):
        return [f"streaming section missing: {st!r}"]
    problems = []
    err = st.get("equivalence_max_abs_err")
    if not isinstance(err, (int, float)) or not 0 <= err <= 1e-4:
        problems.append(f"streaming.equivalence_max_abs_err = {err!r}, expected within [0, 1e-4]")
    if sorted(st.get("equivalence_err", {})) != ["kv_cache", "predictions", "projected_embeddings"]:
        problems.append(f"streaming.equivalence_err compares {sorted(st.get('equivalence_err', {}))}")
    if not bench:
        return problems
    steps = MODELS["control_transformer"]["streaming"]["steps"]
    if st.get("steps") != steps or st.get("in_place_steps") != steps:
        problems.append(f"streaming: {st.get('in_place_steps')} of {st.get('steps')} steps in place, expected {steps} of {steps}")
    lat = st.get("latency_ms", {})
    if not (0 < lat.get("p50", 0) <= lat.get("p99", 0) <= lat.get("max", 0)):
        problems.append(f"streaming.latency_ms not ordered: {lat}")
    # State moves O(new tokens): compactions average out to at most about one step's rows.
    appended, copied = st.get("state_bytes_appended_per_step", 0), st.get("state_bytes_copied_per_step", -1)
    if not (appended > 0 and 0 <= copied <= 2 * appended):
        problems.append(f"streaming copies {copied} bytes per step for {appended} appended (more than 2x)")
    misses = st.get("deadline_misses")
    if not isinstance(misses, int) or not 0 <= misses <= steps:
        problems.append(f"streaming.deadline_misses = {misses!r}")
    if not problems:
        print(f"    streaming: {steps} steps p50 {lat['p50']:.2f} ms, equivalence err {err:.2e}, "
              f"{copied / 1e3:.1f} kB copied / {appended / 1e3:.1f} kB appended per step", flush=True)
    return problems


def case_inputs(ref_dir, case, input_names):
    d = os.path.join(ref_dir, export_models.sanitize(case), "inputs")
    return {n: os.path.join(d, export_models.sanitize(n) + ".npy") for n in input_names}


def input_args(paths):
    args = []
    for name, path in paths.items():
        args += ["--input", f"{name}={path}"]
    return args


def compare_case(model, spec, engine_path, ref_dir, profile, case, point, workdir, args, res):
    inputs = case_inputs(ref_dir, case, spec.input_names)
    out_dir = os.path.join(workdir, "out", model, profile, export_models.sanitize(case))
    # Outputs of the second run: a steady-state run on the planned arena.
    cmd = [args.engine_run, engine_path, "--profile", profile] + input_args(inputs) + ["--output-dir", out_dir, "--iterations", "2"]
    proc, secs = run_cmd(cmd, args.timeout)
    res.timed(f"engine-run {model} {profile} {case}", secs)
    shapes = ", ".join(f"{n} {list(np.load(p, mmap_mode='r').shape)}" for n, p in inputs.items()
                       if n in ("cached_kv", "mask", "input_ids", "past_key_0", "batch_data_cam_front_left"))
    name = f"[engine] {model} profile {profile} {case} ({point})"
    if proc.returncode != 0:
        res.record(name, False, f"engine-run exit {proc.returncode} ({shapes}): {tail(proc.stderr)}")
        return
    exp_dir = os.path.join(ref_dir, export_models.sanitize(case), "expected")
    problems, errs = [], []
    for out in spec.output_names:
        fname = export_models.sanitize(out) + ".npy"
        expected = np.load(os.path.join(exp_dir, fname))
        got_path = os.path.join(out_dir, fname)
        if not os.path.exists(got_path):
            problems.append(f"{out}: no output file")
            continue
        got = np.load(got_path)
        if got.dtype != expected.dtype or got.shape != expected.shape:
            problems.append(f"{out}: {got.dtype} {list(got.shape)} instead of {expected.dtype} {list(expected.shape)}")
            continue
        err = float(np.max(np.abs(got.astype(np.float64) - expected))) if got.size else 0.0
        errs.append(f"{out} {err:.2e}")
        if not np.allclose(got, expected, atol=ATOL, rtol=RTOL):
            problems.append(f"{out}: max abs err {err:.3e} exceeds atol {ATOL} rtol {RTOL}")
    detail = f"{shapes}; {secs:.2f} s; max abs err " + ", ".join(errs)
    res.record(name, not problems, detail + ("; " + "; ".join(problems) if problems else ""))


def pytorch_consistency(ref_dir, res):
    """The references themselves: full:T=6 and incremental(T=1 on 5 cached) agree in PyTorch."""
    full = os.path.join(ref_dir, "full_T_6", "expected")
    inc = os.path.join(ref_dir, "incremental_T_1_cached_5", "expected")
    problems = []
    for out in ("predictions", "projected_embeddings", "kv_cache"):
        a, b = np.load(os.path.join(full, out + ".npy")), np.load(os.path.join(inc, out + ".npy"))
        if a.shape != b.shape or not np.allclose(a, b, atol=1e-5):
            problems.append(f"{out} differs: {a.shape} vs {b.shape}")
    res.record("[pytorch] control_transformer full:T=6 == incremental:T=1,cached=5", not problems, "; ".join(problems))


def expect_error(name, engine_run, engine_path, profile, inputs, must_contain, workdir, timeout, res):
    """engine-run must fail: exit != 0 and exactly one stderr line containing every string of must_contain
    (a tuple inside must_contain means any one of its strings)."""
    cmd = [engine_run, engine_path] + (["--profile", profile] if profile is not None else []) + input_args(inputs)
    cmd += ["--output-dir", os.path.join(workdir, "out", "errors")]
    proc, _ = run_cmd(cmd, timeout)
    lines = proc.stderr.strip().splitlines()
    problems = []
    if proc.returncode == 0:
        problems.append("exit status 0")
    elif proc.returncode < 0:
        problems.append(f"killed by signal {-proc.returncode}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines")
    for want in must_contain:
        alts = want if isinstance(want, tuple) else (want,)
        if not any(a in proc.stderr for a in alts):
            problems.append(f"stderr lacks {' or '.join(repr(a) for a in alts)}")
    detail = f"exit {proc.returncode}: {proc.stderr.strip()[:400]!r}"
    res.record(f"[error] {name}", not problems, detail + ("; " + "; ".join(problems) if problems else ""))


def write_inputs(workdir, tag, arrays):
    d = os.path.join(workdir, "bad_inputs", tag)
    os.makedirs(d, exist_ok=True)
    paths = {}
    for name, a in arrays.items():
        paths[name] = os.path.join(d, export_models.sanitize(name) + ".npy")
        np.save(paths[name], np.ascontiguousarray(a))
    return paths


def load_inputs(ref_dir, case, names):
    return {n: np.load(p) for n, p in case_inputs(ref_dir, case, names).items()}


def ct_range_errors(spec, engine_path, ref_dir, workdir, args, res):
    run = lambda name, profile, arrays, want: expect_error(  # noqa: E731
        name, args.engine_run, engine_path, profile, write_inputs(workdir, name.split()[0], arrays), want,
        workdir, args.timeout, res)
    names = spec.input_names
    batch_names = names[:7]

    # full with 7 timesteps: the T=6 inputs plus a copy of the last timestep.
    six = load_inputs(ref_dir, "full:T=6", names)
    seven = dict(six)
    for n in batch_names:
        seven[n] = np.concatenate([six[n], six[n][:, -1:]], axis=1)
    seven["mask"] = np.tril(np.ones((7 * CT_TPT, 7 * CT_TPT), bool))
    run("full_T7 (timesteps 7 > max 6)", "full", seven, [tuple(batch_names), "timesteps", "7", "[1, 6]"])

    # incremental with 6 cached timesteps (204 > max 170), and with an empty cache (0 < min 34).
    inc = load_inputs(ref_dir, "incremental:T=1,cached=5", names)
    full6 = load_inputs(ref_dir, "full:T=6", names)
    exp6 = {o: np.load(os.path.join(ref_dir, "full_T_6", "expected", o + ".npy")) for o in spec.output_names}
    big = dict(inc)
    big["cached_projected_embeddings"] = exp6["projected_embeddings"]
    big["cached_kv"] = exp6["kv_cache"]
    big["mask"] = np.ones((CT_TPT, 7 * CT_TPT), bool)
    run("inc_cached6 (cached_seq 204 > max 170)", "incremental", big,
        [("cached_projected_embeddings", "cached_kv"), "cached_seq", "204", "[34, 170]"])
    empty = dict(inc)
    empty["cached_projected_embeddings"] = np.zeros((1, 0, inc["cached_kv"].shape[-1]), np.float32)
    empty["cached_kv"] = np.zeros(inc["cached_kv"].shape[:3] + (0, inc["cached_kv"].shape[-1]), np.float32)
    empty["mask"] = np.ones((CT_TPT, CT_TPT), bool)
    run("inc_cached0 (cached_seq 0 < min 34)", "incremental", empty,
        [("cached_projected_embeddings", "cached_kv"), "cached_seq", "[34, 170]"])
    # incremental with 2 timesteps: timesteps is fixed at 1 in that profile.
    two = {n: (full6[n][:, :2] if n in batch_names else inc[n]) for n in names}
    two["mask"] = np.ones((2 * CT_TPT, inc["cached_kv"].shape[3] + 2 * CT_TPT), bool)
    run("inc_T2 (timesteps fixed at 1)", "incremental", two, [tuple(batch_names), "1", "2"])
    # Each input in range, but cached_kv (3 timesteps) disagrees with cached_projected_embeddings (5
    # timesteps) on the dim they share, 'cached_seq'. engine-run MODEL.onnx rejects this naming the dim
    # ("input 'cached_projected_embeddings' dim 1 ('cached_seq') is 170 but input 'cached_kv' dim 3 binds
    # 'cached_seq' to 102"); an engine profile must too, whether the mask agrees with cached_kv (else the
    # run silently returns projected_embeddings and kv_cache of different total_seq) or with neither.
    cached3 = load_inputs(ref_dir, "incremental:T=1,cached=3", names)
    mixed = dict(inc)
    mixed["cached_kv"] = cached3["cached_kv"]
    run("inc_inconsistent (cached_kv 102 vs embeddings 170, mask [34, 204])", "incremental", mixed,
        ["cached_seq", "102", "170"])
    mixed = dict(mixed)
    mixed["mask"] = cached3["mask"]
    run("inc_inconsistent2 (cached_kv 102 vs embeddings 170, mask [34, 136])", "incremental", mixed,
        ["cached_seq", "102", "170"])
    # Unknown profile, and no profile on a two-profile engine.
    paths = case_inputs(ref_dir, "full:T=6", names)
    expect_error("unknown profile 'nosuch'", args.engine_run, engine_path, "nosuch", paths,
                 ["nosuch", "full", "incremental"], workdir, args.timeout, res)
    expect_error("no --profile on a 2-profile engine", args.engine_run, engine_path, None, paths,
                 ["--profile", "full", "incremental"], workdir, args.timeout, res)


def gpt2_range_errors(spec, engine_path, ref_dir, workdir, args, res):
    run = lambda name, profile, arrays, want: expect_error(  # noqa: E731
        name, args.engine_run, engine_path, profile, write_inputs(workdir, name.split()[0], arrays), want,
        workdir, args.timeout, res)
    names = spec.input_names
    pre = load_inputs(ref_dir, "prefill:seq=32", names)
    pre33 = dict(pre)
    pre33["input_ids"] = np.concatenate([pre["input_ids"], pre["input_ids"][:, :1]], axis=1)
    run("prefill_seq33 (seq 33 > max 32)", "prefill", pre33, ["input_ids", "seq", "33", "[1, 32]"])
    dec = load_inputs(ref_dir, "decode:seq=1,past=40", names)
    dec41 = {n: (np.concatenate([a, a[:, :, :1]], axis=2) if n != "input_ids" else a) for n, a in dec.items()}
    run("decode_past41 (past 41 > max 40)", "decode", dec41, [tuple(names[1:]), "past", "41", "[1, 40]"])
    dec2 = dict(load_inputs(ref_dir, "decode:seq=1,past=24", names))
    dec2["input_ids"] = np.concatenate([dec2["input_ids"]] * 2, axis=1)
    run("decode_seq2 (seq fixed at 1)", "decode", dec2, ["input_ids", "1", "2"])
    # Layer 1's past (9 tokens) disagrees with layer 0's (24) on the shared dim 'past': must be an error
    # naming it, as with engine-run MODEL.onnx, not a silent run.
    mixed = dict(load_inputs(ref_dir, "decode:seq=1,past=24", names))
    past9 = load_inputs(ref_dir, "decode:seq=1,past=9", names)
    mixed["past_key_1"], mixed["past_value_1"] = past9["past_key_1"], past9["past_value_1"]
    run("decode_inconsistent (layer 1 past 9 vs layer 0 past 24)", "decode", mixed, ["past", "9", "24"])
    expect_error("gpt2 unknown profile 'full'", args.engine_run, engine_path, "full",
                 case_inputs(ref_dir, "prefill:seq=16", names), ["'full'", "prefill", "decode"], workdir,
                 args.timeout, res)


def check_size(model, engine_path, onnx_path, res):
    e, o = os.path.getsize(engine_path), os.path.getsize(onnx_path)
    res.record(f"[size] {model} engine <= {SIZE_FACTOR} x onnx", e <= o * SIZE_FACTOR,
               f"engine {e} bytes, onnx {o} bytes, ratio {e / o:.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine-build", required=True)
    p.add_argument("--engine-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--timeout", type=float, default=900, help="seconds per command")
    p.add_argument("--model", action="append", choices=list(MODELS), help="only these models (default: all)")
    args = p.parse_args()
    args.engine_build = os.path.abspath(args.engine_build)
    args.engine_run = os.path.abspath(args.engine_run)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    res = Results()
    start = time.perf_counter()

    for model in args.model or list(MODELS):
        print(f"== {model} ({SIZE})", flush=True)
        try:
            spec = export_models.spec_for(model, SIZE)
            onnx_path, ref_dir = prepare(model, workdir, args.timeout, res)
            profiles = list(MODELS[model]["profiles"])
            engine = os.path.join(workdir, f"{model}.{SIZE}.engine")
            if not build(model, onnx_path, engine, engine + ".report.json", args, res, bench=False):
                continue
            check_report(model, engine + ".report.json", engine, profiles, False, res)
            if model == "control_transformer":
                bench_engine = os.path.join(workdir, f"{model}.{SIZE}.bench.engine")
                if build(model, onnx_path, bench_engine, bench_engine + ".report.json", args, res, bench=True):
                    check_report(model, bench_engine + ".report.json", bench_engine, profiles, True, res)
                    same = open(engine, "rb").read() == open(bench_engine, "rb").read()
                    print(f"    (info) the two builds wrote {'identical' if same else 'different'} engine files",
                          flush=True)
                pytorch_consistency(ref_dir, res)
            check_size(model, engine, onnx_path, res)
            for profile, cases in MODELS[model]["profiles"].items():
                for case, point in cases:
                    compare_case(model, spec, engine, ref_dir, profile, case, point, workdir, args, res)
            errors = ct_range_errors if model == "control_transformer" else gpt2_range_errors
            errors(spec, engine, ref_dir, workdir, args, res)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            traceback.print_exc()
            res.record(f"[setup] {model}", False, f"{type(e).__name__}: {e}")

    print("\ntimings:")
    for label, secs in res.timings:
        print(f"  {secs:7.2f} s  {label}")
    print(f"  {time.perf_counter() - start:7.2f} s  total")
    if res.failed:
        print("failed: " + ", ".join(res.failed))
    print(f"{res.passed} passed, {len(res.failed)} failed")
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
