"""The peer benchmark's "unseen exports": attention written with other module code than kiln's own models
(models/attention_variants.py), exported at the variants' bench size, so the targets are checked on
exports the builder was not written against.

  gpt_sep_qkv          GPT-style decoder, separate q/k/v, bool causal buffer: 6 layers, width 768, 12 heads,
                       vocab 4096
  rotary_runtime_mask  Llama-style rotary decoder, causal mask built at run time: 6 layers, width 512, 8 heads
  scaled_q_bsd         BERT-style encoder, q scaled before QK^T, additive padding mask: 6 layers, width 768,
                       12 heads, 128 tokens
  mha_batch_first      nn.MultiheadAttention(batch_first=True) encoder: 6 layers, width 768, 12 heads,
                       197 tokens (ViT-B/16's sequence)

Each case's inputs come from the variant's make_inputs (seeded) and its expected outputs from PyTorch.
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS_PY = os.path.join(os.path.dirname(HERE), "models", "attention_variants.py")

DECODER_CASES = {"prefill128": "seq=128,past=0", "decode1024": "seq=1,past=1024"}
# {model: {profile: make_inputs dims}}; profile names match gpt2's and vit's in run_peer_bench.py.
CASES = {
    "gpt_sep_qkv": DECODER_CASES,
    "rotary_runtime_mask": DECODER_CASES,
    "scaled_q_bsd": {"batch1": "batch=1,seq=128", "batch2": "batch=2,seq=128"},
    "mha_batch_first": {"batch1": "batch=1,seq=197", "batch2": "batch=2,seq=197"},
}
NOTES = {
    "gpt_sep_qkv/prefill128": "unseen: 128 tokens, past 0",
    "gpt_sep_qkv/decode1024": "unseen: 1 token on 1024 past tokens",
    "rotary_runtime_mask/prefill128": "unseen: 128 tokens, past 0",
    "rotary_runtime_mask/decode1024": "unseen: 1 token on 1024 past tokens",
    "scaled_q_bsd/batch1": "unseen: 1x128x768, padding mask",
    "scaled_q_bsd/batch2": "unseen: 2x128x768, padding mask (1 padded key in row 2)",
    "mha_batch_first/batch1": "unseen: 1x197x768",
    "mha_batch_first/batch2": "unseen: 2x197x768",
}
WORKLOADS = [(model, profile, profile) for model, cases in CASES.items() for profile in cases]


def export(model, onnx_path, cases_dir, cases, log):
    """Exports MODEL at bench size to ONNX_PATH and writes CASES under CASES_DIR (CASES_DIR/NAME/{inputs,
    expected}). The .onnx is renamed into place only after a complete export, so a killed run leaves no
    half file. Raises RuntimeError with the exporter's last error line."""
    tmp_dir = onnx_path + ".tmp"
    cmd = [sys.executable, VARIANTS_PY, model, "--size", "bench", "--out", tmp_dir]
    if cases:
        cmd += ["--reference-dir", cases_dir] + [a for c in cases for a in ("--case", f"{c}:{CASES[model][c]}")]
    log(f"exporting {model} (bench size){' with cases ' + ', '.join(cases) if cases else ''} ...")
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        lines = [l for l in (p.stderr + "\n" + p.stdout).splitlines() if l.strip()]
        raise RuntimeError(f"export of {model} failed: {lines[-1] if lines else p.returncode}")
    os.replace(os.path.join(tmp_dir, model + ".onnx"), onnx_path)
    os.rmdir(tmp_dir)
    log(f"  done in {time.time() - t0:.0f} s")
