#!/usr/bin/python3
"""Attention written with other module code than kiln's models, for tests/e2e/test_attention_fusion.py:
the fusion must hold for exports it has never seen that use the same exporter patterns.

  gpt_sep_qkv     GPT-style decoder: separate q/k/v Linear, KV cache [B,H,past,Dh] torch.cat on dim 2,
                  a registered 2-D bool causal buffer sliced mask[past:past+seq, :past+seq] and applied
                  with masked_fill(~mask, -inf), the scale as a Mul by a Python float after QK^T.
  rotary_runtime_mask  Llama-style rotary q/k (torch.outer -> Einsum over symbolic positions) and a causal
                  mask built at run time (full(-inf).triu(past+1)) added to the scores.
  mha_batch_first nn.MultiheadAttention(batch_first=True) in a custom pre-LN encoder, dynamic batch and
                  sequence.
  gpt_lookahead   gpt_sep_qkv with tril(diagonal=1): a mask that looks like the causal one but is not.
  scaled_q_bsd    BERT-style encoder: q multiplied by Dh**-0.5 before QK^T, heads by view+transpose,
                  k.transpose(-1, -2) of the split heads, an additive padding mask [B,1,1,S] input.

Each variant: build() -> module (fixed seed), INPUTS/OUTPUTS/DYNAMIC_AXES, make_inputs(**dims) -> numpy
inputs, config(onnx, engine) -> engine-build YAML text with the profiles, CASES -> {profile: [dims]}.
The classes are tiny (dims 32-64, 2 layers) so the fusion tests stay fast; variant(name, "bench") gives
the same module code at each class's BENCH dims (6 layers, width 512-768, head dim 64) for the peer
benchmark (bench/run_peer_bench.py). gpt_lookahead has no bench size.

  /usr/bin/python3 tests/e2e/attention_variants.py VARIANT --out DIR [--size test|bench]
      [--reference-dir REF --case NAME:K=N,... ...]
exports DIR/VARIANT.onnx and writes, per case, REF/NAME/inputs/<input>.npy (make_inputs(**dims)) and
REF/NAME/expected/<output>.npy (PyTorch's outputs), e.g. --case decode1024:seq=1,past=1024.
"""
import argparse
import inspect
import math
import os
import re
import sys

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

OPSET = 17


def decoder_io(layers, x, y, cache_in, cache_out):
    """(INPUTS, OUTPUTS, DYNAMIC_AXES) of a decoder with LAYERS layers of K/V cache: X, CACHE_IN{k,v}{i}
    -> Y, CACHE_OUT{k,v}{i}; seq and past are symbolic, total = past + seq."""
    inputs = [x] + [f"{cache_in}{kv}{i}" for i in range(layers) for kv in "kv"]
    outputs = [y] + [f"{cache_out}{kv}{i}" for i in range(layers) for kv in "kv"]
    axes = {x: {1: "seq"}, y: {1: "seq"}, **{n: {2: "past"} for n in inputs[1:]},
            **{n: {2: "total"} for n in outputs[1:]}}
    return inputs, outputs, axes


# ---- gpt_sep_qkv -------------------------------------------------------------------------------------

class SepQKVAttention(nn.Module):
    def __init__(self, dim, heads, max_pos, diagonal=0):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.register_buffer("causal", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool), diagonal), persistent=False)

    def heads_of(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, past_k, past_v):
        q = self.heads_of(self.q(x))
        k = torch.cat([past_k, self.heads_of(self.k(x))], dim=2)
        v = torch.cat([past_v, self.heads_of(self.v(x))], dim=2)
        past, seq = past_k.shape[2], x.shape[1]
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scale
        mask = self.causal[past:past + seq, :past + seq]
        scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.matmul(scores.softmax(dim=-1), v)
        b, h, s, d = out.shape
        return self.o(out.transpose(1, 2).reshape(b, s, h * d)), k, v


class SepQKVDecoder(nn.Module):
    def __init__(self, layers=2, dim=48, heads=3, vocab=97, max_pos=1100, diagonal=0):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_pos, dim)
        self.attn = nn.ModuleList([SepQKVAttention(dim, heads, max_pos, diagonal) for _ in range(layers)])
        self.norm = nn.ModuleList([nn.LayerNorm(dim) for _ in range(layers)])
        self.mlp = nn.ModuleList([nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
                                  for _ in range(layers)])
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids, *cache):
        past = cache[0].shape[2]
        pos = torch.arange(past, past + ids.shape[1])
        h = self.tok(ids) + self.pos(pos)
        out = []
        for i, (attn, norm, mlp) in enumerate(zip(self.attn, self.norm, self.mlp)):
            a, k, v = attn(norm(h), cache[2 * i], cache[2 * i + 1])
            h = h + a
            h = h + mlp(h)
            out += [k, v]
        return (self.head(h), *out)


