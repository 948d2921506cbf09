"""The encoder variants of models/attention_variants.py: attention over a whole sequence (inputs x
[batch, seq, DIM] and, for some, a mask; no cache), each written the way a different code base writes
it. See attention_variants.py for the list and the spec interface.
"""
import math

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

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



# ---- shared spec of the newer encoders -------------------------------------------------------------------

class EncoderStack(nn.Module):
    """x -> x + layer_i(norm_i(x), *extra) per layer; EXTRA (a mask, a position bias) is computed once
    by `prepare(x, *inputs)` and shared by every layer."""

    def __init__(self, layers, dim, prepare=None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = nn.ModuleList([nn.LayerNorm(dim) for _ in layers])
        self.prepare = prepare

    def forward(self, x, *inputs):
        extra = self.prepare(x, *inputs) if self.prepare is not None else ()
        for layer, norm in zip(self.layers, self.norm):
            x = x + layer(norm(x), *extra)
        return x


class EncoderSpec:
    """x [batch, seq, DIM] -> y; one profile, batch 1..2 and seq 1..128. Subclasses give SEED and
    build_stack(cls); those with a mask input override INPUTS/DYNAMIC_AXES, mask_of and config."""
    LAYERS, DIM, HEADS = 2, 32, 2
    BENCH = None  # fusion tests only
    SEED = 0
    INPUTS = ["x"]
    OUTPUTS = ["y"]
    DYNAMIC_AXES = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
    CASES = {"any": [dict(batch=1, seq=1), dict(batch=2, seq=13), dict(batch=2, seq=128)]}
    EXTRA_CONFIG = ""

    @classmethod
    def build(cls):
        torch.manual_seed(cls.SEED)
        return cls.build_stack().eval()

    @classmethod
    def mask_of(cls, batch, seq):
        return {}

    @classmethod
    def make_inputs(cls, batch, seq, seed=0):
        rng = np.random.RandomState(seed + batch * 100 + seq + cls.SEED)
        return {"x": rng.standard_normal((batch, seq, cls.DIM)).astype(np.float32), **cls.mask_of(batch, seq)}

    @classmethod
    def config(cls, onnx_path, engine_path):
        return f"""model: {onnx_path}
output: {engine_path}
profiles:
  any:
    dims: {{batch: {{min: 1, opt: 2, max: 2}}, seq: {{min: 1, opt: 16, max: 128}}}}
fusions: {{attention: required}}
{cls.EXTRA_CONFIG}"""


def padded_keys(batch, seq):
    """[batch, seq] bool, True for a real key: the last b keys of sequence b are padding (each sequence
    keeps at least one key)."""
    keep = np.ones((batch, seq), bool)
    for b in range(batch):
        if b and seq > b:
            keep[b, seq - b:] = False
    return keep


class QkvLinears(nn.Module):
    def __init__(self, dim, heads, bias=True):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=bias) for _ in range(4))

    def merge(self, out):
        b, h, s, d = out.shape
        return self.o(out.transpose(1, 2).reshape(b, s, h * d))


# ---- sqrt_size -----------------------------------------------------------------------------------------

class SqrtSizeLayer(QkvLinears):
    """Heads by permute: q [B,H,S,D] with permute(0, 2, 1, 3) and k straight to [B,H,D,S] with
    permute(0, 2, 3, 1); scores / math.sqrt(q.size(-1)) (a Python float at trace time)."""

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)
        k = self.k(x).view(b, s, self.heads, self.head_dim).permute(0, 2, 3, 1)
        v = self.v(x).view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)
        scores = torch.matmul(q, k) / math.sqrt(q.size(-1))
        return self.merge(torch.matmul(scores.softmax(-1), v))


class SqrtSize(EncoderSpec):
    SEED = 31

    @classmethod
    def build_stack(cls):
        return EncoderStack([SqrtSizeLayer(cls.DIM, cls.HEADS) for _ in range(cls.LAYERS)], cls.DIM)


# ---- sdpa_causal, sdpa_mask ---------------------------------------------------------------------------

def sdpa(q, k, v, attn_mask=None, is_causal=False):
    """F.scaled_dot_product_attention (PyTorch 2.x, no dropout) written with the ops its ONNX exporter
    emits for it (torch/onnx/symbolic_opset14.py): the scale 1 / sqrt(Shape(q)[-1:]) computed at run
    time, sqrt(scale) multiplied into q and into k transposed, the causal mask a Where over a tril of
    ones, a bool mask turned into 0 / -inf and added. Debian's PyTorch 1.13 has no
    F.scaled_dot_product_attention, so this is both the export's source and the reference."""
    scale = 1.0 / torch.sqrt(torch._shape_as_tensor(q)[-1:].to(q.dtype))
    if is_causal:
        ones = torch.ones(q.size(-2), k.size(-2)).tril()
        attn_mask = torch.where(ones == 0, torch.tensor(float("-inf")), torch.tensor(0.0))
    elif attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.where(attn_mask, torch.tensor(0.0), torch.tensor(float("-inf")))
    scores = torch.matmul(q * torch.sqrt(scale), k.transpose(-2, -1) * torch.sqrt(scale))
    if attn_mask is not None:
        scores = scores + attn_mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class SdpaLayer(nn.Module):
    def __init__(self, dim, heads, is_causal):
        super().__init__()
        self.heads, self.head_dim, self.is_causal = heads, dim // heads, is_causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, x, attn_mask=None):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        out = sdpa(q, k, v, attn_mask=attn_mask, is_causal=self.is_causal)
        return self.o(out.transpose(1, 2).reshape(b, s, d))


