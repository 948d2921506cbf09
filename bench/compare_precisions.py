#!/usr/bin/python3
"""fp32 against bf16 (and int8) on one engine-build config: builds each, alternating (fp32, bf16,
fp32, ...), and prints the median over rounds of each profile's p50 (and the streaming step p50),
the ratio to fp32 and the output errors against fp32 the report measured.

  /usr/bin/python3 bench/compare_precisions.py [--config configs/incremental.yaml] [--rounds 3]
      [--iterations 30] [--steps 30] [--engine-build build/engine-build] [--markdown FILE]
      [--precisions fp32,bf16[,int8]]     (int8 needs a config with a calibration section: configs/int8.yaml)

KILN_MAX_CPU_ISA=avx512_core_bf16 in the environment measures an AMX machine's no-AMX path.

A benchmark, not a test (not in ctest). The machine is shared: compare the ratio, not the times.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(args, precision, workdir, round_no):
    engine = os.path.join(workdir, f"{precision}_{round_no}.engine")
    report = engine + ".report.json"
    cmd = [args.engine_build, args.config, "--output", engine, "--report", report, "--set", f"precision={precision}",
           "--set", f"benchmark.iterations={args.iterations}", "--set", f"streaming.steps={args.steps}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"engine-build failed ({precision}): {proc.stderr.strip()[-2000:]}")
    with open(report) as f:
        rep = json.load(f)
    os.remove(engine)
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(REPO, "configs", "incremental.yaml"))
    ap.add_argument("--engine-build", default=os.path.join(REPO, "build", "engine-build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--markdown")
    ap.add_argument("--precisions", default="fp32,bf16")
    args = ap.parse_args()
    precisions = args.precisions.split(",")
    if precisions[0] != "fp32":
        ap.error("--precisions must start with fp32 (the baseline)")
    p50 = {p: {} for p in precisions}
    errors = {}
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            for precision in precisions:
                t0 = time.time()
                rep = build(args, precision, work, r)
                for name, prof in rep["profiles"].items():
                    p50[precision].setdefault(name, []).append(prof["latency_ms"]["p50"])
                    if f"{precision}_vs_fp32" in prof:
                        errors[f"{precision} {name}"] = prof[f"{precision}_vs_fp32"]
                if "streaming" in rep:
                    p50[precision].setdefault("streaming step", []).append(rep["streaming"]["latency_ms"]["p50"])
                print(f"round {r + 1} {precision}: " + ", ".join(f"{k} {v[-1]:.2f} ms" for k, v in p50[precision].items()) +
                      f" ({time.time() - t0:.0f} s)", flush=True)
    load.append(os.getloadavg())
    others = precisions[1:]
    lines = ["| profile | fp32 p50 ms | " + " | ".join(f"{p} p50 ms | {p} / fp32" for p in others) + " |",
             "|---|---|" + "---|---|" * len(others)]
    for name in p50["fp32"]:
        a = statistics.median(p50["fp32"][name])
        cells = [f"{statistics.median(p50[p][name]):.2f} | {statistics.median(p50[p][name]) / a:.2f}" for p in others]
        lines.append(f"| {name} | {a:.2f} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Medians over {args.rounds} alternating rounds of {args.iterations} timed runs (streaming: {args.steps} paced steps); "
                 f"load average at start {load[0][0]:.2f}, at end {load[1][0]:.2f}. Config: {os.path.relpath(args.config, REPO)}.")
    for name, errs in errors.items():
        lines.append(f"- vs fp32 ({name}): " + json.dumps(errs))
    text = "\n".join(lines)
    print("\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# fp32 vs " + ", ".join(others) + " (bench/compare_precisions.py)\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
