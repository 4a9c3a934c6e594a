"""Compact policies r2s2r trains on a CPU (`r2s2r train`), in plain torch.

Both follow the tensor-model contract of policy.tensor (normalised state, then one (B, 3, H, W)
image in [0, 1] per camera; out (B, T, A) normalised actions), so a checkpoint runs through the
`torch:` loader in the evaluation engine and in policy_node unchanged.

Both clamp their output to the range of the actions they were trained on (`action_low`,
`action_high`, normalised, a hair inside): a regression lands a little past the demonstrated
extremes (a gripper opened 0.3 mm beyond its limit), and the driver refuses such a command
whole, as it must.

- `StateMLP`: the state through an MLP to a whole action chunk.
- `ActPolicy`: ACT's shape (Zhao et al., 2023, "Learning Fine-Grained Bimanual Manipulation with
  Low-Cost Hardware") at a size two CPU cores train: a small CNN per camera whose feature map
  becomes tokens (stride-2 stages until at most IMAGE_TOKENS per camera), a transformer encoder
  over the state token and the image tokens, and a transformer decoder whose T learned queries
  read out the chunk. Without the CVAE: r2s2r's experts are scripted and unimodal, and its
  chunks are ensembled or replanned by the runtime. With `auxiliary_size`, a second head reads
  the objects' poses out of the state token for an auxiliary loss in training (the twin knows
  them; the robot's policy never sees them).
"""

from __future__ import annotations

import torch
from torch import nn


class _Clamped(nn.Module):
    """Keeps outputs within the trained actions' range (None: unbounded)."""

    def _bounds(self, action_size: int, low, high) -> None:
        self.register_buffer("action_low", torch.tensor(low if low is not None else [-torch.inf] * action_size,
                                                        dtype=torch.float32))
        self.register_buffer("action_high", torch.tensor(high if high is not None else [torch.inf] * action_size,
                                                         dtype=torch.float32))

    def clamp(self, actions: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(actions, self.action_high), self.action_low)


class StateMLP(_Clamped):
    def __init__(self, state_size: int, action_size: int, chunk_length: int, hidden: int = 256, layers: int = 3,
                 action_low: list[float] | None = None, action_high: list[float] | None = None):
        super().__init__()
        self._bounds(action_size, action_low, action_high)
        self.action_size, self.chunk_length = action_size, chunk_length
        blocks, width = [], state_size
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(hidden, chunk_length * action_size)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.clamp(self.head(self.body(state)).reshape(state.shape[0], self.chunk_length, self.action_size))


IMAGE_TOKENS = 64  # at most this many tokens per camera by default (ACT's ResNet gives 15x20 at 480x640)


def default_channels(image_height: int, image_width: int) -> tuple[int, ...]:
    """(16, 32, 64), then more 64-channel stride-2 stages until a camera's feature map is at most
    IMAGE_TOKENS cells: attention's cost grows with the square of the token count."""
    channels, height, width = [16, 32, 64], image_height, image_width
    for _ in channels:
        height, width = (height + 1) // 2, (width + 1) // 2
    while height * width > IMAGE_TOKENS:
        channels.append(64)
        height, width = (height + 1) // 2, (width + 1) // 2
    return tuple(channels)


def _backbone(channels: tuple[int, ...], width: int) -> nn.Sequential:
    """Stride-2 convolutions with group norm (batch statistics would differ between a batch of
    one on the robot and the training batches), then a 1x1 projection to the token width."""
    layers, previous = [], 3
    for out in channels:
        layers += [nn.Conv2d(previous, out, 3, stride=2, padding=1), nn.GroupNorm(8, out), nn.GELU()]
        previous = out
    layers.append(nn.Conv2d(previous, width, 1))
    return nn.Sequential(*layers)


class ActPolicy(_Clamped):
    def __init__(self, state_size: int, action_size: int, chunk_length: int, cameras: int, image_height: int,
                 image_width: int, width: int = 64, heads: int = 4, encoder_layers: int = 2, decoder_layers: int = 2,
                 feedforward: int = 256, dropout: float = 0.1, channels: tuple[int, ...] | None = None,
                 action_low: list[float] | None = None, action_high: list[float] | None = None,
                 auxiliary_size: int = 0):
        super().__init__()
        self._bounds(action_size, action_low, action_high)
        if cameras < 1:
            raise ValueError("ActPolicy needs one camera at least; StateMLP takes the state alone")
        self.action_size, self.chunk_length = action_size, chunk_length
        channels = tuple(channels) if channels is not None else default_channels(image_height, image_width)
        self.backbones = nn.ModuleList(_backbone(channels, width) for _ in range(cameras))
        height, width_px = image_height, image_width
        for _ in channels:
            height, width_px = (height + 1) // 2, (width_px + 1) // 2
        tokens = 1 + cameras * height * width_px
        self.state_in = nn.Linear(state_size, width)
        self.position = nn.Parameter(torch.zeros(1, tokens, width))
        self.queries = nn.Parameter(torch.zeros(1, chunk_length, width))
        nn.init.normal_(self.position, std=0.02)
        nn.init.normal_(self.queries, std=0.02)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(width, heads, feedforward, dropout, batch_first=True, norm_first=True),
            encoder_layers, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(width, heads, feedforward, dropout, batch_first=True, norm_first=True),
            decoder_layers)
        self.head = nn.Linear(width, action_size)
        self.auxiliary = nn.Linear(width, auxiliary_size) if auxiliary_size else None

    def forward(self, state: torch.Tensor, *images: torch.Tensor) -> torch.Tensor:
        return self.forward_with_auxiliary(state, *images)[0]

    def forward_with_auxiliary(self, state: torch.Tensor, *images: torch.Tensor):
        """The chunk, and the auxiliary head's reading of the state token (None without one)."""
        tokens = [self.state_in(state)[:, None, :]]
        for backbone, image in zip(self.backbones, images):
            tokens.append(backbone(image).flatten(2).transpose(1, 2))  # (B, h * w, width)
        memory = self.encoder(torch.cat(tokens, dim=1) + self.position)
        queries = self.queries.expand(state.shape[0], -1, -1)
        chunk = self.clamp(self.head(self.decoder(queries, memory)))
        return chunk, None if self.auxiliary is None else self.auxiliary(memory[:, 0])


__all__ = ["StateMLP", "ActPolicy"]
