#!/usr/bin/python3
"""End-to-end test of multi-profile engine files: engine-build, then engine-run --profile, against PyTorch.

  /usr/bin/python3 tests/e2e/test_engine_profiles.py --engine-build PATH --engine-run PATH --workdir DIR

Small model sizes (models/README.md), so it runs in a few minutes on 2 cores. Checks:
  1. ControlTransformer, tests/e2e/configs/control_transformer_small.yaml: profiles `full` (timesteps
     1..6..6 on an empty cache) and `incremental` (1 timestep on 1..5..5 cached timesteps). Built with
     --no-bench, and once more with a 3-iteration benchmark whose report JSON is checked (with the
     layer profile and GFLOP/s keys; test_layer_profile.py checks their values); the two builds share
     a timing cache, so they must write identical engine files. Each profile
     is run at its min, opt and max shapes and at shapes in between, against PyTorch references from
     `export_models.py --case full:T=N / incremental:T=1,cached=N` (the cache comes from a PyTorch
     full forward over the earlier timesteps), kiln_e2e.compare_arrays (atol 1e-4, rtol 1e-3).
  2. GPT-2, tests/e2e/configs/gpt2_small.yaml: profiles `prefill` (seq 1..16..32, past 0) and `decode`
     (seq 1, past 1..24..40), the same way (cases prefill:seq=N / decode:seq=1,past=N).
  3. Range errors: inputs outside a profile's range (and a fixed dim, inconsistent dims, an unknown
     profile) make engine-run exit non-zero with one stderr line naming the input and the range.
  4. Engine size: the engine file is at most 1.05 x the ONNX file (weights stored once for all profiles).
The last line is `N passed, N failed`; the exit status is non-zero if anything failed.
"""
import json
import os
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln_e2e  # noqa: E402  (puts models/ on the path)
from kiln_e2e import tail  # noqa: E402
import export_models  # noqa: E402

SIZE = "small"
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


def all_cases(model):
    return [c for cases in MODELS[model]["profiles"].values() for c, _ in cases]


def build(model, onnx_path, engine_path, report_path, args, res, bench):
    config = os.path.join(kiln_e2e.CONFIGS_DIR, MODELS[model]["config"])
    sets = [f"tactics.timing_cache={os.path.join(os.path.dirname(engine_path), model + '.timing_cache')}"]
    sets += ["benchmark.iterations=3", "benchmark.warmup=1"] if bench else []
    proc, secs = kiln_e2e.engine_build(args.engine_build, config, engine_path, model=onnx_path, report=report_path,
                                       bench=bench, sets=sets, timeout=args.timeout)
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
    return kiln_e2e.npy_paths(os.path.join(ref_dir, export_models.sanitize(case), "inputs"), input_names)


def compare_case(model, spec, engine_path, ref_dir, profile, case, point, workdir, args, res):
    inputs, expected = kiln_e2e.reference_case(ref_dir, case, spec)
    shapes = ", ".join(f"{n} {list(np.load(p, mmap_mode='r').shape)}" for n, p in inputs.items()
                       if n in ("cached_kv", "mask", "input_ids", "past_key_0", "batch_data_cam_front_left"))
    out_dir = os.path.join(workdir, "out", model, profile, export_models.sanitize(case))
    kiln_e2e.run_and_compare(res, f"[engine] {model} profile {profile} {case} ({point})", args.engine_run, engine_path,
                             inputs, expected, out_dir, profile=profile, note=shapes, timeout=args.timeout)


def pytorch_consistency(ref_dir, res):
    """The references themselves: full:T=6 and incremental(T=1 on 5 cached) agree in PyTorch."""
    full = os.path.join(ref_dir, "full_T_6", "expected")
    inc = os.path.join(ref_dir, "incremental_T_1_cached_5", "expected")
    names = ("predictions", "projected_embeddings", "kv_cache")
    problems, errors = kiln_e2e.compare_arrays(kiln_e2e.load_npys(full, names), kiln_e2e.load_npys(inc, names), 1e-5, 1e-5)
    res.check("[pytorch] control_transformer full:T=6 == incremental:T=1,cached=5", problems,
              "max abs err " + ", ".join(errors))


def expect_error(name, engine_run, engine_path, profile, inputs, must_contain, workdir, timeout, res):
    """engine-run must fail with one stderr line containing every string of must_contain (a tuple inside
    must_contain means any one of its strings): kiln_e2e.one_line_error_problems."""
    cmd = [engine_run, engine_path] + (["--profile", profile] if profile is not None else []) + kiln_e2e.input_args(inputs)
    cmd += ["--output-dir", os.path.join(workdir, "out", "errors")]
    proc, _ = kiln_e2e.run_cmd(cmd, timeout)
    res.check(f"[error] {name}", kiln_e2e.one_line_error_problems(proc, must_contain),
              f"exit {proc.returncode}: {proc.stderr.strip()[:400]!r}")


def write_inputs(workdir, tag, arrays):
    return kiln_e2e.save_npys(os.path.join(workdir, "bad_inputs", tag), arrays)


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
    p = kiln_e2e.tool_parser(__doc__)
    p.add_argument("--model", action="append", choices=list(MODELS), help="only these models (default: all)")
    args = kiln_e2e.parse_tool_args(p)
    workdir = args.workdir
    res = kiln_e2e.Results()
    start = time.perf_counter()

    for model in args.model or list(MODELS):
        print(f"== {model} ({SIZE})", flush=True)
        try:
            spec = export_models.spec_for(model, SIZE)
            onnx_path = os.path.join(workdir, f"{model}.{SIZE}.onnx")
            ref_dir = os.path.join(workdir, "ref", model)
            kiln_e2e.export_model(model, SIZE, onnx_path, ref_dir, all_cases(model), args.timeout, res)
            profiles = list(MODELS[model]["profiles"])
            engine = os.path.join(workdir, f"{model}.{SIZE}.engine")
            if not build(model, onnx_path, engine, engine + ".report.json", args, res, bench=False):
                continue
            check_report(model, engine + ".report.json", engine, profiles, False, res)
            if model == "control_transformer":
                bench_engine = os.path.join(workdir, f"{model}.{SIZE}.bench.engine")
                if build(model, onnx_path, bench_engine, bench_engine + ".report.json", args, res, bench=True):
                    check_report(model, bench_engine + ".report.json", bench_engine, profiles, True, res)
                    # Both builds share a timing cache, so the second times nothing and must write the same bytes.
                    with open(engine, "rb") as a, open(bench_engine, "rb") as b:
                        same = a.read() == b.read()
                    res.record(f"[deterministic] {model}: the two builds with one timing cache wrote identical engines",
                               same, "" if same else f"{engine} and {bench_engine} differ")
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

    res.timed("total", time.perf_counter() - start)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
