"""Synthetic regression data: y = x @ w + noise, the same for a given seed."""

from __future__ import annotations

import torch


def batches(
    *, features: int, batch_size: int, seed: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, y, true weights) of one fixed batch on `device`."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(features, 1, generator=generator)
    x = torch.randn(batch_size, features, generator=generator)
    y = x @ weights + 0.01 * torch.randn(batch_size, 1, generator=generator)
    return x.to(device), y.to(device), weights.to(device)
