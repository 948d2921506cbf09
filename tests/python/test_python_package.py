#!/usr/bin/python3
"""The Python package `kiln` against engine-run on the small ControlTransformer: the full and
incremental profiles and the streaming loop must match engine-run within 1e-6; plus the package's
contract (profiles, dtypes, errors, outputs that outlive later runs, the GIL released while kiln
runs, the queue, kiln.build, the log callback).

  test_python_package.py --engine-build PATH --engine-run PATH --workdir DIR [--expect-prefix P]

With --expect-prefix the imported `kiln` must come from under P (the install test runs it with
PYTHONPATH set to an installed prefix). Prints PASS/FAIL lines and `N passed, N failed`.
"""
import argparse
import os
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "models"))

import control_transformer as ct  # noqa: E402
import export_models  # noqa: E402

import kiln  # noqa: E402

ATOL = 1e-6
results = {"passed": 0, "failed": 0}


def check(label, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(("PASS " if ok else "FAIL ") + label + ("" if ok or not detail else ": " + detail))


def max_err(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return float("inf")
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0


def load_dir(d):
    return {f[:-4]: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".npy")}


def raises(fn, *needles):
    try:
        fn()
    except kiln.Error as e:
        msg = str(e)
        return ("\n" not in msg and all(n in msg for n in needles), msg, getattr(e, "code", None))
    except Exception as e:  # noqa: BLE001
        return (False, f"{type(e).__name__}: {e}", None)
    return (False, "no exception", None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-build", required=True)
    ap.add_argument("--engine-run", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--expect-prefix")
    a = ap.parse_args()
    work = os.path.abspath(a.workdir)
    os.makedirs(work, exist_ok=True)
    if a.expect_prefix:
        where = os.path.abspath(kiln.__file__)
        check(f"kiln imported from the installed prefix ({where})", where.startswith(os.path.abspath(a.expect_prefix)))

    # kiln.build: the engine-build flow from Python, its report as a dict; progress through the log callback.
    onnx_path = os.path.join(work, "ct.small.onnx")
    export_models.export("control_transformer", "small", onnx_path)
    engine_path = os.path.join(work, "ct.engine")
    log = []
    kiln.set_logger(lambda level, message: log.append((level, message)))
    report = kiln.build(os.path.join(REPO, "tests", "e2e", "configs", "control_transformer_small.yaml"),
                        overrides={"model": onnx_path, "streaming.steps": 2}, output=engine_path, benchmark=False)
    kiln.set_logger(None)
    check("kiln.build returns the report", report.get("engine_path") == engine_path and "profiles" in report and os.path.exists(engine_path),
          str(list(report)))
    check("kiln.build's progress reaches the Python log callback",
          any(level == 2 and "building plan" in m for level, m in log), str(log[:3]))
    ok, msg, code = raises(lambda: kiln.build(os.path.join(work, "absent.yaml")), "absent.yaml")
    check("kiln.build on a missing config raises kiln.Error", ok, msg)

    engine = kiln.Engine(engine_path)
    check("profiles", engine.profiles == ["full", "incremental"], str(engine.profiles))
    inc = engine.profile("incremental")
    shapes = {b["name"]: b for b in inc["inputs"]}
    kv = shapes["cached_kv"]
    check("input dtype and min/opt/max shapes", kv["dtype"] == np.float32 and kv["min"] == (2, 2, 1, 34, 64) and
          kv["opt"] == (2, 2, 1, 170, 64) and kv["max"] == (2, 2, 1, 170, 64) and shapes["mask"]["dtype"] == np.bool_ and
          shapes["batch_data_meta_vehiclestate_turn_signal"]["dtype"] == np.int64, str(kv))
    check("outputs", [o["name"] for o in inc["outputs"]] == ["predictions", "projected_embeddings", "kv_cache"], str(inc["outputs"]))

    # Full and incremental profiles: kiln.Context.run against engine-run on the same inputs.
    contexts = {}
    for profile in ("full", "incremental"):
        d = os.path.join(work, profile)
        r = subprocess.run([a.engine_run, engine_path, "--profile", profile, "--save-inputs", os.path.join(d, "in"),
                            "--output-dir", os.path.join(d, "ref")], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            check(f"[{profile}] engine-run", False, r.stderr.strip())
            continue
        inputs, ref = load_dir(os.path.join(d, "in")), load_dir(os.path.join(d, "ref"))
        ctx = contexts[profile] = engine.create_context(profile)
        for attempt in ("first run", "second run (outputs bound)"):
            out = ctx.run(inputs)
            errs = {n: max_err(out[n], ref[n]) for n in ref}
            check(f"[{profile}] {attempt} matches engine-run within {ATOL}", set(out) == set(ref) and max(errs.values()) <= ATOL, str(errs))

    # Returned arrays stay valid (and unchanged) after the next run; inputs are not modified.
    ctx = contexts.get("incremental")
    if ctx is not None:
        inputs = load_dir(os.path.join(work, "incremental", "in"))
        first = ctx.run(inputs)
        kept = {n: v.copy() for n, v in first.items()}
        other = dict(inputs)
        other["batch_data_cam_front_left"] = inputs["batch_data_cam_front_left"] + 1.0
        second = ctx.run(other)
        check("outputs of a run stay valid after the next run", all(np.array_equal(first[n], kept[n]) for n in kept) and
              not np.array_equal(second["predictions"], first["predictions"]))
        # A non-contiguous input is copied, with the same result.
        strided = dict(inputs)
        big = np.zeros(inputs["cached_kv"].shape[:-1] + (2 * inputs["cached_kv"].shape[-1],), np.float32)
        big[..., ::2] = inputs["cached_kv"]
        strided["cached_kv"] = big[..., ::2]
        check("a non-contiguous input gives the same outputs", max_err(ctx.run(strided)["kv_cache"], kept["kv_cache"]) == 0)

        # Errors: kiln.Error with the one-line message naming the input.
        bad = dict(inputs)
        bad["cached_kv"] = inputs["cached_kv"].astype(np.float64)
        ok, msg, code = raises(lambda: ctx.run(bad), "'cached_kv'", "float32", "float64")
        check("wrong dtype raises kiln.Error naming the input", ok and code == "invalid_argument", f"{msg} ({code})")
        missing = {k: v for k, v in inputs.items() if k != "mask"}
        ok, msg, code = raises(lambda: ctx.run(missing), "missing input 'mask'")
        check("missing input raises kiln.Error", ok, msg)
        outside = dict(inputs)
        outside["cached_kv"] = np.zeros((2, 2, 1, 200, 64), np.float32)
        ok, msg, code = raises(lambda: ctx.run(outside), "'cached_kv'", "outside profile 'incremental'")
        check("a shape outside the profile raises kiln.Error", ok, msg)
        ok, msg, code = raises(lambda: engine.create_context("nope"), "'nope'", "full", "incremental")
        check("unknown profile raises kiln.Error", ok, msg)
        ok, msg, code = raises(lambda: kiln.Engine(os.path.join(work, "absent.engine")), "absent.engine")
        check("missing engine file raises kiln.Error", ok, msg)
        check("kiln.Error is a RuntimeError", issubclass(kiln.Error, RuntimeError))

        # The GIL is released while kiln runs: with a long switch interval another Python thread only
        # gets to run when the main thread gives the GIL up, which the runs must do.
        counter = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                counter[0] += 1
        old = sys.getswitchinterval()
        sys.setswitchinterval(5.0)
        t = threading.Thread(target=spin)
        t.start()
        time.sleep(0.05)   # let the thread start (sleep releases the GIL)
        before = counter[0]
        runs, t_end = 0, time.perf_counter() + 10
        # The other thread needs the CPU as well as the GIL: on a busy machine it may take a few runs.
        while counter[0] == before and time.perf_counter() < t_end:
            ctx.run(inputs)
            runs += 1
        during = counter[0] - before
        stop.set()
        t.join()
        sys.setswitchinterval(old)
        check(f"the GIL is released during run() (another thread ran during {runs} runs)", during > 0,
              f"the other thread never ran during {runs} runs")

        # The queue: futures with the same outputs; a past deadline fails without running.
        with kiln.InferQueue(engine, "incremental", workers=2) as q:
            futures = [q.submit(inputs) for _ in range(8)]
            outs = [f.result(timeout=120) for f in futures]
            # Two workers run at once, so a run may get fewer threads than the direct one did, and
            # oneDNN's AVX2 gemm sums in an order that depends on its thread count: float
            # reassociation (~1e-8 here), not a different result.
            worst = max(max_err(o[n], kept[n]) / max(1.0, float(np.abs(kept[n]).max(initial=0.0))) for o in outs for n in kept)
            check("InferQueue results equal a direct run", worst <= 1e-6, f"max |queue - direct| / max(1, |direct|) {worst:.3g}")
            late = q.submit(inputs, deadline_ms=-1)
            try:
                late.result(timeout=60)
                check("a past deadline fails with deadline_exceeded", False, "no exception")
            except kiln.Error as e:
                check("a past deadline fails with deadline_exceeded", e.code == "deadline_exceeded" and "deadline exceeded" in str(e), str(e))
            stats = q.stats
        check("queue stats", stats["completed"] == 8 and stats["expired"] == 1, str(stats))

    # Streaming: engine-run --stream against kiln.StreamingSession on the same step folders.
    tpt, cold_t, steps = ct.tokens_per_timestep("small"), 6, 8
    batch = ct.random_batch("small", cold_t + steps, seed=11)
    stream_dir = os.path.join(work, "stream_in")
    step_inputs = []
    for k in range(steps + 1):
        lo, hi = (0, cold_t) if k == 0 else (cold_t + k - 1, cold_t + k)
        s = {n: np.ascontiguousarray(v) for n, v in ct.slice_timesteps(batch, lo, hi).items()}
        step_inputs.append(s)
        os.makedirs(os.path.join(stream_dir, f"step_{k:03d}"), exist_ok=True)
        for n, v in s.items():
            np.save(os.path.join(stream_dir, f"step_{k:03d}", n + ".npy"), v)
    ref_dir = os.path.join(work, "stream_ref")
    r = subprocess.run([a.engine_run, engine_path, "--stream", stream_dir, "--output-dir", ref_dir], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        check("engine-run --stream", False, r.stderr.strip())
    else:
        session = kiln.StreamingSession(engine)
        worst = 0.0
        for k, s in enumerate(step_inputs):
            out = session.cold_start(s) if k == 0 else session.step(s)
            ref = load_dir(os.path.join(ref_dir, f"step_{k:03d}"))
            got = {"predictions": out["predictions"], "kv_cache": session.state("kv_cache"),
                   "projected_embeddings": session.state("projected_embeddings")}
            worst = max(worst, max(max_err(got[n], ref[n]) for n in ref))
        check(f"streaming session matches engine-run --stream over {steps + 1} steps within {ATOL}", worst <= ATOL, f"max err {worst:.3g}")
        check("streaming state stayed in place", session.last_stats["in_place"], str(session.last_stats))

    session_checks(work)
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


def session_checks(work):
    """kiln.Session over seed 003's two entries sharing one buffer (models/stateful_cache.py)."""
    import stateful_cache  # noqa: E402
    d = os.path.join(work, "stateful")
    stateful_cache.export(d, max_batch=4, max_seq=6)
    config = os.path.join(d, "stateful.yaml")
    with open(config, "w") as f:
        f.write("output: stateful.engine\n"
                "entries:\n"
                "  set_cache: {model: set_cache.onnx, profiles: {default: {dims: {batch: {min: 1, opt: 2, max: 4}, seq: {min: 1, opt: 3, max: 6}}}}}\n"
                "  get_cache: {model: get_cache.onnx, profiles: {default: {dims: {batch: {min: 1, opt: 2, max: 4}, seq: {min: 1, opt: 3, max: 6}}}}}\n"
                "state:\n"
                "  cache:\n"
                "    - {entry: set_cache, input: cache, output: cache_out}\n"
                "    - {entry: get_cache, input: cache}\n")
    report = kiln.build(config, benchmark=False)
    session = kiln.Session(kiln.Engine(report["engine_path"]))
    check("Session lists the engine's state", session.state_names == ["cache"], str(session.state_names))
    data = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    session.run("set_cache", {"data": data})
    whole = session.read_state("cache")
    want = np.zeros((4, 6), np.float32)
    want[:2, :3] = data
    check("Session.run writes the state in place; read_state returns it", np.array_equal(whole, want) and
          session.last_stats["state_bytes_copied"] == 0, f"{whole} {session.last_stats}")
    got = session.run("get_cache", {"data": np.zeros((2, 3), np.float32)})
    check("another entry reads the state", np.array_equal(got.get("out"), data), str(got))
    mine = np.full((4, 6), 7.0, np.float32)
    session.write_state("cache", mine)
    got = session.run("get_cache", {"data": np.zeros((1, 2), np.float32)})
    check("write_state sets what the entries read", np.array_equal(got["out"], mine[:1, :2]), str(got))
    session.reset()
    check("reset zeroes the state", not session.read_state("cache").any())
    ok, msg, _ = raises(lambda: session.write_state("cache", np.zeros((3, 6), np.float32)), "state 'cache'", "[4, 6]")
    check("write_state with the wrong shape raises one line", ok, msg)
    ok, msg, _ = raises(lambda: session.run("decode", {"data": data}), "decode")
    check("an unknown entry raises one line", ok, msg)
    ok, msg, _ = raises(lambda: session.read_state("kv"), "no state 'kv'")
    check("an unknown state raises one line", ok, msg)


if __name__ == "__main__":
    sys.exit(main())
