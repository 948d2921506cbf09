"""torchvision VisionTransformer, random init, dynamic batch axis "batch".
full: vit_b_16 layout (224x224, patch 16, width 768, 12 heads, MLP 3072) cut to 4 layers.
small: 32x32, patch 8, width 64, 2 layers, 2 heads, MLP 128.

torchvision's encoder uses nn.MultiheadAttention. In eval mode under torch.no_grad() torch 1.13 routes it
to torch._native_multi_head_attention (the "fast path"), which the legacy exporter cannot export (the
error seed 000 hit). The fast path is skipped when grad is enabled and the weights require grad, so
export_models.py traces inside torch.enable_grad(): the module stays the standard one, eval mode stays on,
and the export gets the ordinary decomposed MultiheadAttention graph (MatMul/Softmax/...)."""
import numpy as np
import torch
from torchvision.models.vision_transformer import VisionTransformer

from init_utils import perturb_norms

SIZES = {
    "full": dict(image_size=224, patch_size=16, num_layers=4, num_heads=12, hidden_dim=768, mlp_dim=3072),
    "small": dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128),
}
INPUT_NAMES = ["input"]
OUTPUT_NAMES = ["logits"]
CASES = ["batch1", "batch2"]
NEEDS_GRAD_FOR_EXPORT = True


def dynamic_axes():
    return {"input": {0: "batch"}, "logits": {0: "batch"}}


def build_model(size):
    torch.manual_seed(0)
    model = VisionTransformer(num_classes=1000, **SIZES[size]).eval()
    # torchvision zero-initialises the classifier head; give it weights so the logits mean something.
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    torch.nn.init.normal_(model.heads.head.bias, std=0.02)
    return perturb_norms(model, seed=1)


def images(size, batch, seed):
    s = SIZES[size]["image_size"]
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
