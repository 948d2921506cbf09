"""torchvision ResNet-18 (num_classes=1000), random init. Input [batch, 3, H, W] with a dynamic batch
axis "batch"; H = W = 224 at full size, 64 at small size (the graph is the same, only the spatial dims
baked into the exported shapes differ)."""
import numpy as np
import torch
import torchvision

from init_utils import perturb_norms

SIZES = {"full": dict(image=224), "small": dict(image=64)}
INPUT_NAMES = ["input"]
OUTPUT_NAMES = ["logits"]
CASES = ["batch1", "batch2"]


def dynamic_axes():
    return {"input": {0: "batch"}, "logits": {0: "batch"}}


def build_model(size):
    torch.manual_seed(0)
    # BatchNorm gets random statistics and affine parameters; the exporter folds it into the convolutions.
    return perturb_norms(torchvision.models.resnet18(num_classes=1000), seed=1).eval()


def images(size, batch, seed):
    s = SIZES[size]["image"]
    return np.random.RandomState(seed).standard_normal((batch, 3, s, s)).astype(np.float32)


def trace_inputs(size):
    return (torch.from_numpy(images(size, 1, seed=100)),)


def make_case(model, size, case):
    batch = {"batch1": 1, "batch2": 2}.get(case)
    if batch is None:
        raise ValueError(f"unknown case {case!r}")
    inputs = {"input": images(size, batch, seed=batch)}
    with torch.no_grad():
        out = model(torch.from_numpy(inputs["input"]))
    return inputs, {"logits": out.numpy()}
