"""A two-layer perceptron."""

from __future__ import annotations

from torch import nn


def make_model(features: int, hidden: int = 64) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
