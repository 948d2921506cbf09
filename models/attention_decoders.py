"""The decoder variants of models/attention_variants.py: attention with a K/V cache (inputs x or ids
[1, seq, ...] and per-layer caches [1, heads, past, head_dim]; outputs the new caches), each written
the way a different code base writes it. See attention_variants.py for the list and the spec interface.
"""
import math

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

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



# ---- shared spec of the newer decoders -----------------------------------------------------------------

class ResidualStack(nn.Module):
    """x -> x + attn_i(norm_i(x)) per layer; each attention takes (x, past_k, past_v) and returns
    (y, k, v) with the caches grown by the new tokens."""

    def __init__(self, attns, dim):
        super().__init__()
        self.attn = nn.ModuleList(attns)
        self.norm = nn.ModuleList([nn.LayerNorm(dim) for _ in attns])

    def forward(self, x, *cache):
        out = []
        for i, (attn, norm) in enumerate(zip(self.attn, self.norm)):
            y, k, v = attn(norm(x), cache[2 * i], cache[2 * i + 1])
            x = x + y
            out += [k, v]
        return (x, *out)


class DecoderSpec:
    """x [1, seq, DIM] float and LAYERS K/V cache pairs [1, KV_HEADS, past, HEAD_DIM]; profiles prefill
    (seq 1..128, past 0) and decode (seq 1, past 1..256). Subclasses give SEED and layer(cls)."""
    LAYERS, DIM, HEADS, HEAD_DIM, KV_HEADS = 2, 32, 2, 16, 2
    BENCH = None  # fusion tests only
    SEED = 0
    IO = ("x", "y", "past_", "present_")
    INPUTS, OUTPUTS, DYNAMIC_AXES = decoder_io(LAYERS, *IO)
    CASES = {"prefill": [dict(seq=1, past=0), dict(seq=9, past=0), dict(seq=128, past=0)],
             "decode": [dict(seq=1, past=1), dict(seq=1, past=77), dict(seq=1, past=256)]}

    @classmethod
    def build(cls):
        torch.manual_seed(cls.SEED)
        return ResidualStack([cls.layer() for _ in range(cls.LAYERS)], cls.DIM).eval()

    @classmethod
    def make_inputs(cls, seq, past, seed=0):
        rng = np.random.RandomState(seed + 5 * seq + past + cls.SEED)
        x = {"x": rng.standard_normal((1, seq, cls.DIM)).astype(np.float32)}
        for n in cls.INPUTS[1:]:
            x[n] = rng.standard_normal((1, cls.KV_HEADS, past, cls.HEAD_DIM)).astype(np.float32)
        return x

    @staticmethod
    def config(onnx_path, engine_path):
        return f"""model: {onnx_path}
output: {engine_path}
profiles:
  prefill:
    dims: {{seq: {{min: 1, opt: 16, max: 128}}, past: 0}}
  decode:
    dims: {{seq: 1, past: {{min: 1, opt: 64, max: 256}}}}
fusions: {{attention: required}}
"""


def split_heads(t, heads, head_dim):
    """[B, S, heads*head_dim] -> [B, heads, S, head_dim]"""
    b, s, _ = t.shape
    return t.view(b, s, heads, head_dim).transpose(1, 2)


# ---- hf_gpt2 -------------------------------------------------------------------------------------------

