#!/usr/bin/python3
"""The seed's inference loop (seed 000, "Dual Model Inference Loop") on one kiln engine with two
profiles: a full forward over the first timesteps with an empty cache, then one incremental step
per new timestep on a sliding window of cached timesteps. Then the seed's own test cases: output
shapes, and incremental == full.

    /usr/bin/python3 examples/python/infer.py --engine build/engines/control_transformer.engine

The engine comes from `engine-build configs/incremental.yaml` (or any ControlTransformer engine with
`full` and `incremental` profiles). Inputs are random; shapes come from the engine's profiles.
"""
import argparse
import sys
import time

import numpy as np

import kiln

STATE_INPUTS = ("cached_projected_embeddings", "cached_kv", "mask")


def block_causal_mask(tpt, new_rows, total_rows):
    """[new, total] bool: query i (absolute row total-new+i) sees keys of its own and earlier timesteps."""
    rows = np.arange(total_rows - new_rows, total_rows)[:, None]
    keys = np.arange(total_rows)[None, :]
    return (keys // tpt) <= (rows // tpt)


def batch_inputs(profile):
    return [b for b in profile["inputs"] if b["name"] not in STATE_INPUTS]


def random_timesteps(profile, timesteps, rng):
    """Per-timestep inputs of `timesteps` timesteps (axis 1), like the seed's get_initial_batch()."""
    batch = {}
    for b in batch_inputs(profile):
        shape = list(b["opt"])
        shape[1] = timesteps
        if b["dtype"] == np.int64:
            batch[b["name"]] = rng.integers(0, 3, size=shape, dtype=np.int64)
        else:
            batch[b["name"]] = rng.random(shape, dtype=np.float32)
    return batch


def slice_timesteps(batch, start, stop):
    return {name: np.ascontiguousarray(a[:, start:stop]) for name, a in batch.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="build/engines/control_transformer.engine")
    ap.add_argument("--steps", type=int, default=10, help="incremental steps after the full forward")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    engine = kiln.Engine(a.engine)
    full_p, inc_p = engine.profile("full"), engine.profile("incremental")
    shapes = {b["name"]: b for b in inc_p["inputs"]}
    tpt = shapes["mask"]["opt"][0]                       # tokens per timestep: the step's new rows
    window = shapes["cached_kv"]["max"][3] // tpt        # cached timesteps the step profile allows
    cold_t = {b["name"]: b for b in full_p["inputs"]}["batch_data_cam_front_left"]["opt"][1]
    kv_shape = list(shapes["cached_kv"]["opt"])
    proj_shape = list(shapes["cached_projected_embeddings"]["opt"])
    print(f"engine {a.engine}: {tpt} tokens per timestep, cold start {cold_t} timesteps, window {window} timesteps")

    full = engine.create_context("full")
    incremental = engine.create_context("incremental")
    rng = np.random.default_rng(a.seed)
    stream = random_timesteps(inc_p, cold_t + a.steps, rng)

    # First inference (cold start): the full forward over cold_t timesteps, empty cache.
    rows = cold_t * tpt
    empty_proj = np.zeros(proj_shape[:1] + [0] + proj_shape[2:], np.float32)
    empty_kv = np.zeros(kv_shape[:3] + [0] + kv_shape[4:], np.float32)
    t0 = time.perf_counter()
    out = full.run({**slice_timesteps(stream, 0, cold_t), "cached_projected_embeddings": empty_proj, "cached_kv": empty_kv,
                    "mask": block_causal_mask(tpt, rows, rows)})
    print(f"full forward: {1e3 * (time.perf_counter() - t0):.2f} ms, predictions {out['predictions'].ravel()}")
    proj, kv = out["projected_embeddings"], out["kv_cache"]

    # Streaming loop: drop the oldest timestep, run one new one incrementally.
    latencies = []
    for k in range(a.steps):
        keep = min(proj.shape[1], window * tpt)
        proj, kv = np.ascontiguousarray(proj[:, -keep:]), np.ascontiguousarray(kv[:, :, :, -keep:])
        step = slice_timesteps(stream, cold_t + k, cold_t + k + 1)
        t0 = time.perf_counter()
        out = incremental.run({**step, "cached_projected_embeddings": proj, "cached_kv": kv,
                               "mask": block_causal_mask(tpt, tpt, keep + tpt)})
        latencies.append(1e3 * (time.perf_counter() - t0))
        proj, kv = out["projected_embeddings"], out["kv_cache"]
        print(f"step {k}: {latencies[-1]:.2f} ms on {keep} cached rows, predictions {out['predictions'].ravel()}")
    if latencies:
        print(f"incremental steps: median {np.median(latencies):.2f} ms")

    # The seed's test cases.
    failures = 0
    assert_shape = lambda name, got, want: (got == want) or print(f"FAIL {name}: shape {got}, want {want}")  # noqa: E731
    first = full.run({**slice_timesteps(stream, 0, cold_t), "cached_projected_embeddings": empty_proj, "cached_kv": empty_kv,
                      "mask": block_causal_mask(tpt, rows, rows)})
    failures += not assert_shape("test_full_forward predictions", first["predictions"].shape, (1, 1))
    failures += not assert_shape("test_full_forward proj_emb", first["projected_embeddings"].shape, (1, rows, proj_shape[2]))
    # incremental(last timestep on the cache of the others) must match full over all of them.
    before = full.run({**slice_timesteps(stream, 0, cold_t - 1), "cached_projected_embeddings": empty_proj, "cached_kv": empty_kv,
                       "mask": block_causal_mask(tpt, rows - tpt, rows - tpt)})
    incr = incremental.run({**slice_timesteps(stream, cold_t - 1, cold_t), "cached_projected_embeddings": before["projected_embeddings"],
                            "cached_kv": before["kv_cache"], "mask": block_causal_mask(tpt, tpt, rows)})
    failures += not assert_shape("test_incremental proj_emb", incr["projected_embeddings"].shape, (1, rows, proj_shape[2]))
    err = float(np.abs(incr["predictions"] - first["predictions"]).max())
    ok = err <= 1e-4
    print(f"{'PASS' if ok else 'FAIL'} test_incremental_matches_full: max |incremental - full| = {err:.3g} (atol 1e-4)")
    failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
