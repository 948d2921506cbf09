#!/usr/bin/python3
"""The streaming control loop against PyTorch: engine-run --stream on the small ControlTransformer.

  /usr/bin/python3 tests/e2e/test_streaming.py --engine-build PATH --engine-run PATH --workdir DIR

The loop of seed 000: one full forward over 6 timesteps, then one incremental step per new timestep
attending to the 5 most recent cached timesteps (the window drops the oldest). PyTorch runs the same
loop with the cache sliced to the window before every step. Every step's predictions and its state
(kv_cache, projected_embeddings) must match (kiln_e2e.compare_arrays: atol 1e-4, rtol 1e-3). engine-build's own
streaming checks (equivalence, paced benchmark) run as part of the build. `N passed, N failed`.
"""
import os
import re
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln_e2e  # noqa: E402  (puts models/ on the path)
import control_transformer as ct  # noqa: E402
import export_models  # noqa: E402

SIZE = "small"
COLD_T = 6
STEPS = 16  # incremental steps after the cold start: the window slides from the first, the ring wraps (512 rows) after ~9
WINDOW_STEPS = 5


def main():
    a = kiln_e2e.parse_tool_args(kiln_e2e.tool_parser(__doc__))
    onnx_path = os.path.join(a.workdir, "control_transformer.small.onnx")
    export_models.export("control_transformer", SIZE, onnx_path)
    engine = os.path.join(a.workdir, "ct_stream.engine")
    config = os.path.join(kiln_e2e.CONFIGS_DIR, "control_transformer_small.yaml")
    res = kiln_e2e.Results()
    build, _ = kiln_e2e.engine_build(a.engine_build, config, engine, model=onnx_path, bench=True,
                                     sets=["benchmark.iterations=2", "benchmark.warmup=1", "streaming.steps=3"],
                                     timeout=a.timeout)
    if build.returncode != 0:
        res.record("engine-build", False, kiln_e2e.tail(build.stderr, 3000))
        return res.finish()

    # The inputs of every step, and PyTorch's loop over them.
    model = ct.build_model(SIZE)
    tpt = ct.tokens_per_timestep(SIZE)
    batch = ct.random_batch(SIZE, COLD_T + STEPS, seed=7)
    stream_dir = os.path.join(a.workdir, "stream_in")
    out_dir = os.path.join(a.workdir, "stream_out")
    for d in (stream_dir, out_dir):  # no step folder or output of an earlier run may take part
        shutil.rmtree(d, ignore_errors=True)
    expected = []
    cache = ct.empty_cache(SIZE)
    for k in range(STEPS + 1):
        lo, hi = (0, COLD_T) if k == 0 else (COLD_T + k - 1, COLD_T + k)
        step_batch = ct.slice_timesteps(batch, lo, hi)
        step_dir = os.path.join(stream_dir, f"step_{k:03d}")
        os.makedirs(step_dir, exist_ok=True)
        for name, arr in step_batch.items():
            np.save(os.path.join(step_dir, name + ".npy"), np.ascontiguousarray(arr))
        if k > 0:  # the window keeps the most recent WINDOW_STEPS timesteps
            keep = WINDOW_STEPS * tpt
            cache = (cache[0][:, -keep:], cache[1][:, :, :, -keep:])
        out = ct.run(model, ct.make_inputs(SIZE, step_batch, *cache))
        expected.append(out)
        cache = (out["projected_embeddings"], out["kv_cache"])

    run, _ = kiln_e2e.run_cmd([a.engine_run, engine, "--stream", stream_dir, "--output-dir", out_dir], a.timeout)
    if run.returncode != 0:
        res.record("engine-run --stream", False, f"exit {run.returncode}: {run.stderr.strip()}")
        return res.finish()
    print(run.stdout.strip())
    for k, want in enumerate(expected):
        problems, errors = kiln_e2e.compare_outputs(want, os.path.join(out_dir, f"step_{k:03d}"))
        label = f"[stream] step {k} ({'cold start, 6 timesteps' if k == 0 else 'incremental on the 5-step window'})"
        res.check(label, problems, "max abs err " + ", ".join(errors))
    # One line per step, each keeping its state in place (the CLI appends "(state not in place)" otherwise).
    lines = [l for l in run.stdout.splitlines() if re.match(r"step_\d{3}: (cold start|step) ", l)]
    problems = [] if len(lines) == STEPS + 1 else [f"{len(lines)} step lines for {STEPS + 1} steps"]
    problems += [f"not in place: {l}" for l in lines if "not in place" in l]
    res.check("[stream] every step kept its state in place", problems)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
