#!/usr/bin/python3
"""The 10 Hz control loop on kiln's streaming session: a cold start over the first timesteps, then
one step per control period with only the new timestep's inputs; the session keeps the KV cache and
the projected embeddings in place and slides the window. Reports per-step latency against the
period and checks the session's predictions against the same loop run by hand on two contexts.

    /usr/bin/python3 examples/python/control_loop.py --engine build/engines/control_transformer.engine

The engine must record a `streaming` section (engine-build configs/incremental.yaml does).
"""
import argparse
import sys
import time

import numpy as np

import kiln
from infer import block_causal_mask, random_timesteps, slice_timesteps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="build/engines/control_transformer.engine")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rate-hz", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    engine = kiln.Engine(a.engine)
    spec = engine.info["streaming"]
    if spec is None:
        print(f"engine {a.engine} records no streaming section", file=sys.stderr)
        return 1
    cold_p, step_p = engine.profile(spec["cold_start"]), engine.profile(spec["step"])
    tpt, window = spec["tokens_per_step"], spec["max_steps"]
    cold_t = {b["name"]: b for b in cold_p["inputs"]}["batch_data_cam_front_left"]["opt"][1]
    rng = np.random.default_rng(a.seed)
    stream = random_timesteps(step_p, cold_t + a.steps, rng)

    session = kiln.StreamingSession(engine)
    period = 1.0 / a.rate_hz
    latencies, misses, predictions = [], 0, []
    out = session.cold_start(slice_timesteps(stream, 0, cold_t))
    predictions.append(out["predictions"])
    next_tick = time.perf_counter() + period
    for k in range(a.steps):
        time.sleep(max(0.0, next_tick - time.perf_counter()))
        t0 = time.perf_counter()
        out = session.step(slice_timesteps(stream, cold_t + k, cold_t + k + 1))
        latencies.append(1e3 * (time.perf_counter() - t0))
        misses += latencies[-1] > 1e3 * period
        predictions.append(out["predictions"])
        next_tick += period
    stats = session.last_stats
    print(f"{a.steps} steps at {a.rate_hz:g} Hz: p50 {np.percentile(latencies, 50):.2f} ms, p99 {np.percentile(latencies, 99):.2f} ms, "
          f"max {max(latencies):.2f} ms, {misses} over the {1e3 * period:.0f} ms period; state in place: {stats['in_place']}, "
          f"{stats['state_bytes_copied']} bytes copied in the last step")

    # The same loop by hand: contexts, explicit caches, the window sliced in numpy.
    full, step = engine.create_context(spec["cold_start"]), engine.create_context(spec["step"])
    kv_opt = list({b["name"]: b for b in step_p["inputs"]}["cached_kv"]["opt"])
    proj_opt = list({b["name"]: b for b in step_p["inputs"]}["cached_projected_embeddings"]["opt"])
    rows = cold_t * tpt
    out = full.run({**slice_timesteps(stream, 0, cold_t),
                    "cached_projected_embeddings": np.zeros(proj_opt[:1] + [0] + proj_opt[2:], np.float32),
                    "cached_kv": np.zeros(kv_opt[:3] + [0] + kv_opt[4:], np.float32), "mask": block_causal_mask(tpt, rows, rows)})
    worst = float(np.abs(out["predictions"] - predictions[0]).max())
    proj, kv = out["projected_embeddings"], out["kv_cache"]
    for k in range(a.steps):
        keep = min(proj.shape[1], window * tpt)
        proj, kv = np.ascontiguousarray(proj[:, -keep:]), np.ascontiguousarray(kv[:, :, :, -keep:])
        out = step.run({**slice_timesteps(stream, cold_t + k, cold_t + k + 1), "cached_projected_embeddings": proj, "cached_kv": kv,
                        "mask": block_causal_mask(tpt, tpt, keep + tpt)})
        proj, kv = out["projected_embeddings"], out["kv_cache"]
        worst = max(worst, float(np.abs(out["predictions"] - predictions[k + 1]).max()))
    ok = worst <= 1e-5
    print(f"{'PASS' if ok else 'FAIL'}: session vs hand-run loop, max |difference| in predictions {worst:.3g} (atol 1e-5)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
