"""torchvision ResNet-18 (num_classes=1000), random init. Input [batch, 3, H, W] with a dynamic batch
axis "batch"; H = W = 224 at full size, 64 at small size (the graph is the same, only the spatial dims
baked into the exported shapes differ)."""
import numpy as np
import torch
import torchvision

SIZES = {"full": dict(image=224), "small": dict(image=64)}
INPUT_NAMES = ["input"]
OUTPUT_NAMES = ["logits"]
CASES = ["batch1", "batch2"]


def dynamic_axes():
    return {"input": {0: "batch"}, "logits": {0: "batch"}}


def build_model(size):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=1000).eval()
    # Fresh BatchNorm statistics are mean 0 / var 1; random ones make the folded affine non-trivial.
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return model


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
