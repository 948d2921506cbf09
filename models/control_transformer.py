"""A plausible stand-in for the user's ControlTransformer with the KV-cache wrapper of seed 000.

One timestep becomes TOKENS_PER_TIMESTEP tokens, in this order:
  (H/P)*(W/P) image patches (conv patch embedding of batch_data_cam_front_left)
  + 5 meta tokens (speed, gas, brake, steering: Linear(1,D) each; turn_signal: Embedding(3,D))
  + 10 waypoint tokens (Linear(2,D) of batch_data_waypoints_xy_normalized)
  + 3 learned tokens
full: 3x256x256 image, 16x16 patches -> 256 + 5 + 10 + 3 = 274 tokens, D 384, 8 layers, 6 heads
small: 3x32x32 image, 8x8 patches     ->  16 + 5 + 10 + 3 =  34 tokens, D 64, 2 layers, 2 heads

The wrapper (CacheEnabledControlTransformer) follows the seed:
  new = encode(batch)                                  [1, S_new, D]
  projected_embeddings = cat(cached_projected_embeddings, new)   (output, before position embedding)
  all = projected_embeddings + pos_table[:S_total]     position of a token = its index in the window
  x = all[:, S_cached:]                                hidden states are computed for new tokens only
  each layer: Q,K,V from x; K,V = cat(cached K/V of the layer, new K/V); explicit masked attention
  predictions = head(final_ln(x)[:, -1])               [1, 1]
  kv_cache = stack over layers of stack(K, V)          [L, 2, 1, S_total, D]

mask is [S_new, S_total] bool, True = may attend. With the block-causal mask (token of timestep a sees
every token of timesteps b <= a) full(T) and full(T-1) followed by incremental(1) give the same
predictions and caches: the K/V of a token depend only on tokens of its own and earlier timesteps.
"""
import math

import numpy as np
import torch
from torch import nn

from init_utils import perturb_norms

MAX_TIMESTEPS = 6
NUM_META_TOKENS = 5
NUM_WAYPOINTS = 10
NUM_LEARNED_TOKENS = 3
NUM_TURN_SIGNALS = 3

SIZES = {
    "full": dict(image=256, patch=16, dim=384, layers=8, heads=6),
    "small": dict(image=32, patch=8, dim=64, layers=2, heads=2),
}

META_INPUTS = [
    "batch_data_meta_vehiclemotion_speed",
    "batch_data_meta_vehiclemotion_gas_pedal_normalized",
    "batch_data_meta_vehiclemotion_brake_pedal_normalized",
    "batch_data_meta_vehiclemotion_steering_angle_normalized",
]
BATCH_INPUTS = (
    ["batch_data_cam_front_left"]
    + META_INPUTS
    + ["batch_data_meta_vehiclestate_turn_signal", "batch_data_waypoints_xy_normalized"]
)
INPUT_NAMES = BATCH_INPUTS + ["cached_projected_embeddings", "cached_kv", "mask"]
OUTPUT_NAMES = ["predictions", "projected_embeddings", "kv_cache"]


