"""A reference visuomotor network that follows the tensor-model contract (see policy.tensor).

One small convolutional encoder per camera, the state through a linear layer, and an MLP
head that outputs a whole chunk. It exists so every format and the benchmarks have a real
model to carry; any nn.Module with the same inputs and output works the same way.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class ConvPolicy(nn.Module):
    def __init__(self, state_size: int, action_size: int, chunk_length: int, cameras: int = 0,
                 channels: Sequence[int] = (16, 32), hidden: int = 64):
        super().__init__()
        self.action_size = action_size
        self.chunk_length = chunk_length
        self.encoders = nn.ModuleList(self._encoder(channels) for _ in range(cameras))
        features = hidden + cameras * channels[-1]
        self.state_in = nn.Linear(state_size, hidden)
        self.head = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, chunk_length * action_size))

    @staticmethod
    def _encoder(channels: Sequence[int]) -> nn.Sequential:
        layers, previous = [], 3
        for width in channels:
            layers += [nn.Conv2d(previous, width, 3, stride=2, padding=1), nn.ReLU()]
            previous = width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        return nn.Sequential(*layers)

    def forward(self, state: torch.Tensor, *images: torch.Tensor) -> torch.Tensor:
        parts = [torch.relu(self.state_in(state))]
        parts += [encoder(image) for encoder, image in zip(self.encoders, images)]
        out = self.head(torch.cat(parts, dim=1))
        return out.reshape(state.shape[0], self.chunk_length, self.action_size)