class HfGpt2Attention(nn.Module):
    """Hugging Face GPT2Attention: packed c_attn split in three, heads by view+permute, the scale
    computed at run time from v's size (w / v.size(-1) ** 0.5), a [1, 1, M, M] tril bool buffer sliced
    [:, :, k-q:k, :k] and applied by where(mask, w, finfo.min)."""

    def __init__(self, dim, heads, max_pos=300):
        super().__init__()
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.register_buffer("bias", torch.tril(torch.ones((max_pos, max_pos), dtype=torch.bool)).view(1, 1, max_pos, max_pos),
                             persistent=False)

    def _split_heads(self, t):
        t = t.view(t.size()[:-1] + (self.heads, self.head_dim))
        return t.permute(0, 2, 1, 3)

    def _merge_heads(self, t):
        t = t.permute(0, 2, 1, 3).contiguous()
        return t.view(t.size()[:-2] + (self.heads * self.head_dim,))

    def forward(self, x, past_k, past_v):
        q, k, v = self.c_attn(x).split(self.dim, dim=2)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        k = torch.cat((past_k, k), dim=-2)
        v = torch.cat((past_v, v), dim=-2)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / (v.size(-1) ** 0.5)
        query_length, key_length = q.size(-2), k.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length]
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype)
        w = torch.where(causal_mask, w, mask_value)
        w = F.softmax(w, dim=-1)
        return self.c_proj(self._merge_heads(torch.matmul(w, v))), k, v


class HfGpt2(DecoderSpec):
    SEED = 21

    @classmethod
    def layer(cls):
        return HfGpt2Attention(cls.DIM, cls.HEADS)


# ---- masked_fill_inf -----------------------------------------------------------------------------------

class MaskedFillAttention(nn.Module):
    """Scores scaled by k.shape[-1] ** -0.5 (a Pow of the size at run time), a bool mask of the future
    keys built at run time (ones(bool).triu(total - seq + 1)) applied by masked_fill(mask, -inf)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, past_k, past_v):
        q, k, v = (split_heads(f(x), self.heads, self.head_dim) for f in (self.q, self.k, self.v))
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        scores = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        n, total = q.shape[-2], k.shape[-2]
        future = torch.ones(n, total, dtype=torch.bool).triu(total - n + 1)
        scores = scores.masked_fill(future, float("-inf"))
        out = scores.softmax(dim=-1) @ v
        b, h, s, d = out.shape
        return self.o(out.transpose(1, 2).reshape(b, s, h * d)), k, v


class MaskedFillInf(DecoderSpec):
    SEED = 22

    @classmethod
    def layer(cls):
        return MaskedFillAttention(cls.DIM, cls.HEADS)


# ---- gqa_decoder -------------------------------------------------------------------------------------

def repeat_kv(x, n_rep):
    """Llama's repeat_kv: [B, KV, S, D] -> [B, KV*n_rep, S, D], each K/V head serving n_rep query heads."""
    b, kv, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


class GqaAttention(nn.Module):
    """Grouped-query attention as Llama writes it: KV_HEADS K/V heads (the cache holds those), each
    repeated for HEADS / KV_HEADS query heads; / math.sqrt(head_dim); the causal mask built at run time
    from torch.finfo(dtype).min (Llama's _make_causal_mask: masked_fill of arange < arange + 1, zeros
    for the past keys in front)."""

    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x, past_k, past_v):
        b, n, _ = x.shape
        q = split_heads(self.q(x), self.heads, self.head_dim)
        k = torch.cat([past_k, split_heads(self.k(x), self.kv_heads, self.head_dim)], dim=2)
        v = torch.cat([past_v, split_heads(self.v(x), self.kv_heads, self.head_dim)], dim=2)
        past = past_k.shape[2]
        mask = torch.full((n, n), torch.finfo(x.dtype).min)
        cond = torch.arange(n)
        mask = mask.masked_fill(cond < (cond + 1).view(n, 1), 0)
        mask = torch.cat([torch.zeros(n, past), mask], dim=-1)
        rep = self.heads // self.kv_heads
        scores = q @ repeat_kv(k, rep).transpose(2, 3) / math.sqrt(self.head_dim) + mask
        out = F.softmax(scores, dim=-1) @ repeat_kv(v, rep)
        return self.o(out.transpose(1, 2).reshape(b, n, -1)), k, v


class GqaDecoder(DecoderSpec):
    DIM, HEADS, HEAD_DIM, KV_HEADS = 64, 4, 16, 2
    SEED = 23

    @classmethod
    def layer(cls):
        return GqaAttention(cls.DIM, cls.HEADS, cls.KV_HEADS)
