#!/usr/bin/python3
"""A small T5-style encoder-decoder in seed 001's three-module layout, for kiln's multi-entry engines.

  /usr/bin/python3 models/t5_seq2seq.py --out-dir DIR [--reference N --max-new-tokens T]

T5 as in Hugging Face's modeling_t5: RMS norm without bias, no bias in any projection, attention
scores not scaled by 1/sqrt(d_kv), a separate d_kv (heads * d_kv != d_model), learned relative
position bias (bucketed, bidirectional in the encoder, causal in the decoder; one table per stack,
shared by its layers), cross-attention, ReLU feed-forward, a byte vocabulary (ByT5: pad 0, eos 1,
unk 2, bytes + 3), separate lm_head. Random weights with a fixed seed.

Modules (seed 001's layout; fixed batch 1, source length SRC_LEN, cache length MAX_LEN):
  encoder.onnx  input_ids [1, SRC_LEN] int64, attention_mask [1, SRC_LEN] int64
                -> encoder_hidden_states [1, SRC_LEN, D]
  prefill.onnx  decoder_input_ids [1, P] int64 (P dynamic, "prefix"), encoder_hidden_states,
                encoder_attention_mask [1, SRC_LEN]
                -> logits [1, P, V], cache_k, cache_v [L, 1, H, MAX_LEN, d_kv] (rows >= P zero; cat + slice),
                   cross_k, cross_v [L, 1, H, SRC_LEN, d_kv], cur_pos [] int64 (= P)
  step.onnx     last_token_id [1, 1] int64, encoder_attention_mask, cache_k, cache_v, cross_k,
                cross_v, cur_pos
                -> logits [1, 1, V], cache_k_out, cache_v_out (the new row written at cur_pos),
                   cur_pos_out (= cur_pos + 1)
The step reads the cross-attention K/V the prefill computed (seed 003: computed once per sequence)
instead of taking encoder_hidden_states and recomputing them every step. The cache update is the
seed's StaticCache way, an index_put at cur_pos (exported as ScatterND); attention masks the
positions after cur_pos.

--reference N writes N source sequences of different lengths and PyTorch's greedy decode over the
same three modules: DIR/ref/NNN/{input_ids,attention_mask,tokens,logits}.npy (logits: one row per
generated token, from prefill then each step).
"""
import argparse
import math
import os

import numpy as np
import torch
from torch import nn

CONFIG = dict(vocab=259, d_model=32, d_kv=16, heads=3, d_ff=64, enc_layers=2, dec_layers=2,
              buckets=32, max_distance=64, src_len=32, max_len=128)
PAD, EOS = 0, 1


def relative_bucket(rel, bidirectional, num_buckets, max_distance):
    """T5's _relative_position_bucket, on numpy ints (the tables are precomputed)."""
    ret = np.zeros_like(rel)
    n = num_buckets
    if bidirectional:
        n //= 2
        ret += (rel > 0).astype(np.int64) * n
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    max_exact = n // 2
    is_small = rel < max_exact
    with np.errstate(divide="ignore"):
        large = max_exact + (np.log(np.maximum(rel, 1) / max_exact) / math.log(max_distance / max_exact) * (n - max_exact)).astype(np.int64)
    large = np.minimum(large, n - 1)
    return ret + np.where(is_small, rel, large)


def bucket_table(q_len, k_len, bidirectional, c):
    rel = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]
    return torch.from_numpy(relative_bucket(rel, bidirectional, c["buckets"], c["max_distance"]).astype(np.int64))


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + 1e-6))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        inner = c["heads"] * c["d_kv"]
        self.h, self.dk = c["heads"], c["d_kv"]
        self.q = nn.Linear(c["d_model"], inner, bias=False)
        self.k = nn.Linear(c["d_model"], inner, bias=False)
        self.v = nn.Linear(c["d_model"], inner, bias=False)
        self.o = nn.Linear(inner, c["d_model"], bias=False)

    def heads(self, x):  # [1, S, H*dk] -> [1, H, S, dk]
        return x.view(x.shape[0], -1, self.h, self.dk).transpose(1, 2)

    def attend(self, q, k, v, bias):  # T5: no 1/sqrt(d_kv) scaling
        scores = torch.matmul(q, k.transpose(-1, -2)) + bias
        w = torch.softmax(scores, dim=-1)
        out = torch.matmul(w, v).transpose(1, 2)
        return self.o(out.reshape(out.shape[0], -1, self.h * self.dk))


