#!/usr/bin/python3
"""ResNet-18 in int8 against fp32 (issue 18's done-when line): builds both engines from one model,
times them alternated in this one process (and ONNX Runtime fp32 through bench/ort_bench.js with
--ort), and measures the top-1 agreement of int8 with fp32 on inputs of the calibration distribution.

  /usr/bin/python3 bench/int8_resnet18.py [--model bench/out/models/resnet18.onnx] [--size full]
      [--method percentile] [--calib-batches 32] [--agreement 1000] [--rounds 7] [--iterations 10]
      [--ort] [--workdir /tmp/kiln_int8_resnet18] [--json FILE]

The model is models/resnet18.py's export (random weights with perturbed BatchNorm statistics; run
`/usr/bin/python3 models/export_models.py resnet18` when it is missing). Its input distribution is
that module's `images()`: standard normal pixels. Calibration reads `--calib-batches` such images
from a folder (calibration: {inputs: DIR}, batch 1 at the opt shape), 2 more are held out for the
build's error report; the agreement set is `--agreement` further images (other seeds), run in
batches of 25. Timing: batch 1, alternated rounds (A B, then B A, ...), each side one
engine-run (or ort_bench.js) process of 2 warm-ups and `--iterations` timed runs; the median over
rounds of each round's p50. A benchmark, not a test (not in ctest).
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "build" / "python"))
import kiln  # noqa: E402

IMAGE = {"full": 224, "small": 64}
EVAL_BATCH = 25


def images(size, batch, seed):
    """models/resnet18.py's images(): standard normal [batch, 3, S, S]."""
    s = IMAGE[size]
    return np.random.RandomState(seed).standard_normal((batch, 3, s, s)).astype(np.float32)


def write_config(work, model, precision, args):
    calib = ""
    if precision == "int8":
        calib = (f"calibration: {{method: {args.method}, inputs: calib, holdout: 2, batches: {args.calib_batches}, "
                 f"tolerance: 1.0, cache: resnet18.calib}}\n")
    text = f"""model: {model}
output: resnet18_{precision}.engine
precision: {precision}
{calib}threads: 0
profiles:
  b:
    dims: {{batch: {{min: 1, opt: 1, max: {EVAL_BATCH}}}}}
tactics: {{select: true, timing_cache: resnet18_{precision}.timing_cache}}
"""
    path = work / f"resnet18_{precision}.yaml"
    path.write_text(text)
    return path


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def kiln_p50(args, work, engine, x_path):
    # engine-run per round, as ONNX Runtime's side: one process each, so neither side inherits the
    # other's threads (an engine run inside this Python process was 3-5x slower on a 2-core VM).
    out = work / "kiln.json"
    cmd = [str(REPO / "build" / "engine-run"), str(engine), "--input", f"input={x_path}", "--threads", str(args.threads),
           "--warmup", "2", "--iterations", str(args.iterations), "--json", str(out), "-q"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.read_text())["latency_ms"]["p50"]


def ort_p50(args, work, x_path):
    out = work / "ort.json"
    cmd = ["node", str(REPO / "bench" / "ort_bench.js"), str(args.model), "--input", f"input={x_path}", "--threads", str(args.threads),
           "--warmup", "2", "--iterations", str(args.iterations), "--json", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO / "bench")
    return json.loads(out.read_text())["latency_ms"]["p50"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "bench" / "out" / "models" / "resnet18.onnx"))
    ap.add_argument("--size", default="full", choices=sorted(IMAGE))
    ap.add_argument("--method", default="percentile", help="calibration method: minmax | percentile | entropy")
    ap.add_argument("--calib-batches", type=int, default=32)
    ap.add_argument("--agreement", type=int, default=1000, help="images for the top-1 agreement (0: skip)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ort", action="store_true", help="also time ONNX Runtime fp32 (node bench/ort_bench.js) in the alternation")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    args.model = str(pathlib.Path(args.model).resolve())
    if not os.path.exists(args.model):
        sys.exit(f"int8_resnet18: no model at {args.model} (export it: /usr/bin/python3 models/export_models.py resnet18)")
    work = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="kiln_int8_resnet18_"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    # Calibration batches: seeds 1..B+2 (the last 2 held out); agreement images: seeds from 100000.
    for b in range(args.calib_batches + 2):
        (work / "calib" / f"{b:04d}").mkdir(parents=True)
        np.save(work / "calib" / f"{b:04d}" / "input.npy", images(args.size, 1, 1 + b))

    reports = {}
    for precision in ("fp32", "int8"):
        cfg = write_config(work, args.model, precision, args)
        reports[precision] = kiln.build(str(cfg), benchmark=False)
        print(f"built {precision}: {reports[precision]['engine_path']}", flush=True)
    err = reports["int8"]["profiles"]["b"].get("int8_vs_fp32", {})
    engines = {p: kiln.Engine(reports[p]["engine_path"]) for p in reports}
    ctxs = {p: engines[p].create_context("b") for p in engines}

    # Timing, batch 1, alternated.
    x1 = images(args.size, 1, 99999)
    x_path = work / "x1.npy"
    np.save(x_path, x1)
    sides = ["fp32", "int8"] + (["ort_fp32"] if args.ort else [])
    load_before = uptime()
    per_round = {s: [] for s in sides}
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for s in order:
            if s == "ort_fp32":
                per_round[s].append(ort_p50(args, work, x_path))
            else:
                per_round[s].append(kiln_p50(args, work, reports[s]["engine_path"], x_path))
    load_after = uptime()
    med = {s: statistics.median(v) for s, v in per_round.items()}

    # Top-1 agreement on images of the calibration distribution no calibration batch saw.
    agree = total = 0
    worst_rel = 0.0
    seed = 100000
    while total < args.agreement:
        n = min(EVAL_BATCH, args.agreement - total)
        x = images(args.size, n, seed)
        seed += 1
        y32 = ctxs["fp32"].run({"input": x})["logits"]
        y8 = ctxs["int8"].run({"input": x})["logits"]
        agree += int((y32.argmax(1) == y8.argmax(1)).sum())
        total += n
        worst_rel = max(worst_rel, float(np.abs(y8 - y32).max() / max(1.0, np.abs(y32).max())))

    print(f"\nresnet18 ({args.size}, batch 1, {args.threads} threads), calibration {args.method} on {args.calib_batches} images")
    print(f"load before: {load_before}\nload after:  {load_after}")
    for s in sides:
        print(f"  {s:9s} median of {args.rounds} round p50s ({args.iterations} runs each): {med[s]:8.2f} ms   rounds: "
              + " ".join(f"{v:.1f}" for v in per_round[s]))
    print(f"  int8 / fp32: {med['int8'] / med['fp32']:.3f}" + (f"   ort_fp32 / int8: {med['ort_fp32'] / med['int8']:.2f}x" if args.ort else ""))
    if err:
        print(f"  build report int8 vs fp32 (held-out): {json.dumps(err.get('outputs', err))}")
    if total:
        print(f"  top-1 agreement int8 vs fp32: {agree}/{total} = {100.0 * agree / total:.2f} %, "
              f"max |int8 - fp32| / max(1, max |fp32|) over them: {worst_rel:.4f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"median_ms": med, "rounds_ms": per_round, "load_before": load_before, "load_after": load_after,
                                                       "agreement": [agree, total], "worst_rel_err": worst_rel, "method": args.method}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
