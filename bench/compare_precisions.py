#!/usr/bin/python3
"""fp32 against bf16 on one engine-build config: builds both, alternating (fp32, bf16, fp32, ...),
and prints the median over rounds of each profile's p50 (and the streaming step p50), the ratio
bf16/fp32 and the bf16-vs-fp32 output errors the report measured.

  /usr/bin/python3 bench/compare_precisions.py [--config configs/incremental.yaml] [--rounds 3]
      [--iterations 30] [--steps 30] [--engine-build build/engine-build] [--markdown FILE]

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
    args = ap.parse_args()
    p50 = {"fp32": {}, "bf16": {}}
    errors = {}
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            for precision in ("fp32", "bf16"):
                t0 = time.time()
                rep = build(args, precision, work, r)
                for name, prof in rep["profiles"].items():
                    p50[precision].setdefault(name, []).append(prof["latency_ms"]["p50"])
                    if precision == "bf16" and "bf16_vs_fp32" in prof:
                        errors[name] = prof["bf16_vs_fp32"]
                if "streaming" in rep:
                    p50[precision].setdefault("streaming step", []).append(rep["streaming"]["latency_ms"]["p50"])
                print(f"round {r + 1} {precision}: " + ", ".join(f"{k} {v[-1]:.2f} ms" for k, v in p50[precision].items()) +
                      f" ({time.time() - t0:.0f} s)", flush=True)
    load.append(os.getloadavg())
    lines = ["| profile | fp32 p50 ms | bf16 p50 ms | bf16 / fp32 |", "|---|---|---|---|"]
    for name in p50["fp32"]:
        a, b = statistics.median(p50["fp32"][name]), statistics.median(p50["bf16"][name])
        lines.append(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.2f} |")
    lines.append("")
    lines.append(f"Medians over {args.rounds} alternating rounds of {args.iterations} timed runs (streaming: {args.steps} paced steps); "
                 f"load average at start {load[0][0]:.2f}, at end {load[1][0]:.2f}. Config: {os.path.relpath(args.config, REPO)}.")
    for name, errs in errors.items():
        lines.append(f"- bf16 vs fp32 ({name}): " + json.dumps(errs))
    text = "\n".join(lines)
    print("\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# fp32 vs bf16 (bench/compare_precisions.py)\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
