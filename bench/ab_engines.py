#!/usr/bin/python3
"""Alternated A/B(/ONNX Runtime) timing of prebuilt kiln engines on one model of the peer benchmark.

  /usr/bin/python3 bench/ab_engines.py MODEL LABEL=ENGINE_RUN:ENGINE [LABEL=ENGINE_RUN:ENGINE ...]
      [--rounds R] [--iterations N] [--threads T] [--ort] [--case DIR] [--onnx FILE]

Each round runs every engine once (`ENGINE_RUN ENGINE --iterations N --threads T --json`) and then,
with --ort, ONNX Runtime on the model (bench/ort_bench.js); the engines' order alternates between
rounds, so a change of load hits all of them. Printed: each round's p50s (--stat: another statistic),
then per label the median of its per-round values, the per-round ratio of the second label to the first (median), and ONNX
Runtime's median over each label's.

The inputs are the peer benchmark's case (bench/out/cases/MODEL/batch1/inputs/*.npy, written by
bench/run_peer_bench.py), the model bench/out/models/MODEL.onnx; --case and --onnx override them.
Labels name builds: e.g. A=/old/build/engine-run:/tmp/m-A.engine B=build/engine-run:/tmp/m-B.engine,
each engine built by its own engine-build (fresh timing cache, same YAML otherwise) on a quiet
machine, as tactic choices depend on the load at build time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="model name in bench/out/models and bench/out/cases")
    p.add_argument("engines", nargs="+", metavar="LABEL=ENGINE_RUN:ENGINE", help="a label, an engine-run binary and an engine file")
    p.add_argument("--rounds", type=int, default=5, help="rounds of alternation (default 5)")
    p.add_argument("--iterations", type=int, default=20, help="timed runs per engine per round (default 20)")
    p.add_argument("--threads", type=int, default=2, help="threads for kiln and ONNX Runtime (default 2)")
    p.add_argument("--ort", action="store_true", help="also time ONNX Runtime on the model each round")
    p.add_argument("--case", help="folder of input .npy files (default bench/out/cases/MODEL/batch1/inputs)")
    p.add_argument("--onnx", help="the ONNX model for ONNX Runtime (default bench/out/models/MODEL.onnx)")
    p.add_argument("--stat", choices=["p50", "p90", "p99", "mean"], default="p50",
                   help="the latency statistic of each round compared (default p50; p99 for tails, e.g. beside a busy loop)")
    a = p.parse_args(argv)

    specs = []
    for spec in a.engines:
        label, sep, rest = spec.partition("=")
        engine_run, sep2, engine = rest.partition(":")
        if not sep or not sep2 or not label or not engine_run or not engine:
            p.error(f"engine '{spec}': expected LABEL=ENGINE_RUN:ENGINE")
        for path in (engine_run, engine):
            if not os.path.exists(path):
                p.error(f"engine '{spec}': {path} does not exist")
        specs.append((label, engine_run, engine))
    case = a.case or os.path.join(HERE, "out", "cases", a.model, "batch1", "inputs")
    onnx = a.onnx or os.path.join(HERE, "out", "models", a.model + ".onnx")
    if not os.path.isdir(case):
        p.error(f"no input folder {case} (run bench/run_peer_bench.py once to write the cases, or pass --case)")
    inputs = [f"{os.path.splitext(f)[0]}={os.path.join(case, f)}" for f in sorted(os.listdir(case)) if f.endswith(".npy")]

    def stat(cmd):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            proc = subprocess.run(cmd + [out], capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"ab_engines: {' '.join(cmd[:2])} failed: {(proc.stderr.strip().splitlines() or ['exit %d' % proc.returncode])[-1]}")
            return json.load(open(out))["latency_ms"][a.stat]

    res = {}
    print("load average at start:", " ".join(open("/proc/loadavg").read().split()[:3]), flush=True)
    for r in range(a.rounds):
        order = specs if r % 2 == 0 else specs[::-1]
        for label, engine_run, engine in order:
            cmd = [engine_run, engine, "--iterations", str(a.iterations), "--threads", str(a.threads), "-q"]
            for i in inputs:
                cmd += ["-i", i]
            res.setdefault(label, []).append(stat(cmd + ["--json"]))
        if a.ort:
            cmd = ["node", os.path.join(HERE, "ort_bench.js"), onnx, "--threads", str(a.threads), "--iterations", str(a.iterations)]
            for i in inputs:
                cmd += ["--input", i]
            res.setdefault("ORT", []).append(stat(cmd + ["--json"]))
        print(f"round {r + 1}:", {k: round(v[-1], 2) for k, v in res.items()}, flush=True)
    print("load average at end:", " ".join(open("/proc/loadavg").read().split()[:3]))
    for k, v in res.items():
        print(f"{k}: median {a.stat} {statistics.median(v):.2f} ms  rounds {[round(x, 2) for x in v]}")
    labels = [s[0] for s in specs]
    if len(labels) >= 2:
        a0, b0 = labels[0], labels[1]
        print(f"{b0}/{a0} median per-round ratio {statistics.median([y / x for x, y in zip(res[a0], res[b0])]):.3f}")
    if a.ort:
        for k in labels:
            print(f"ORT/{k} {statistics.median(res['ORT']) / statistics.median(res[k]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
