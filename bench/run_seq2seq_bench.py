#!/usr/bin/python3
"""Seq2seq peer benchmark: per-token decoder step latency of kiln's GreedyDecoder (engine-run
--generate: state in place, cache rows updated in place) against ONNX Runtime running the same three
ONNX files the seed's way (bench/ort_seq2seq.js: caches, cross K/V and cur_pos passed in and out of
every step), and kiln's step at two cache positions (build/seq2seq-step-bench).

  /usr/bin/python3 bench/run_seq2seq_bench.py [--sequences 8] [--max-new-tokens 64] [--rounds 5] [--threads 2]

Exports models/t5_seq2seq.py with N reference decodes into bench/out/seq2seq, builds
configs/seq2seq.yaml into bench/out/seq2seq/seq2seq.engine, then runs ORT and kiln IN ALTERNATION for R
rounds over the same sources. Each round gives one p50 of the per-step times per engine; the table
reports the median of those p50s and the ratio ORT/kiln (> 1: kiln is faster), and checks that both
engines generated PyTorch's tokens. kiln runs with OMP_NUM_THREADS=T, ORT with intraOpNumThreads T.
A benchmark, not a test.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUILD = os.path.join(REPO, "build")


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    out = os.path.join(HERE, "out", "seq2seq")
    run(["/usr/bin/python3", os.path.join(REPO, "models", "t5_seq2seq.py"), "--out-dir", out, "--reference", str(a.sequences),
         "--max-new-tokens", str(a.max_new_tokens)])
    engine = os.path.join(out, "seq2seq.engine")
    sets = []
    for e in ("encoder", "prefill", "step"):
        sets += ["--set", f"entries.{e}.model={os.path.join(out, e + '.onnx')}"]
    run([os.path.join(BUILD, "engine-build"), os.path.join(REPO, "configs", "seq2seq.yaml"), "--output", engine, "--no-bench"] + sets)
    refs = sorted(d for d in os.listdir(os.path.join(out, "ref")))
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    p50 = {"ort": [], "kiln": []}
    tokens_ok = {"ort": True, "kiln": True}
    n_steps = {"ort": 0, "kiln": 0}
    for r in range(a.rounds):
        ort_json = os.path.join(out, "ort_round.json")
        run(["node", os.path.join(HERE, "ort_seq2seq.js"), out, "--input-dir", os.path.join(out, "ref"), "--max-new-tokens",
             str(a.max_new_tokens), "--threads", str(a.threads), "--json", ort_json])
        o = json.load(open(ort_json))
        steps = [t for s in o["sequences"] for t in s["step_ms"]]
        p50["ort"].append(statistics.median(steps))
        n_steps["ort"] = len(steps)
        for s in o["sequences"]:
            tokens_ok["ort"] &= np.array_equal(np.array(s["tokens"]), np.load(os.path.join(out, "ref", s["name"], "tokens.npy")))
        steps = []
        for name in refs:
            d = os.path.join(out, "ref", name)
            gen = os.path.join(out, "kiln_gen", name)
            run([os.path.join(BUILD, "engine-run"), engine, "--generate", "--input", f"input_ids={d}/input_ids.npy", "--input",
                 f"attention_mask={d}/attention_mask.npy", "--max-new-tokens", str(a.max_new_tokens), "--output-dir", gen], env)
            steps += json.load(open(os.path.join(gen, "timings.json")))["step_ms"]
            tokens_ok["kiln"] &= np.array_equal(np.load(os.path.join(gen, "tokens.npy")), np.load(os.path.join(d, "tokens.npy")))
        p50["kiln"].append(statistics.median(steps))
        n_steps["kiln"] = len(steps)
        print(f"round {r + 1}: ort p50 {p50['ort'][-1]:.4f} ms, kiln p50 {p50['kiln'][-1]:.4f} ms", flush=True)
    med = {k: statistics.median(v) for k, v in p50.items()}
    print(f"\nper-token decoder step, {a.sequences} sequences x up to {a.max_new_tokens} tokens, {a.rounds} alternated rounds, "
          f"{a.threads} threads")
    print("| engine | steps per round | median of round p50s (ms) | tokens equal PyTorch's |")
    print("|---|---|---|---|")
    for k in ("ort", "kiln"):
        print(f"| {'ONNX Runtime ' + o['ort_version'] + ' (caches in/out)' if k == 'ort' else 'kiln GreedyDecoder (state in place)'} | "
              f"{n_steps[k]} | {med[k]:.4f} | {'yes' if tokens_ok[k] else 'NO'} |")
    print(f"ORT / kiln: {med['ort'] / med['kiln']:.2f}x")
    bench = os.path.join(BUILD, "seq2seq-step-bench")
    if os.path.exists(bench):
        print("\n" + run([bench, engine, "--positions", "16,120", "--iterations", "300", "--rounds", str(a.rounds)], env))


if __name__ == "__main__":
    main()
