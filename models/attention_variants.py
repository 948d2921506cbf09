#!/usr/bin/python3
"""Attention written with other module code than kiln's own models: the corpus the attention fusion
must hold on (tests/e2e/test_attention_fusion.py, the peer benchmark's unseen exports). Each variant
writes attention the way a different code base does; the fusion must hold for exports it has never seen
that use the same exporter patterns.

Decoders (models/attention_decoders.py; x or ids [1, seq], K/V caches [1, heads, past, head_dim];
profiles prefill (past 0) and decode (seq 1, past ranged)):
  gpt_sep_qkv     GPT-style: separate q/k/v Linear, KV cache torch.cat on dim 2, a registered 2-D bool
                  causal buffer sliced mask[past:past+seq, :past+seq] and applied with
                  masked_fill(~mask, -inf), the scale as a Mul by a Python float after QK^T.
  gpt_lookahead   gpt_sep_qkv with tril(diagonal=1): a mask that looks like the causal one but is not.
  rotary_runtime_mask  Llama-style rotary q/k (torch.outer -> Einsum over symbolic positions) and a causal
                  mask built at run time (full(-inf).triu(past+1)) added to the scores.
  hf_gpt2         Hugging Face GPT2Attention: packed c_attn split, w / (v.size(-1) ** 0.5) (the scale
                  computed at run time from a size), a [1,1,M,M] tril bool buffer sliced
                  [:, :, k-q:k, :k], where(mask, w, finfo.min).
  masked_fill_inf scores * k.shape[-1] ** -0.5, a bool mask of the future keys built at run time
                  (ones.triu) applied with masked_fill(mask, float('-inf')).
  gqa_decoder     grouped-query attention: 2 K/V heads (the cache holds those) repeated for 4 query heads
                  (Llama's repeat_kv, expand + reshape), / math.sqrt(head_dim), Llama's finfo.min causal
                  mask built at run time.
Encoders (models/attention_encoders.py; x [batch, seq, dim], batch and seq ranged):
  mha_batch_first nn.MultiheadAttention(batch_first=True) in a custom pre-LN encoder.
  scaled_q_bsd    BERT-style: q multiplied by Dh**-0.5 before QK^T, heads by view+transpose,
                  k.transpose(-1, -2), an additive padding mask [B,1,1,S] input.
  sqrt_size       scores / math.sqrt(q.size(-1)), k permuted straight to [B,H,Dh,S].
  sdpa_causal     F.scaled_dot_product_attention(is_causal=True) as PyTorch 2.x exports it (see
                  attention_encoders.sdpa): the scale from Shape(q) at run time, sqrt(scale) on q and k.
  sdpa_mask       the same with a bool attn_mask input [B,1,1,S].
  finfo_min_mask  Hugging Face BERT's extended mask: (1 - attention_mask) * torch.finfo(dtype).min added.
  t5_bias         T5Attention: no scaling, a relative position bias [1,H,S,S] computed at run time from
                  arange(seq) (bucketed, an Embedding) added to the scores.

Each variant: build() -> module (fixed seed), INPUTS/OUTPUTS/DYNAMIC_AXES, LAYERS (attention layers),
make_inputs(**dims) -> numpy inputs, config(onnx, engine) -> engine-build YAML text with the profiles,
CASES -> {profile: [dims]}. The classes are tiny (dims 32-64, 2 layers) so
the fusion tests stay fast; variant(name, "bench") gives the same module code at a class's BENCH dims
(6 layers, width 512-768, head dim 64) for the peer benchmark (bench/run_peer_bench.py); only
gpt_sep_qkv, rotary_runtime_mask, mha_batch_first and scaled_q_bsd have one.

  /usr/bin/python3 models/attention_variants.py VARIANT --out DIR [--size test|bench]
      [--reference-dir REF --case NAME:K=N,... ...]
exports DIR/VARIANT.onnx and writes, per case, REF/NAME/inputs/<input>.npy (make_inputs(**dims)) and
REF/NAME/expected/<output>.npy (PyTorch's outputs), e.g. --case decode1024:seq=1,past=1024.
"""
import argparse
import inspect
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from attention_decoders import (GptLookahead, GptSepQKV, GqaDecoder, HfGpt2, MaskedFillInf,  # noqa: E402
                                RotaryRuntimeMask, decoder_io)
from attention_encoders import (FinfoMinMask, MhaBatchFirst, ScaledQBsd, SdpaCausal, SdpaMask,  # noqa: E402
                                SqrtSize, T5Bias)

OPSET = 17

VARIANTS = {"gpt_sep_qkv": GptSepQKV, "gpt_lookahead": GptLookahead, "rotary_runtime_mask": RotaryRuntimeMask,
            "hf_gpt2": HfGpt2, "masked_fill_inf": MaskedFillInf, "gqa_decoder": GqaDecoder,
            "mha_batch_first": MhaBatchFirst, "scaled_q_bsd": ScaledQBsd, "sqrt_size": SqrtSize,
            "sdpa_causal": SdpaCausal, "sdpa_mask": SdpaMask, "finfo_min_mask": FinfoMinMask, "t5_bias": T5Bias}
