#!/usr/bin/python3
"""kiln's greedy decode of the T5-style proof model against PyTorch's, token for token.

  /usr/bin/python3 tests/e2e/test_seq2seq.py --engine-build PATH --engine-run PATH --workdir DIR

models/t5_seq2seq.py exports the encoder, decoder prefill and decoder step (seed 001's layout) and
runs PyTorch's greedy decode over the same three modules for 20 source sequences of lengths 3..32.
engine-build builds configs/seq2seq.yaml (one engine, three entries, state buffers), and
`engine-run --generate` decodes each sequence with kiln::GreedyDecoder. Every sequence's tokens must
equal PyTorch's and every token's logits must be within 1e-4 (absolute); the cross-attention K/V is
written once per sequence, a step writes only its new cache rows and cur_pos (the fixed-size cache is
updated in place), and no state byte is copied. `N passed, N failed`.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln_e2e  # noqa: E402  (puts models/ on the path)
import t5_seq2seq  # noqa: E402

SEQUENCES = 20
MAX_NEW_TOKENS = 24
LOGITS_ATOL = 1e-4
_C = t5_seq2seq.CONFIG
# Per step: the new K and V row of each decoder layer (written in place at cur_pos) and cur_pos.
STEP_STATE_BYTES = 2 * _C["dec_layers"] * _C["heads"] * _C["d_kv"] * 4 + 8
CROSS_KV_BYTES = 2 * _C["dec_layers"] * _C["heads"] * _C["src_len"] * _C["d_kv"] * 4


def main():
    a = kiln_e2e.parse_tool_args(kiln_e2e.tool_parser(__doc__))
    res = kiln_e2e.Results()
    export_dir = os.path.join(a.workdir, "export")
    proc = subprocess.run(["/usr/bin/python3", os.path.join(kiln_e2e.MODELS_DIR, "t5_seq2seq.py"), "--out-dir", export_dir,
                           "--reference", str(SEQUENCES), "--max-new-tokens", str(MAX_NEW_TOKENS)],
                          capture_output=True, text=True, timeout=a.timeout)
    if proc.returncode != 0:
        res.record("PyTorch export and reference decode", False, kiln_e2e.tail(proc.stderr))
        return res.finish()
    engine = os.path.join(a.workdir, "seq2seq.engine")
    sets = [f"entries.{e}.model={os.path.join(export_dir, e + '.onnx')}" for e in ("encoder", "prefill", "step")]
    build, _ = kiln_e2e.engine_build(a.engine_build, os.path.join(kiln_e2e.REPO, "configs", "seq2seq.yaml"), engine,
                                     sets=sets, timeout=a.timeout)
    res.record("engine-build configs/seq2seq.yaml", build.returncode == 0, kiln_e2e.tail(build.stderr, 1500))
    if build.returncode != 0:
        return res.finish()
    # The step's self-attention over the fixed-size cache is one kiln::Attention per layer that reads
    # only keys [0, cur_pos] (a live length from the `positions <= cur_pos` mask); cross-attention fuses too.
    live = [line for line in build.stderr.splitlines() if "'step/default'] attention_fusion: fused Softmax" in line and "live length" in line]
    res.record("the step's self-attention fuses with a live length",
               len(live) == _C["dec_layers"] and "'step/default'] attention fusion: 4 of 4 attention sites fused" in build.stderr,
               "\n".join(live) or kiln_e2e.tail(build.stderr, 1500))
    sizes = sum(os.path.getsize(os.path.join(export_dir, e + ".onnx")) for e in ("encoder", "prefill", "step"))
    res.record("shared weights stored once", os.path.getsize(engine) < 0.75 * sizes,
               f"engine {os.path.getsize(engine)} bytes, the three ONNX files {sizes}")

    worst, total_tokens = 0.0, 0
    for i in range(SEQUENCES):
        ref = os.path.join(export_dir, "ref", f"{i:03d}")
        out = os.path.join(a.workdir, "generate", f"{i:03d}")
        run, _ = kiln_e2e.run_cmd([a.engine_run, engine, "--generate", "--input", f"input_ids={ref}/input_ids.npy",
                                   "--input", f"attention_mask={ref}/attention_mask.npy", "--max-new-tokens", str(MAX_NEW_TOKENS),
                                   "--output-dir", out], a.timeout)
        length = int(np.load(os.path.join(ref, "attention_mask.npy")).sum())
        label = f"sequence {i:02d} (source length {length})"
        if run.returncode != 0:
            res.record(label, False, f"exit {run.returncode}: {run.stderr.strip()}")
            continue
        want_tokens, got_tokens = np.load(os.path.join(ref, "tokens.npy")), np.load(os.path.join(out, "tokens.npy"))
        want_logits, got_logits = np.load(os.path.join(ref, "logits.npy")), np.load(os.path.join(out, "logits.npy"))
        problems = []
        err = float("nan")
        if got_tokens.dtype != np.int64 or not np.array_equal(got_tokens, want_tokens):
            problems.append(f"tokens {got_tokens.tolist()} != PyTorch's {want_tokens.tolist()}")
        if got_logits.shape != want_logits.shape:
            problems.append(f"logits shape {got_logits.shape} != {want_logits.shape}")
        else:
            err = float(np.abs(got_logits - want_logits).max())
            worst = max(worst, err)
            if not err <= LOGITS_ATOL:
                problems.append(f"logits max abs err {err:.3g} > {LOGITS_ATOL}")
        timings = json.load(open(os.path.join(out, "timings.json")))
        if timings["state_bytes_copied"] != 0:
            problems.append(f"{timings['state_bytes_copied']} state bytes copied")
        if timings["cross_kv_bytes_written_once"] != CROSS_KV_BYTES:
            problems.append(f"cross-attention K/V bytes written {timings['cross_kv_bytes_written_once']}, expected {CROSS_KV_BYTES} once")
        if len(got_tokens) > 1 and timings["step_state_bytes_written"] != STEP_STATE_BYTES:
            problems.append(f"a step wrote {timings['step_state_bytes_written']} state bytes; the new K/V rows and cur_pos are "
                            f"{STEP_STATE_BYTES}")
        total_tokens += len(got_tokens)
        res.check(label, problems, f"{len(got_tokens)} tokens equal, logits max abs err {err:.2g}", group="kiln vs PyTorch")
    print(f"{total_tokens} tokens over {SEQUENCES} sequences; worst logits error {worst:.3g}")

    # Past the cache: decoding stops when cur_pos reaches the cache length (seed 001), as PyTorch's loop does.
    ref = os.path.join(export_dir, "ref", "000")
    out = os.path.join(a.workdir, "generate", "long")
    run, _ = kiln_e2e.run_cmd([a.engine_run, engine, "--generate", "--input", f"input_ids={ref}/input_ids.npy",
                               "--input", f"attention_mask={ref}/attention_mask.npy", "--max-new-tokens", "1000",
                               "--output-dir", out], a.timeout)
    if run.returncode != 0:
        res.record("decode to the cache length", False, f"exit {run.returncode}: {run.stderr.strip()}")
        return res.finish()
    want_tokens, want_logits = t5_seq2seq.greedy(t5_seq2seq.modules(), np.load(os.path.join(ref, "input_ids.npy")),
                                                 np.load(os.path.join(ref, "attention_mask.npy")), 1000)
    got_tokens, got_logits = np.load(os.path.join(out, "tokens.npy")), np.load(os.path.join(out, "logits.npy"))
    timings = json.load(open(os.path.join(out, "timings.json")))
    problems = []
    if not np.array_equal(got_tokens, want_tokens):
        problems.append(f"{len(got_tokens)} tokens, PyTorch {len(want_tokens)}; first difference at "
                        f"{int(np.argmax(got_tokens[:len(want_tokens)] != want_tokens[:len(got_tokens)]))}")
    elif float(np.abs(got_logits - want_logits).max()) > LOGITS_ATOL:
        problems.append(f"logits max abs err {float(np.abs(got_logits - want_logits).max()):.3g}")
    ends = want_tokens[-1] == t5_seq2seq.EOS or timings["hit_cache_end"]
    if not ends:
        problems.append("stopped neither at the end token nor at the cache length")
    res.check("decode to the cache length", problems, f"{len(got_tokens)} tokens equal (cache length {t5_seq2seq.CONFIG['max_len']}), "
              f"hit_cache_end {timings['hit_cache_end']}", group="kiln vs PyTorch")

    # A step at cur_pos == the cache length is a one-line error, a non-zero exit and no output folder.
    bad = os.path.join(a.workdir, "past_the_cache")
    shutil.rmtree(bad, ignore_errors=True)
    os.makedirs(bad)
    np.save(os.path.join(bad, "cur_pos.npy"), np.array(_C["max_len"], np.int64))
    np.save(os.path.join(bad, "last_token_id.npy"), np.array([[5]], np.int64))
    run, _ = kiln_e2e.run_cmd([a.engine_run, engine, "--entry", "step", "--input", f"cur_pos={bad}/cur_pos.npy",
                               "--input", f"last_token_id={bad}/last_token_id.npy",
                               "--input", f"encoder_attention_mask={ref}/attention_mask.npy", "--output-dir", os.path.join(bad, "out")],
                              a.timeout)
    lines = run.stderr.strip().splitlines()
    res.record("cur_pos at the cache length", run.returncode == 1 and len(lines) == 1 and
               f"entry 'step': cur_pos = {_C['max_len']} is at or past the cache length {_C['max_len']}" in run.stderr
               and "ScatterND" not in run.stderr and not os.path.exists(os.path.join(bad, "out")), run.stderr.strip())
    inspect, _ = kiln_e2e.run_cmd([a.engine_run, "--inspect", engine], a.timeout)
    res.record("--inspect lists the state", inspect.returncode == 0 and
               "state 'cache_k': float32 [2, 1, 3, 128, 16] (prefill writes cache_k; step reads cache_k, writes cache_k_out)" in inspect.stdout,
               kiln_e2e.tail(inspect.stdout, 300))
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