def tokens_per_timestep(size):
    cfg = SIZES[size]
    return (cfg["image"] // cfg["patch"]) ** 2 + NUM_META_TOKENS + NUM_WAYPOINTS + NUM_LEARNED_TOKENS


def dynamic_axes():
    axes = {name: {1: "timesteps"} for name in BATCH_INPUTS}
    axes.update({
        "cached_projected_embeddings": {1: "cached_seq"},
        "cached_kv": {3: "cached_seq"},
        "mask": {0: "new_seq", 1: "total_seq"},
        "projected_embeddings": {1: "total_seq"},
        "kv_cache": {3: "total_seq"},
    })
    return axes


class InputEncoder(nn.Module):
    """Turns the per-timestep inputs into [1, T*tokens_per_timestep, D] token embeddings."""

    def __init__(self, image, patch, dim):
        super().__init__()
        self.image = image
        self.dim = dim
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.meta_embed = nn.ModuleList([nn.Linear(1, dim) for _ in META_INPUTS])
        self.turn_signal_embed = nn.Embedding(NUM_TURN_SIGNALS, dim)
        self.waypoint_embed = nn.Linear(2, dim)
        self.learned_tokens = nn.Parameter(torch.randn(1, NUM_LEARNED_TOKENS, dim) * 0.02)

    def forward(self, cam, metas, turn_signal, waypoints):
        d = self.dim
        # Batch is fixed to 1, so the timestep axis can be folded into the batch axis with -1.
        patches = self.patch_embed(cam.reshape(-1, 3, self.image, self.image))  # [T, D, h, w]
        patches = patches.flatten(2).transpose(1, 2)  # [T, h*w, D]
        meta_tokens = [emb(m).reshape(-1, 1, d) for emb, m in zip(self.meta_embed, metas)]
        turn = self.turn_signal_embed(turn_signal).reshape(-1, 1, d)
        wps = self.waypoint_embed(waypoints).reshape(-1, NUM_WAYPOINTS, d)
        learned = self.learned_tokens.expand(patches.shape[0], -1, -1)
        tokens = torch.cat([patches] + meta_tokens + [turn, wps, learned], dim=1)  # [T, tpt, D]
        return tokens.reshape(1, -1, d)


class CachedSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def _split_heads(self, t):
        return t.reshape(1, -1, self.heads, self.head_dim).transpose(1, 2)  # [1, H, S, Dh]

    def forward(self, x, cached_k, cached_v, mask):
        k = torch.cat([cached_k, self.k_proj(x)], dim=1)  # [1, S_total, D]
        v = torch.cat([cached_v, self.v_proj(x)], dim=1)
        q = self._split_heads(self.q_proj(x))
        scores = q @ self._split_heads(k).transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(dim=-1) @ self._split_heads(v)  # [1, H, S_new, Dh]
        out = out.transpose(1, 2).reshape(1, -1, self.heads * self.head_dim)
        return self.out_proj(out), k, v


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CachedSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, cached_k, cached_v, mask):
        a, k, v = self.attn(self.ln1(x), cached_k, cached_v, mask)
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return x, k, v


