#!/usr/bin/python3
"""A zoo of torchvision architectures (Debian's python3-torchvision, random weights with fixed seeds),
exported to ONNX for the "off the fast path" checks: kiln against PyTorch (tests/e2e/test_zoo.py, a
few small ones) and against ONNX Runtime (bench/run_peer_bench.py --zoo, all of them at batch 1).

  /usr/bin/python3 models/torchvision_zoo.py --out DIR [--image N] [--only NAME ...] [--list]

writes DIR/NAME.onnx (opset 17, legacy tracing exporter, batch 1, input "input" [1, 3, N, N], output
"logits") and DIR/cases/NAME/inputs/input.npy, DIR/cases/NAME/expected/logits.npy (PyTorch's output).
An export is skipped when its .onnx and case exist and are newer than this file.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torchvision.models as tvm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from init_utils import perturb_norms  # noqa: E402

OPSET = 17

# name -> (builder, family): depthwise and squeeze-excite nets, dense concatenation, grouped and
# shuffled channels, ConvNeXt, Swin, ViT, and plain/branching CNNs.
ZOO = {
    "mobilenet_v2": (lambda: tvm.mobilenet_v2(), "depthwise, inverted residuals, ReLU6"),
    "mobilenet_v3_small": (lambda: tvm.mobilenet_v3_small(), "depthwise, squeeze-excite (hard sigmoid), HardSwish"),
    "efficientnet_b0": (lambda: tvm.efficientnet_b0(), "depthwise, squeeze-excite (sigmoid), SiLU"),
    "mnasnet0_5": (lambda: tvm.mnasnet0_5(), "depthwise, NAS-found"),
    "densenet121": (lambda: tvm.densenet121(), "dense concatenation, pre-activation BatchNorm"),
    "shufflenet_v2_x1_0": (lambda: tvm.shufflenet_v2_x1_0(), "channel shuffle, split"),
    "resnext50_32x4d": (lambda: tvm.resnext50_32x4d(), "grouped convolutions"),
    "regnet_y_400mf": (lambda: tvm.regnet_y_400mf(), "grouped convolutions, squeeze-excite"),
    "squeezenet1_1": (lambda: tvm.squeezenet1_1(), "fire modules, concatenation"),
    "googlenet": (lambda: tvm.googlenet(aux_logits=False, init_weights=True), "inception branches"),
    "convnext_tiny": (lambda: tvm.convnext_tiny(), "7x7 depthwise, LayerNorm, GELU"),
    "swin_t": (lambda: tvm.swin_t(), "shifted-window attention"),
    "vit_b_16": (lambda: tvm.vit_b_16(), "transformer encoder"),
}
# Architectures that need 224x224 (fixed position embeddings or window grids).
FIXED_224 = {"vit_b_16", "swin_t"}


def build(name):
    torch.manual_seed(0)
    model = perturb_norms(ZOO[name][0](), seed=1)
    # Parameters torchvision initialises to zero (vit_b_16's classifier head) would make every
    # logit 0, and a comparison with PyTorch would pass whatever the engine computed.
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and not p.any():
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))
    return model.eval()


def image(size, seed=7):
    return np.random.RandomState(seed).standard_normal((1, 3, size, size)).astype(np.float32)


def export(name, out_dir, size, quiet=False, onnx_path=None, case=None):
    """Exports NAME at size x size to onnx_path (default out_dir/NAME.onnx) with its case (inputs and
    PyTorch's output) in case (default out_dir/cases/NAME); returns the .onnx path."""
    size = 224 if name in FIXED_224 else size
    onnx_path = onnx_path or os.path.join(out_dir, f"{name}.onnx")
    case = case or os.path.join(out_dir, "cases", name)
    os.makedirs(os.path.dirname(onnx_path), exist_ok=True)
    expected = os.path.join(case, "expected", "logits.npy")
    stamp = os.path.getmtime(os.path.abspath(__file__))
    if all(os.path.exists(p) and os.path.getmtime(p) >= stamp for p in (onnx_path, expected)):
        return onnx_path
    t0 = time.time()
    model = build(name)
    x = image(size)
    os.makedirs(os.path.join(case, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(case, "expected"), exist_ok=True)
    with torch.no_grad():
        out = model(torch.from_numpy(x)).numpy()
    # Exported with autograd on: under no_grad nn.MultiheadAttention (vit_b_16) takes its fused
    # fast path, aten::_native_multi_head_attention, which has no ONNX export.
    tmp = onnx_path + ".tmp"
    torch.onnx.export(model, (torch.from_numpy(x),), tmp, opset_version=OPSET, input_names=["input"],
                      output_names=["logits"], do_constant_folding=True)
    np.save(os.path.join(case, "inputs", "input.npy"), x)
    np.save(expected, out)
    os.replace(tmp, onnx_path)
    if not quiet:
        print(f"[zoo] {name}: {size}x{size} exported in {time.time() - t0:.1f} s -> {onnx_path}", flush=True)
    return onnx_path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="output folder")
    p.add_argument("--image", type=int, default=224, help="input height and width (default 224)")
    p.add_argument("--only", action="append", default=[], help="export only NAME (repeatable)")
    p.add_argument("--list", action="store_true", help="print the zoo and exit")
    a = p.parse_args(argv)
    if a.list:
        for n, (_, family) in ZOO.items():
            print(f"{n:22s} {family}")
        return 0
    if not a.out:
        p.error("--out is required")
    names = a.only or list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; the zoo: {', '.join(ZOO)}")
    os.makedirs(a.out, exist_ok=True)
    for n in names:
        export(n, a.out, a.image)
    return 0


if __name__ == "__main__":
    sys.exit(main())