class GptSepQKV:
    LAYERS, DIM, HEADS, HEAD_DIM, VOCAB = 2, 48, 3, 16, 97
    BENCH = dict(LAYERS=6, DIM=768, HEADS=12, VOCAB=4096)  # GPT-2-small width, half its depth
    IO = ("ids", "logits", "cache_", "new_")
    INPUTS, OUTPUTS, DYNAMIC_AXES = decoder_io(LAYERS, *IO)
    # max_pos 1100: decode at past 1024 + 1 stays inside the buffer.
    CASES = {"prefill": [dict(seq=1, past=0), dict(seq=9, past=0), dict(seq=64, past=0)],
             "decode": [dict(seq=1, past=1), dict(seq=1, past=37), dict(seq=1, past=1024)]}

    @classmethod
    def build(cls):
        torch.manual_seed(11)
        return SepQKVDecoder(cls.LAYERS, cls.DIM, cls.HEADS, cls.VOCAB).eval()

    @classmethod
    def make_inputs(cls, seq, past, seed=0):
        rng = np.random.RandomState(seed + 7 * seq + past)
        x = {"ids": rng.randint(0, cls.VOCAB, (1, seq)).astype(np.int64)}
        for n in cls.INPUTS[1:]:
            x[n] = rng.standard_normal((1, cls.HEADS, past, cls.HEAD_DIM)).astype(np.float32)
        return x

    @staticmethod
    def config(onnx_path, engine_path):
        return f"""model: {onnx_path}
output: {engine_path}
profiles:
  prefill:
    dims: {{seq: {{min: 1, opt: 16, max: 64}}, past: 0}}
  decode:
    dims: {{seq: 1, past: {{min: 1, opt: 64, max: 1024}}}}
fusions: {{attention: required}}
inputs:
  ids: {{generator: randint, low: 0, high: 97}}
"""


class GptLookahead(GptSepQKV):
    """The same decoder with tril(diagonal=1): each query also sees the next key. Not causal, so the
    fusion must keep the sliced buffer as a bool mask; prefill outputs differ from causal ones."""

    BENCH = None  # a fusion test only: the benchmark has no look-ahead decoder

    @classmethod
    def build(cls):
        torch.manual_seed(11)
        return SepQKVDecoder(cls.LAYERS, cls.DIM, cls.HEADS, cls.VOCAB, diagonal=1).eval()


# ---- rotary_runtime_mask -------------------------------------------------------------------------------

