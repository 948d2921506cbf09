#!/usr/bin/python3
"""What the Python package adds to a run: kiln.Context.run(dict) against engine-run's C++ loop on
the same engine, profile and inputs (GPT-2 decode by default: one token on a 512-token past, the
profile's opt shape).

    /usr/bin/python3 models/export_models.py gpt2 --size full --out models/out/gpt2.onnx
    build/engine-build configs/gpt2.yaml --no-bench
    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--engine build/engines/gpt2.engine]
        [--profile decode] [--rounds 7] [--iterations 300]

Rounds alternate C++ and Python (which goes first alternates too); each side does 30 warm-up runs
and N timed runs and reports its median per-run time; the overhead is Python's median minus C++'s,
per round, and the result is the median of those. Both sides use the same OpenMP wait policy
(engine-run's: OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=10000). Python's run returns fresh numpy
arrays every call (written in place by the kernels once the output shapes are known), which is
part of what is measured.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The same wait policy as engine-run (tools/omp_wait_policy.h); libgomp reads it when it loads.
if os.environ.get("OMP_WAIT_POLICY") is None and os.environ.get("GOMP_SPINCOUNT") is None:
    os.environ.update(OMP_WAIT_POLICY="PASSIVE", GOMP_SPINCOUNT="10000")
    os.execv(sys.executable, [sys.executable] + sys.argv)

import kiln  # noqa: E402


def cpp_median(engine_run, engine, profile, inputs_dir, iterations):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [engine_run, engine, "--profile", profile, "--warmup", "30", "--iterations", str(iterations), "--export-times", f.name, "--quiet"]
        cmd += [arg for name in sorted(os.listdir(inputs_dir)) for arg in ("--input", f"{name[:-4]}={os.path.join(inputs_dir, name)}")]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        runs = json.load(open(f.name))["runs"]
    return float(np.median([r["latency_ms"] for r in runs]))


def python_median(ctx, inputs, iterations):
    for _ in range(30):
        ctx.run(inputs)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        ctx.run(inputs)
        times.append(1e3 * (time.perf_counter() - t0))
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default=os.path.join(REPO, "build", "engines", "gpt2.engine"))
    ap.add_argument("--engine-run", default=os.path.join(REPO, "build", "engine-run"))
    ap.add_argument("--profile", default="decode")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=300)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kiln_py_overhead_")
    inputs_dir = os.path.join(work, "in")
    subprocess.run([a.engine_run, a.engine, "--profile", a.profile, "--save-inputs", inputs_dir, "--quiet"], check=True)
    inputs = {f[:-4]: np.load(os.path.join(inputs_dir, f)) for f in os.listdir(inputs_dir)}
    engine = kiln.Engine(a.engine)
    ctx = engine.create_context(a.profile)
    out_bytes = sum(v.nbytes for v in ctx.run(inputs).values())
    print(f"{a.engine} profile '{a.profile}': inputs {', '.join(f'{k}{list(v.shape)}' for k, v in sorted(inputs.items()))}; "
          f"{len(ctx.output_names)} outputs, {out_bytes / 1e6:.2f} MB per run")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    overheads = []
    for r in range(a.rounds):
        if r % 2 == 0:
            c = cpp_median(a.engine_run, a.engine, a.profile, inputs_dir, a.iterations)
            p = python_median(ctx, inputs, a.iterations)
        else:
            p = python_median(ctx, inputs, a.iterations)
            c = cpp_median(a.engine_run, a.engine, a.profile, inputs_dir, a.iterations)
        overheads.append(p - c)
        print(f"round {r + 1}: C++ (engine-run) p50 {c:.4f} ms, Python ctx.run p50 {p:.4f} ms, overhead {1e3 * (p - c):+.1f} us")
    print(f"Python overhead per run: median {1e3 * float(np.median(overheads)):+.1f} us over {a.rounds} rounds "
          f"(min {1e3 * min(overheads):+.1f}, max {1e3 * max(overheads):+.1f}); load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