SIZES = ("test", "bench")


def variant(name, size="test"):
    """The spec of NAME at SIZE: "test" is the tiny class itself (what the fusion tests use); "bench" a
    subclass with the class's BENCH dims, so the same module code runs at a size worth timing."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; variants: {', '.join(VARIANTS)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; sizes: {', '.join(SIZES)}")
    spec = VARIANTS[name]
    if size == "test":
        return spec
    if not spec.BENCH:
        raise ValueError(f"{name} has no bench size")
    dims = dict(spec.BENCH)
    dims["HEAD_DIM"] = dims["DIM"] // dims["HEADS"]
    if hasattr(spec, "IO"):  # decoders: one cache input/output pair per layer
        dims["INPUTS"], dims["OUTPUTS"], dims["DYNAMIC_AXES"] = decoder_io(dims["LAYERS"], *spec.IO)
    return type(spec.__name__ + "Bench", (spec,), dims)


def export(name, out_path, size="test"):
    spec = variant(name, size)
    model = spec.build()
    first = next(iter(spec.CASES.values()))[-1]
    args = tuple(torch.from_numpy(a) for a in spec.make_inputs(**first, seed=99).values())
    # Grad enabled while tracing keeps nn.MultiheadAttention off its fused fast path (see models/vit.py).
    with torch.enable_grad():
        torch.onnx.export(model, args, out_path, input_names=spec.INPUTS, output_names=spec.OUTPUTS,
                          dynamic_axes=spec.DYNAMIC_AXES, opset_version=OPSET, do_constant_folding=True)
    return model


def run(model, spec, inputs):
    with torch.no_grad():
        outs = model(*[torch.from_numpy(inputs[n]) for n in spec.INPUTS])
    outs = outs if isinstance(outs, tuple) else (outs,)
    return {n: o.numpy() for n, o in zip(spec.OUTPUTS, outs)}


def sanitize(name):
    """The file name engine-run gives a tensor (see models/export_models.py)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def parse_case(spec, text):
    """'NAME:K=V,...' -> (NAME, {K: int(V)}) with K the parameters of spec.make_inputs (all required).
    Raises ValueError naming what is wrong."""
    name, colon, rest = text.partition(":")
    params = [k for k in inspect.signature(spec.make_inputs).parameters if k != "seed"]
    if not colon or not name or sanitize(name) != name:
        raise ValueError(f"case {text!r}: expected NAME:{'=N,'.join(params)}=N with NAME in [A-Za-z0-9._-]")
    dims = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in params:
            raise ValueError(f"case {text!r}: expected K=N with K in {', '.join(params)}, got {item!r}")
        try:
            dims[key] = int(value)
        except ValueError:
            raise ValueError(f"case {text!r}: {key} must be an integer, got {value!r}") from None
        if dims[key] < 0:
            raise ValueError(f"case {text!r}: {key} must be >= 0")
    missing = [k for k in params if k not in dims]
    if missing:
        raise ValueError(f"case {text!r}: missing {', '.join(k + '=' for k in missing)}")
    return name, dims


def write_case(model, spec, name, dims, reference_dir):
    """DIR/NAME/inputs/<input>.npy from make_inputs(**DIMS) and DIR/NAME/expected/<output>.npy from PyTorch."""
    inputs = spec.make_inputs(**dims)
    for sub, arrays in (("inputs", inputs), ("expected", run(model, spec, inputs))):
        d = os.path.join(reference_dir, name, sub)
        os.makedirs(d, exist_ok=True)
        for n, a in arrays.items():
            np.save(os.path.join(d, sanitize(n) + ".npy"), np.ascontiguousarray(a))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variant", choices=list(VARIANTS))
    p.add_argument("--out", required=True, help="directory")
    p.add_argument("--size", choices=SIZES, default="test")
    p.add_argument("--reference-dir", help="write reference cases under this directory")
    p.add_argument("--case", action="append", default=[], metavar="NAME:K=N,...",
                   help="reference case (repeatable), e.g. decode1024:seq=1,past=1024 or batch2:batch=2,seq=128")
    a = p.parse_args(argv)
    if a.case and not a.reference_dir:
        p.error("--case needs --reference-dir")
    try:
        spec = variant(a.variant, a.size)
        cases = [parse_case(spec, c) for c in a.case]
    except ValueError as e:
        p.error(str(e))
    os.makedirs(a.out, exist_ok=True)
    model = export(a.variant, os.path.join(a.out, a.variant + ".onnx"), a.size)
    for name, dims in cases:
        write_case(model, spec, name, dims, a.reference_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

