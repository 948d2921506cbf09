#!/usr/bin/python3
"""Seed 003's tiny stateful example as two ONNX entry points over one shared buffer.

  /usr/bin/python3 models/stateful_cache.py --out-dir DIR [--max-batch 10] [--max-seq 20]

The seed's StatefulModel keeps `cache` [max_batch, max_seq] as a registered buffer and exports two
methods: set_cache(data) writes data into cache[:b, :s], get_cache(data) reads cache[:b, :s] back.
ONNX graphs are functional, so each method becomes a graph that takes the buffer as an input
(`cache`) and, if it changes it, returns the new buffer (`cache_out`); kiln's `state:` section binds
both to one state buffer, so the session reads and writes it in place:

  DIR/set_cache.onnx  inputs cache [B, S] float32, data [b, s]  -> cache_out [B, S]
  DIR/get_cache.onnx  inputs cache [B, S] float32, data [b, s]  -> out [b, s]   (data gives the shape)

Legacy tracing exporter, opset 17, b and s dynamic (dim_params "batch" and "seq").
"""
import argparse
import os

import torch


class SetCache(torch.nn.Module):
    """cache[0:b, 0:s] = data, written the seed's way (slice assignment on the buffer)."""

    def forward(self, cache, data):
        out = cache.clone()
        out[0:data.shape[0], 0:data.shape[1]] = data
        return out


class GetCache(torch.nn.Module):
    """cache.narrow(0, 0, b).narrow(1, 0, s), as the seed's get_cache."""

    def forward(self, cache, data):
        return cache.narrow(0, 0, data.size(0)).narrow(1, 0, data.size(1))


def export(out_dir, max_batch=10, max_seq=20):
    os.makedirs(out_dir, exist_ok=True)
    cache = torch.zeros(max_batch, max_seq)
    data = torch.ones(max_batch - 1, max_seq - 1)
    axes = {"data": {0: "batch", 1: "seq"}}
    paths = {}
    for name, module, out_name in (("set_cache", SetCache(), "cache_out"), ("get_cache", GetCache(), "out")):
        path = os.path.join(out_dir, name + ".onnx")
        dyn = dict(axes)
        if out_name == "out":
            dyn["out"] = {0: "batch", 1: "seq"}
        torch.onnx.export(module, (cache, data), path, input_names=["cache", "data"], output_names=[out_name],
                          dynamic_axes=dyn, opset_version=17, do_constant_folding=True)
        paths[name] = path
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--max-batch", type=int, default=10)
    ap.add_argument("--max-seq", type=int, default=20)
    a = ap.parse_args()
    for name, path in export(a.out_dir, a.max_batch, a.max_seq).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