def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class RotaryAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x, past_k, past_v):
        b, n, _ = x.shape
        past = past_k.shape[2]
        q, k, v = (f(x).view(b, n, self.heads, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        angles = torch.outer(torch.arange(past, past + n).float(), self.inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        q = q * emb.cos() + rotate_half(q) * emb.sin()
        k = k * emb.cos() + rotate_half(k) * emb.sin()
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        mask = torch.full((n, past + n), float("-inf")).triu(past + 1)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim) + mask
        out = scores.softmax(-1) @ v
        return self.o(out.transpose(1, 2).reshape(b, n, -1)), k, v


class RotaryDecoder(nn.Module):
    def __init__(self, layers=2, dim=32, heads=2):
        super().__init__()
        self.attn = nn.ModuleList([RotaryAttention(dim, heads) for _ in range(layers)])

    def forward(self, x, *cache):
        out = []
        for i, attn in enumerate(self.attn):
            y, k, v = attn(x, cache[2 * i], cache[2 * i + 1])
            x = x + y
            out += [k, v]
        return (x, *out)


class RotaryRuntimeMask:
    """Llama-style: rotary q/k from positions arange(past, past+seq) (torch.outer exports an Einsum),
    a causal mask built at run time (full(-inf).triu(past+1)) and added to the scores."""
    LAYERS, DIM, HEADS, HEAD_DIM = 2, 32, 2, 16
    BENCH = dict(LAYERS=6, DIM=512, HEADS=8)
    IO = ("x", "y", "past_", "present_")
    INPUTS, OUTPUTS, DYNAMIC_AXES = decoder_io(LAYERS, *IO)
    CASES = {"prefill": [dict(seq=1, past=0), dict(seq=7, past=0), dict(seq=32, past=0)],
             "decode": [dict(seq=1, past=1), dict(seq=1, past=300), dict(seq=1, past=512)]}

    @classmethod
    def build(cls):
        torch.manual_seed(14)
        return RotaryDecoder(cls.LAYERS, cls.DIM, cls.HEADS).eval()

    @classmethod
    def make_inputs(cls, seq, past, seed=0):
        rng = np.random.RandomState(seed + 3 * seq + past)
        x = {"x": rng.standard_normal((1, seq, cls.DIM)).astype(np.float32)}
        for n in cls.INPUTS[1:]:
            x[n] = rng.standard_normal((1, cls.HEADS, past, cls.HEAD_DIM)).astype(np.float32)
        return x

    @staticmethod
    def config(onnx_path, engine_path):
        return f"""model: {onnx_path}
output: {engine_path}
profiles:
  prefill:
    dims: {{seq: {{min: 1, opt: 8, max: 32}}, past: 0}}
  decode:
    dims: {{seq: 1, past: {{min: 1, opt: 64, max: 512}}}}
fusions: {{attention: required}}
"""


# ---- mha_batch_first -----------------------------------------------------------------------------------

class MhaEncoder(nn.Module):
    def __init__(self, layers=2, dim=40, heads=5):
        super().__init__()
        self.norm = nn.ModuleList([nn.LayerNorm(dim) for _ in range(layers)])
        self.attn = nn.ModuleList([nn.MultiheadAttention(dim, heads, batch_first=True) for _ in range(layers)])
        self.out = nn.Linear(dim, 7)

    def forward(self, x):
        for norm, attn in zip(self.norm, self.attn):
            y = norm(x)
            x = x + attn(y, y, y, need_weights=False)[0]
        return self.out(x)


class MhaBatchFirst:
    LAYERS, DIM, HEADS = 2, 40, 5
    BENCH = dict(LAYERS=6, DIM=768, HEADS=12)  # ViT-B/16 width at 197 tokens in the benchmark
    INPUTS = ["x"]
    OUTPUTS = ["y"]
    DYNAMIC_AXES = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
    CASES = {"any": [dict(batch=1, seq=1), dict(batch=2, seq=13), dict(batch=3, seq=50)]}

    @classmethod
    def build(cls):
        torch.manual_seed(12)
        return MhaEncoder(cls.LAYERS, cls.DIM, cls.HEADS).eval()

    @classmethod
    def make_inputs(cls, batch, seq, seed=0):
        rng = np.random.RandomState(seed + batch * 100 + seq)
        return {"x": rng.standard_normal((batch, seq, cls.DIM)).astype(np.float32)}

    @staticmethod
    def config(onnx_path, engine_path):
        return f"""model: {onnx_path}
output: {engine_path}
profiles:
  any:
    dims: {{batch: {{min: 1, opt: 2, max: 3}}, seq: {{min: 1, opt: 20, max: 50}}}}
fusions: {{attention: required}}
"""


# ---- scaled_q_bsd ------------------------------------------------------------------------------------

class ScaledQLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q = q * self.head_dim ** -0.5
        q, k, v = (t.view(b, s, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) + mask
        out = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, d)
        return x + self.proj(out)


class ScaledQEncoder(nn.Module):
    def __init__(self, layers=2, dim=64, heads=4):
        super().__init__()
        self.layers = nn.ModuleList([ScaledQLayer(dim, heads) for _ in range(layers)])

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return x


class ScaledQBsd:
    LAYERS, DIM, HEADS = 2, 64, 4
    BENCH = dict(LAYERS=6, DIM=768, HEADS=12)  # BERT-base width, half its depth
    INPUTS = ["x", "pad_mask"]
    OUTPUTS = ["y"]
    DYNAMIC_AXES = {"x": {0: "batch", 1: "seq"}, "pad_mask": {0: "batch", 3: "seq"}, "y": {0: "batch", 1: "seq"}}
    CASES = {"any": [dict(batch=1, seq=1), dict(batch=2, seq=17), dict(batch=2, seq=40)]}

    @classmethod
    def build(cls):
        torch.manual_seed(13)
        return ScaledQEncoder(cls.LAYERS, cls.DIM, cls.HEADS).eval()

    @classmethod
    def make_inputs(cls, batch, seq, seed=0):
        rng = np.random.RandomState(seed + batch * 100 + seq)
        mask = np.zeros((batch, 1, 1, seq), np.float32)
        for b in range(batch):  # the last b keys of sequence b are padding
            if b and seq > b:
                mask[b, 0, 0, seq - b:] = -1e9
        return {"x": rng.standard_normal((batch, seq, cls.DIM)).astype(np.float32), "pad_mask": mask}

    @staticmethod
    def config(onnx_path, engine_path):
        return f"""model: {onnx_path}
output: {engine_path}
profiles:
  any:
    dims: {{batch: {{min: 1, opt: 2, max: 2}}, seq: {{min: 1, opt: 16, max: 40}}}}
fusions: {{attention: required}}
inputs:
  pad_mask: {{generator: zeros}}
"""


VARIANTS = {"gpt_sep_qkv": GptSepQKV, "gpt_lookahead": GptLookahead, "rotary_runtime_mask": RotaryRuntimeMask,
            "mha_batch_first": MhaBatchFirst, "scaled_q_bsd": ScaledQBsd}
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
