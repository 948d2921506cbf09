"""Shared initialisation helper for the export models."""
import torch
from torch import nn


def perturb_norms(model, seed):
    """Give every LayerNorm/BatchNorm a non-trivial affine transform (and BatchNorm non-trivial running
    statistics). Fresh modules have weight 1 / bias 0, which would let a kernel that ignores them pass,
    and the exporter deduplicates identical initializers into Identity nodes."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)) and m.weight is not None:
                m.weight.copy_(1 + 0.1 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.num_features, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(m.num_features, generator=gen))
    return model