class SdpaCausal(EncoderSpec):
    """A causal LM's prompt pass without a cache: sdpa(is_causal=True)."""
    SEED = 32

    @classmethod
    def build_stack(cls):
        return EncoderStack([SdpaLayer(cls.DIM, cls.HEADS, True) for _ in range(cls.LAYERS)], cls.DIM)


class SdpaMask(EncoderSpec):
    """sdpa with a bool attn_mask input [batch, 1, 1, seq] (True: attend), the key padding mask."""
    SEED = 33
    INPUTS = ["x", "keep"]
    DYNAMIC_AXES = {"x": {0: "batch", 1: "seq"}, "keep": {0: "batch", 3: "seq"}, "y": {0: "batch", 1: "seq"}}
    EXTRA_CONFIG = "inputs:\n  keep: {generator: ones}\n"

    @classmethod
    def mask_of(cls, batch, seq):
        return {"keep": padded_keys(batch, seq)[:, None, None, :]}

    @classmethod
    def build_stack(cls):
        return EncoderStack([SdpaLayer(cls.DIM, cls.HEADS, False) for _ in range(cls.LAYERS)], cls.DIM,
                            prepare=lambda x, keep: (keep,))


# ---- finfo_min_mask ------------------------------------------------------------------------------------

class BertLayer(QkvLinears):
    def forward(self, x, extended_mask):
        b, s, _ = x.shape
        q, k, v = (f(x).view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3) for f in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + extended_mask
        return self.merge(torch.matmul(nn.functional.softmax(scores, dim=-1), v))


def bert_extended_mask(x, attention_mask):
    """Hugging Face's get_extended_attention_mask: an int64 [batch, seq] attention_mask (1: attend) as
    an additive [batch, 1, 1, seq] mask of 0 and torch.finfo(dtype).min."""
    ext = attention_mask[:, None, None, :].to(dtype=x.dtype)
    return ((1.0 - ext) * torch.finfo(x.dtype).min,)


class FinfoMinMask(EncoderSpec):
    SEED = 34
    INPUTS = ["x", "attention_mask"]
    DYNAMIC_AXES = {"x": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
    EXTRA_CONFIG = "inputs:\n  attention_mask: {generator: randint, low: 1, high: 2}\n"

    @classmethod
    def mask_of(cls, batch, seq):
        return {"attention_mask": padded_keys(batch, seq).astype(np.int64)}

    @classmethod
    def build_stack(cls):
        return EncoderStack([BertLayer(cls.DIM, cls.HEADS) for _ in range(cls.LAYERS)], cls.DIM,
                            prepare=bert_extended_mask)


# ---- t5_bias -------------------------------------------------------------------------------------------

def relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
    """T5's bidirectional bucketing of key - query offsets: exact for small offsets, logarithmic up
    to max_distance."""
    num_buckets //= 2
    buckets = (relative_position > 0).to(torch.long) * num_buckets
    relative_position = torch.abs(relative_position)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, relative_position, large)


class T5PositionBias(nn.Module):
    """The [1, H, seq, seq] bias of T5's first layer, computed at run time from arange(seq) and shared
    by every layer."""

    def __init__(self, heads, num_buckets=32):
        super().__init__()
        self.num_buckets = num_buckets
        self.relative_attention_bias = nn.Embedding(num_buckets, heads)

    def forward(self, x):
        s = x.shape[1]
        context = torch.arange(s, dtype=torch.long)[:, None]
        memory = torch.arange(s, dtype=torch.long)[None, :]
        buckets = relative_position_bucket(memory - context, self.num_buckets)
        return (self.relative_attention_bias(buckets).permute([2, 0, 1]).unsqueeze(0),)


class T5Layer(QkvLinears):
    """T5Attention: no scaling of the scores (T5 folds it into its initialisation), the position
    bias added, softmax in float."""

    def forward(self, x, position_bias):
        b, s, _ = x.shape
        q, k, v = (f(x).view(b, -1, self.heads, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(3, 2))
        scores += position_bias
        attn = F.softmax(scores.float(), dim=-1).type_as(scores)
        return self.merge(torch.matmul(attn, v))


class T5Bias(EncoderSpec):
    SEED = 35

    @classmethod
    def build_stack(cls):
        return EncoderStack([T5Layer(cls.DIM, cls.HEADS, bias=False) for _ in range(cls.LAYERS)], cls.DIM,
                            prepare=T5PositionBias(cls.HEADS))