class CacheEnabledControlTransformer(nn.Module):
    def __init__(self, image, patch, dim, layers, heads):
        super().__init__()
        self.tokens_per_timestep = (image // patch) ** 2 + NUM_META_TOKENS + NUM_WAYPOINTS + NUM_LEARNED_TOKENS
        self.encoder = InputEncoder(image, patch, dim)
        # One learned embedding per (timestep slot, token) position of the window.
        self.position_embedding = nn.Parameter(
            torch.randn(MAX_TIMESTEPS * self.tokens_per_timestep, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.final_ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, cam, speed, gas, brake, steering, turn_signal, waypoints,
                cached_projected_embeddings, cached_kv, mask):
        new = self.encoder(cam, [speed, gas, brake, steering], turn_signal, waypoints)
        projected = torch.cat([cached_projected_embeddings, new], dim=1)  # [1, S_total, D]
        # Shapes read from tensors are traced, so the slices stay dynamic in the ONNX graph.
        total_len = projected.shape[1]
        cached_len = cached_projected_embeddings.shape[1]
        x = (projected + self.position_embedding[:total_len])[:, cached_len:]
        kvs = []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, cached_kv[i, 0], cached_kv[i, 1], mask)
            kvs.append(torch.stack([k, v]))
        # The reshape pins the batch dim to 1 in the exported output shape (Gemm loses it otherwise).
        predictions = self.head(self.final_ln(x[:, -1])).reshape(1, 1)
        return predictions, projected, torch.stack(kvs)


def build_model(size):
    torch.manual_seed(0)
    model = CacheEnabledControlTransformer(**SIZES[size])
    return perturb_norms(model, seed=1).eval()


def block_causal_mask(tpt, cached_timesteps, new_timesteps):
    """[new_seq, total_seq] bool, True where a new token may attend."""
    q_step = cached_timesteps + np.arange(new_timesteps * tpt) // tpt
    k_step = np.arange((cached_timesteps + new_timesteps) * tpt) // tpt
    return k_step[None, :] <= q_step[:, None]


def random_batch(size, timesteps, seed):
    """Deterministic batch inputs as an ordered dict of numpy arrays."""
    cfg = SIZES[size]
    rng = np.random.RandomState(seed)
    t = timesteps
    batch = {"batch_data_cam_front_left":
             rng.standard_normal((1, t, 3, cfg["image"], cfg["image"])).astype(np.float32)}
    for name in META_INPUTS:
        batch[name] = rng.uniform(-1, 1, (1, t, 1)).astype(np.float32)
    batch["batch_data_meta_vehiclestate_turn_signal"] = rng.randint(0, NUM_TURN_SIGNALS, (1, t, 1)).astype(np.int64)
    batch["batch_data_waypoints_xy_normalized"] = rng.uniform(-1, 1, (1, t, NUM_WAYPOINTS, 2)).astype(np.float32)
    return batch


def slice_timesteps(batch, start, stop):
    return {k: v[:, start:stop] for k, v in batch.items()}


def empty_cache(size):
    cfg = SIZES[size]
    return (np.zeros((1, 0, cfg["dim"]), np.float32),
            np.zeros((cfg["layers"], 2, 1, 0, cfg["dim"]), np.float32))


def make_inputs(size, batch, cached_proj, cached_kv):
    tpt = tokens_per_timestep(size)
    cached_steps = cached_proj.shape[1] // tpt
    new_steps = batch["batch_data_cam_front_left"].shape[1]
    inputs = dict(batch)
    inputs["cached_projected_embeddings"] = cached_proj
    inputs["cached_kv"] = cached_kv
    inputs["mask"] = block_causal_mask(tpt, cached_steps, new_steps)
    return inputs


def run(model, inputs):
    with torch.no_grad():
        outs = model(*[torch.from_numpy(np.ascontiguousarray(inputs[n])) for n in INPUT_NAMES])
    return {n: o.numpy() for n, o in zip(OUTPUT_NAMES, outs)}


def default_timesteps(size):
    return MAX_TIMESTEPS if size == "full" else 3


def trace_inputs(size):
    # Trace with a non-empty cache and distinct dim values so no dim gets specialized by accident.
    batch = random_batch(size, 2, seed=100)
    cfg = SIZES[size]
    tpt = tokens_per_timestep(size)
    proj = np.zeros((1, tpt, cfg["dim"]), np.float32)
    kv = np.zeros((cfg["layers"], 2, 1, tpt, cfg["dim"]), np.float32)
    inputs = make_inputs(size, batch, proj, kv)
    return tuple(torch.from_numpy(inputs[n]) for n in INPUT_NAMES)


CASES = ["full", "incremental"]


def make_case(model, size, case):
    """full: T timesteps on an empty cache. incremental: timestep T-1 on the cache that full(T-1) produced."""
    t = default_timesteps(size)
    batch = random_batch(size, t, seed=1)
    if case == "full":
        inputs = make_inputs(size, batch, *empty_cache(size))
    elif case == "incremental":
        prev = run(model, make_inputs(size, slice_timesteps(batch, 0, t - 1), *empty_cache(size)))
        inputs = make_inputs(size, slice_timesteps(batch, t - 1, t),
                             prev["projected_embeddings"], prev["kv_cache"])
    else:
        raise ValueError(f"unknown case {case!r} for control_transformer")
    return inputs, run(model, inputs)


# Parameterized cases, for testing an engine's profiles at chosen shapes: "full:T=5" is T timesteps on
# an empty cache; "incremental:T=1,cached=3" is T new timesteps on the cache that a full forward over
# the `cached` timesteps before them produced (all timesteps come from one random batch, seed 1).
PARAM_CASES = {"full": {"T": None}, "incremental": {"T": 1, "cached": None}}


def make_param_case(model, size, kind, params):
    t = params["T"]
    cached = params.get("cached", 0)
    if t < 1 or cached < 0 or cached + t > MAX_TIMESTEPS:
        raise ValueError(f"case {kind}: need T >= 1, cached >= 0 and cached + T <= "
                         f"{MAX_TIMESTEPS} (the position table has {MAX_TIMESTEPS} timesteps), got T={t}, cached={cached}")
    batch = random_batch(size, cached + t, seed=1)
    if cached == 0:
        cache = empty_cache(size)
    else:
        prev = run(model, make_inputs(size, slice_timesteps(batch, 0, cached), *empty_cache(size)))
        cache = (prev["projected_embeddings"], prev["kv_cache"])
    inputs = make_inputs(size, slice_timesteps(batch, cached, cached + t), *cache)
    return inputs, run(model, inputs)