class FF(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wi = nn.Linear(c["d_model"], c["d_ff"], bias=False)
        self.wo = nn.Linear(c["d_ff"], c["d_model"], bias=False)

    def forward(self, x):
        return self.wo(torch.relu(self.wi(x)))


class EncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.ff = RMSNorm(c["d_model"]), Attention(c), RMSNorm(c["d_model"]), FF(c)


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1, self.self_attn = RMSNorm(c["d_model"]), Attention(c)
        self.ln2, self.cross_attn = RMSNorm(c["d_model"]), Attention(c)
        self.ln3, self.ff = RMSNorm(c["d_model"]), FF(c)


class T5Small(nn.Module):
    """The weights; the three wrappers below compute with them."""

    def __init__(self, c=CONFIG, seed=16):
        super().__init__()
        torch.manual_seed(seed)
        self.c = c
        self.shared = nn.Embedding(c["vocab"], c["d_model"])
        self.enc_bias = nn.Embedding(c["buckets"], c["heads"])
        self.dec_bias = nn.Embedding(c["buckets"], c["heads"])
        self.enc = nn.ModuleList([EncoderLayer(c) for _ in range(c["enc_layers"])])
        self.dec = nn.ModuleList([DecoderLayer(c) for _ in range(c["dec_layers"])])
        self.enc_ln, self.dec_ln = RMSNorm(c["d_model"]), RMSNorm(c["d_model"])
        self.lm_head = nn.Linear(c["d_model"], c["vocab"], bias=False)
        with torch.no_grad():  # Hugging Face's T5 _init_weights (factor 1), norms perturbed around 1
            d, dk, h, ff = c["d_model"], c["d_kv"], c["heads"], c["d_ff"]
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape))
                elif name.endswith(".q.weight"):
                    p.normal_(0.0, (d * dk) ** -0.5)
                elif name.endswith((".k.weight", ".v.weight", "wi.weight", "lm_head.weight")):
                    p.normal_(0.0, d ** -0.5)
                elif name.endswith(".o.weight"):
                    p.normal_(0.0, (h * dk) ** -0.5)
                elif name.endswith("wo.weight"):
                    p.normal_(0.0, ff ** -0.5)
                else:  # the shared embedding and the relative position biases
                    p.normal_(0.0, 1.0)
        self.register_buffer("enc_buckets", bucket_table(c["src_len"], c["src_len"], True, c), persistent=False)
        self.register_buffer("dec_buckets", bucket_table(c["max_len"], c["max_len"], False, c), persistent=False)
        self.register_buffer("positions", torch.arange(c["max_len"]), persistent=False)
        self.eval()


