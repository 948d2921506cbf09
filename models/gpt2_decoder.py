"""A GPT-2-style decoder written the way Hugging Face's modeling_gpt2 writes it, so its export has the
same graph patterns a user's HF export has:
  - token + position embedding, position ids = arange(past_len, past_len + seq_len) from Shape arithmetic
  - fused QKV projection (one Linear to 3*D, then .split(D, dim=2)), heads as [B, H, S, Dh]
  - past_key_i / past_value_i [1, H, past, Dh] concatenated with the new keys/values (torch.cat, dim=-2)
  - causal mask from a tril buffer sliced bias[:, :, key_len - query_len : key_len, :key_len], applied with
    torch.where(mask, scores, finfo.min)
  - GELU in GPT-2's tanh form, written out (0.5*x*(1+tanh(...))), pre-LN blocks, lm head tied to wte
Inputs: input_ids [1, seq] int64, past_key_i, past_value_i [1, H, past, Dh] for i in 0..L-1.
Outputs: logits [1, seq, vocab], present_key_i, present_value_i [1, H, past+seq, Dh].
"""
import math

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from init_utils import perturb_norms

SIZES = {
    "full": dict(layers=4, dim=256, heads=4, vocab=1000, max_pos=1152),
    "small": dict(layers=2, dim=64, heads=2, vocab=1000, max_pos=1152),
}


def input_names(size):
    n = SIZES[size]["layers"]
    return ["input_ids"] + [f"past_{kv}_{i}" for i in range(n) for kv in ("key", "value")]


def output_names(size):
    n = SIZES[size]["layers"]
    return ["logits"] + [f"present_{kv}_{i}" for i in range(n) for kv in ("key", "value")]


def dynamic_axes(size):
    axes = {"input_ids": {1: "seq"}, "logits": {1: "seq"}}
    for name in input_names(size)[1:]:
        axes[name] = {2: "past"}
    for name in output_names(size)[1:]:
        axes[name] = {2: "total"}
    return axes


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, dim, heads, max_pos):
        super().__init__()
        self.dim = dim
        self.heads = heads
        self.head_dim = dim // heads
        self.register_buffer(
            "bias", torch.tril(torch.ones((max_pos, max_pos), dtype=torch.bool)).view(1, 1, max_pos, max_pos))
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def _split_heads(self, t):
        new_shape = t.size()[:-1] + (self.heads, self.head_dim)
        return t.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, t):
        t = t.permute(0, 2, 1, 3).contiguous()
        return t.view(t.size()[:-2] + (self.heads * self.head_dim,))

    def forward(self, hidden, past_key, past_value):
        query, key, value = self.c_attn(hidden).split(self.dim, dim=2)
        query = self._split_heads(query)
        key = torch.cat((past_key, self._split_heads(key)), dim=-2)
        value = torch.cat((past_value, self._split_heads(value)), dim=-2)

        scores = torch.matmul(query, key.transpose(-1, -2))
        scores = scores / torch.full([], value.size(-1) ** 0.5, dtype=scores.dtype)
        query_len, key_len = query.size(-2), key.size(-2)
        causal = self.bias[:, :, key_len - query_len:key_len, :key_len]
        mask_value = torch.full([], torch.finfo(scores.dtype).min, dtype=scores.dtype)
        scores = torch.where(causal, scores, mask_value)
        probs = F.softmax(scores, dim=-1)
        out = self._merge_heads(torch.matmul(probs, value))
        return self.c_proj(out), key, value


class GPT2MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, dim, heads, max_pos):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = GPT2Attention(dim, heads, max_pos)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = GPT2MLP(dim)

    def forward(self, hidden, past_key, past_value):
        a, key, value = self.attn(self.ln_1(hidden), past_key, past_value)
        hidden = hidden + a
        hidden = hidden + self.mlp(self.ln_2(hidden))
        return hidden, key, value


class GPT2Decoder(nn.Module):
    def __init__(self, layers, dim, heads, vocab, max_pos):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(max_pos, dim)
        self.h = nn.ModuleList([GPT2Block(dim, heads, max_pos) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)

    def forward(self, input_ids, *past):
        past_len = past[0].size(-2)
        position_ids = torch.arange(past_len, input_ids.size(-1) + past_len, dtype=torch.long)
        hidden = self.wte(input_ids) + self.wpe(position_ids).unsqueeze(0)
        presents = []
        for i, block in enumerate(self.h):
            hidden, key, value = block(hidden, past[2 * i], past[2 * i + 1])
            presents += [key, value]
        logits = F.linear(self.ln_f(hidden), self.wte.weight)  # lm head tied to the token embedding
        return (logits, *presents)


def build_model(size):
    torch.manual_seed(0)
    return perturb_norms(GPT2Decoder(**SIZES[size]), seed=1).eval()


def _inputs(size, seq, past, seed):
    cfg = SIZES[size]
    rng = np.random.RandomState(seed)
    inputs = {"input_ids": rng.randint(0, cfg["vocab"], (1, seq)).astype(np.int64)}
    head_dim = cfg["dim"] // cfg["heads"]
    for name in input_names(size)[1:]:
        inputs[name] = rng.standard_normal((1, cfg["heads"], past, head_dim)).astype(np.float32)
    return inputs


def run(model, size, inputs):
    with torch.no_grad():
        outs = model(*[torch.from_numpy(inputs[n]) for n in input_names(size)])
    return {n: o.numpy() for n, o in zip(output_names(size), outs)}


def trace_inputs(size):
    inputs = _inputs(size, seq=3, past=5, seed=100)
    return tuple(torch.from_numpy(inputs[n]) for n in input_names(size))


CASES = ["prefill", "decode"]


def make_case(model, size, case):
    """prefill: 7 tokens, empty past. decode: 1 token on a past of 9 produced by a prefill of 9 tokens."""
    if case == "prefill":
        inputs = _inputs(size, seq=7, past=0, seed=1)
    elif case == "decode":
        prev = run(model, size, _inputs(size, seq=9, past=0, seed=2))
        inputs = _inputs(size, seq=1, past=0, seed=3)
        for name, out in zip(input_names(size)[1:], output_names(size)[1:]):
            inputs[name] = prev[out]
    else:
        raise ValueError(f"unknown case {case!r} for gpt2")
    return inputs, run(model, size, inputs)


# Parameterized cases, for testing an engine's profiles at chosen shapes: "prefill:seq=16" is `seq`
# tokens on an empty past; "decode:seq=1,past=24" is `seq` tokens on the presents of a `past`-token
# prefill (so the past is realistic).
PARAM_CASES = {"prefill": {"seq": None}, "decode": {"seq": 1, "past": None}}


def make_param_case(model, size, kind, params):
    seq = params["seq"]
    past = params.get("past", 0)
    if seq < 1 or past < 0 or past + seq > SIZES[size]["max_pos"]:
        raise ValueError(f"case {kind}: need seq >= 1, past >= 0 and past + seq <= {SIZES[size]['max_pos']}, "
                         f"got seq={seq}, past={past}")
    inputs = _inputs(size, seq=seq, past=0, seed=3)
    if past > 0:
        prev = run(model, size, _inputs(size, seq=past, past=0, seed=2))
        for name, out in zip(input_names(size)[1:], output_names(size)[1:]):
            inputs[name] = prev[out]
    return inputs, run(model, size, inputs)
