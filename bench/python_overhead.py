#!/usr/bin/python3
"""What the Python package adds to a run: kiln.Context.run(dict) -> dict against the same run
timed in C++, on GPT-2 decode by default (one token on a 512-token past: the decode profile's opt
shape) with the engine's recorded input generators.

    /usr/bin/python3 models/export_models.py gpt2 --size full --out models/out/gpt2.onnx
    build/engine-build configs/gpt2.yaml --no-bench
    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--engine build/engines/gpt2.engine]
        [--profile decode] [--rounds 7] [--iterations 300] [--threads N]

Two contexts of the same engine run the same inputs, one run each in turn, so a busy neighbour on
this shared machine slows both alike: the Python one through ctx.run (inputs from the dict, fresh
output arrays every call, written in place by the kernels once the output shapes are known), the
C++ one through a loop inside the extension that times ctx->run() with its outputs left in the
context's arena, as a C++ program (or engine-run) does. Per round, the overhead is the difference of
the medians; the result is the median over rounds. Both use engine-run's OpenMP wait policy
(OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=10000) and --threads kernel threads (default: OpenMP's,
all cores). The overhead does not depend on the thread count, but with 2 threads on a shared 2-vCPU
host every parallel region can wait for a descheduled partner (runs of 0.6 ms took 10-20 ms while
neighbours were busy), so --threads 1 gives the steadier figure.
"""
import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# engine-run's wait policy (tools/omp_wait_policy.h) and the thread count: libgomp reads them when
# it loads, so the script starts itself again with them set.
if os.environ.get("KILN_BENCH_REEXEC") is None:
    env = dict(os.environ, KILN_BENCH_REEXEC="1")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("GOMP_SPINCOUNT", "10000")
    if "--threads" in sys.argv:
        env["OMP_NUM_THREADS"] = sys.argv[sys.argv.index("--threads") + 1]
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import kiln  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default=os.path.join(REPO, "build", "engines", "gpt2.engine"))
    ap.add_argument("--engine-run", default=os.path.join(REPO, "build", "engine-run"))
    ap.add_argument("--profile", default="decode")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--threads", type=int, help="kernel threads (OMP_NUM_THREADS); default: OpenMP's")
    a = ap.parse_args()
    inputs_dir = os.path.join(tempfile.mkdtemp(prefix="kiln_py_overhead_"), "in")
    subprocess.run([a.engine_run, a.engine, "--profile", a.profile, "--save-inputs", inputs_dir, "--quiet"], check=True)
    inputs = {f[:-4]: np.load(os.path.join(inputs_dir, f)) for f in os.listdir(inputs_dir)}
    engine = kiln.Engine(a.engine)
    py_ctx, cpp_ctx = engine.create_context(a.profile), engine.create_context(a.profile)
    out_bytes = sum(v.nbytes for v in py_ctx.run(inputs).values())
    for _ in range(30):   # warm: plans, bound outputs, caches
        py_ctx.run(inputs)
        cpp_ctx._time_runs(inputs, 1)
    print(f"{a.engine} profile '{a.profile}': inputs {', '.join(f'{k}{list(v.shape)}' for k, v in sorted(inputs.items()))}; "
          f"{len(py_ctx.output_names)} outputs, {out_bytes / 1e6:.2f} MB per run")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {os.environ.get('OMP_NUM_THREADS', 'all')} kernel threads, "
          f"load average {os.getloadavg()[0]:.2f}")
    overheads = []
    for r in range(a.rounds):
        py, cpp = [], []
        for i in range(a.iterations):
            if i % 2:
                cpp.extend(cpp_ctx._time_runs(inputs, 1))
            t0 = time.perf_counter()
            py_ctx.run(inputs)
            py.append(1e3 * (time.perf_counter() - t0))
            if i % 2 == 0:
                cpp.extend(cpp_ctx._time_runs(inputs, 1))
        p, c = float(np.median(py)), float(np.median(cpp))
        overheads.append(p - c)
        print(f"round {r + 1}: C++ run p50 {c:.4f} ms, Python ctx.run p50 {p:.4f} ms, overhead {1e3 * (p - c):+.1f} us")
    print(f"Python overhead per run: median {1e3 * float(np.median(overheads)):+.1f} us over {a.rounds} rounds of {a.iterations} "
          f"(min {1e3 * min(overheads):+.1f}, max {1e3 * max(overheads):+.1f}); load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