def mask_bias(attention_mask):  # [1, S] 1 = token, 0 = pad -> additive [1, 1, 1, S]
    return (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -1e9


class Encoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        m = self.m
        x = m.shared(input_ids)
        bias = m.enc_bias(m.enc_buckets).permute(2, 0, 1)[None] + mask_bias(attention_mask)
        for layer in m.enc:
            h = layer.ln1(x)
            a = layer.attn
            x = x + a.attend(a.heads(a.q(h)), a.heads(a.k(h)), a.heads(a.v(h)), bias)
            x = x + layer.ff(layer.ln2(x))
        return m.enc_ln(x)


class Prefill(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, decoder_input_ids, encoder_hidden_states, encoder_attention_mask):
        m, c = self.m, self.m.c
        p = decoder_input_ids.shape[1]
        x = m.shared(decoder_input_ids)
        buckets = m.dec_buckets[:p, :p]
        bias = m.dec_bias(buckets).permute(2, 0, 1)[None]
        causal = torch.tril(torch.ones_like(buckets, dtype=torch.bool))
        bias = bias.masked_fill(~causal, -1e9)
        enc_bias = mask_bias(encoder_attention_mask)
        ks, vs, cks, cvs = [], [], [], []
        # The fixed-size cache, the seed's way: cat the prefix rows with a full-length zero block and
        # slice to max_len (static shapes, no data-dependent pad).
        zeros = torch.zeros(1, c["heads"], c["max_len"], c["d_kv"])
        fixed = lambda t: torch.cat([t, zeros], dim=2)[:, :, :c["max_len"]]
        for layer in m.dec:
            h = layer.ln1(x)
            a = layer.self_attn
            k, v = a.heads(a.k(h)), a.heads(a.v(h))
            x = x + a.attend(a.heads(a.q(h)), k, v, bias)
            ks.append(fixed(k))
            vs.append(fixed(v))
            ca = layer.cross_attn
            ck, cv = ca.heads(ca.k(encoder_hidden_states)), ca.heads(ca.v(encoder_hidden_states))
            cks.append(ck)
            cvs.append(cv)
            x = x + ca.attend(ca.heads(ca.q(layer.ln2(x))), ck, cv, enc_bias)
            x = x + layer.ff(layer.ln3(x))
        logits = m.lm_head(m.dec_ln(x))
        cur_pos = torch.ones_like(decoder_input_ids[0]).sum()
        return logits, torch.stack(ks), torch.stack(vs), torch.stack(cks), torch.stack(cvs), cur_pos


class Step(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, last_token_id, encoder_attention_mask, cache_k, cache_v, cross_k, cross_v, cur_pos):
        m = self.m
        x = m.shared(last_token_id)
        live = m.positions <= cur_pos                                   # keys 0..cur_pos
        bias = m.dec_bias(m.dec_buckets[cur_pos]).t()[None, :, None, :]  # [1, H, 1, MAX_LEN]
        bias = bias.masked_fill(~live[None, None, None, :], -1e9)
        enc_bias = mask_bias(encoder_attention_mask)
        new_k, new_v = cache_k.clone(), cache_v.clone()
        for i, layer in enumerate(m.dec):
            h = layer.ln1(x)
            a = layer.self_attn
            new_k[i, :, :, cur_pos] = a.heads(a.k(h))[:, :, 0]              # index_put at cur_pos
            new_v[i, :, :, cur_pos] = a.heads(a.v(h))[:, :, 0]
            x = x + a.attend(a.heads(a.q(h)), new_k[i], new_v[i], bias)
            ca = layer.cross_attn
            x = x + ca.attend(ca.heads(ca.q(layer.ln2(x))), cross_k[i], cross_v[i], enc_bias)
            x = x + layer.ff(layer.ln3(x))
        return m.lm_head(m.dec_ln(x)), new_k, new_v, cur_pos + 1


def modules(seed=16):
    m = T5Small(seed=seed)
    return Encoder(m).eval(), Prefill(m).eval(), Step(m).eval()


def export(out_dir, seed=16):
    c = CONFIG
    os.makedirs(out_dir, exist_ok=True)
    enc, pre, step = modules(seed)
    ids = torch.randint(3, c["vocab"], (1, c["src_len"]))
    mask = torch.ones(1, c["src_len"], dtype=torch.int64)
    with torch.no_grad():
        h = enc(ids, mask)
        prefix = torch.zeros(1, 2, dtype=torch.int64)
        logits, ck, cv, xk, xv, pos = pre(prefix, h, mask)
    kw = dict(opset_version=17, do_constant_folding=True)
    paths = {n: os.path.join(out_dir, n + ".onnx") for n in ("encoder", "prefill", "step")}
    torch.onnx.export(enc, (ids, mask), paths["encoder"], input_names=["input_ids", "attention_mask"],
                      output_names=["encoder_hidden_states"], **kw)
    torch.onnx.export(pre, (prefix, h, mask), paths["prefill"],
                      input_names=["decoder_input_ids", "encoder_hidden_states", "encoder_attention_mask"],
                      output_names=["logits", "cache_k", "cache_v", "cross_k", "cross_v", "cur_pos"],
                      dynamic_axes={"decoder_input_ids": {1: "prefix"}, "logits": {1: "prefix"}}, **kw)
    torch.onnx.export(step, (prefix[:, :1], mask, ck, cv, xk, xv, pos), paths["step"],
                      input_names=["last_token_id", "encoder_attention_mask", "cache_k", "cache_v", "cross_k", "cross_v", "cur_pos"],
                      output_names=["logits", "cache_k_out", "cache_v_out", "cur_pos_out"], **kw)
    return paths


def source_batch(n, seed=1):
    """N byte sequences of lengths spread over 3..SRC_LEN, padded to SRC_LEN, with their masks."""
    c = CONFIG
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = 3 + (i * (c["src_len"] - 3)) // max(n - 1, 1)
        ids = np.zeros((1, c["src_len"]), np.int64)
        ids[0, :length - 1] = rng.integers(3, c["vocab"], length - 1)
        ids[0, length - 1] = EOS
        mask = (np.arange(c["src_len"]) < length).astype(np.int64)[None]
        out.append((ids, mask))
    return out


@torch.no_grad()
def greedy(mods, ids, mask, max_new_tokens):
    """Greedy decode over the three modules: encoder once, prefill [PAD] once, then steps."""
    enc, pre, step = mods
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
    h = enc(ids, mask)
    logits, ck, cv, xk, xv, pos = pre(torch.zeros(1, 1, dtype=torch.int64), h, mask)
    rows, tokens = [logits[0, -1]], []
    while True:
        tok = int(torch.argmax(rows[-1]))
        tokens.append(tok)
        if tok == EOS or len(tokens) >= max_new_tokens or int(pos) >= CONFIG["max_len"]:
            break
        logits, ck, cv, pos = step(torch.tensor([[tok]]), mask, ck, cv, xk, xv, pos)
        rows.append(logits[0, -1])
    return np.array(tokens, np.int64), torch.stack(rows).numpy()


def write_reference(out_dir, n, max_new_tokens, seed=16):
    mods = modules(seed)
    for i, (ids, mask) in enumerate(source_batch(n)):
        d = os.path.join(out_dir, "ref", f"{i:03d}")
        os.makedirs(d, exist_ok=True)
        tokens, logits = greedy(mods, ids, mask, max_new_tokens)
        np.save(os.path.join(d, "input_ids.npy"), ids)
        np.save(os.path.join(d, "attention_mask.npy"), mask)
        np.save(os.path.join(d, "tokens.npy"), tokens)
        np.save(os.path.join(d, "logits.npy"), logits)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--reference", type=int, default=0, help="write this many reference decodes")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    a = ap.parse_args()
    for name, path in export(a.out_dir).items():
        print(f"{name}: {path}")
    if a.reference:
        write_reference(a.out_dir, a.reference, a.max_new_tokens)
        print(f"reference: {a.reference} decodes in {os.path.join(a.out_dir, 'ref')}")


if __name__ == "__main__":
    main()
