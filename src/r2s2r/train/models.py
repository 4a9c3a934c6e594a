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

  With `keypoints` K, each camera's network also ends, at a finer stage (at most KEYPOINT_CELLS
  cells), in K spatial-softmax keypoints (Levine et al., 2016; robomimic's image encoder): where
  in the picture each learned feature is strongest, as continuous coordinates, which locate an
  object to a fraction of a cell. The keypoints of all cameras become one more token; with
  `auxiliary_size` too, the auxiliary head reads the objects' poses from the keypoints and the
  joints, and its reading becomes a token as well, so the decoder acts on where it sees the objects.
"""

from __future__ import annotations

import math

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


def _halved(height: int, width: int, times: int) -> tuple[int, int]:
    """A map's size after `times` stride-2 stages."""
    for _ in range(times):
        height, width = (height + 1) // 2, (width + 1) // 2
    return height, width


def default_channels(image_height: int, image_width: int) -> tuple[int, ...]:
    """(16, 32, 64), then more 64-channel stride-2 stages until a camera's feature map is at most
    IMAGE_TOKENS cells: attention's cost grows with the square of the token count."""
    channels = [16, 32, 64]
    while math.prod(_halved(image_height, image_width, len(channels))) > IMAGE_TOKENS:
        channels.append(64)
    return tuple(channels)


KEYPOINT_CELLS = 256  # keypoints come from the first stage with at most this many cells (16x12 at 64x48)


def _stages(channels: tuple[int, ...]) -> list[nn.Sequential]:
    """Stride-2 convolutions with group norm (batch statistics would differ between a batch of
    one on the robot and the training batches)."""
    stages, previous = [], 3
    for out in channels:
        stages.append(nn.Sequential(nn.Conv2d(previous, out, 3, stride=2, padding=1), nn.GroupNorm(8, out), nn.GELU()))
        previous = out
    return stages


def keypoint_stage(channels: tuple[int, ...], image_height: int, image_width: int) -> int:
    """How many stages run before the keypoints are read: the first map of at most KEYPOINT_CELLS."""
    for stage in range(1, len(channels) + 1):
        if math.prod(_halved(image_height, image_width, stage)) <= KEYPOINT_CELLS:
            return stage
    return len(channels)


class _Camera(nn.Module):
    """One camera's network: its feature map as tokens and, with `keypoints`, the spatial
    softmax's (x, y) in [-1, 1] of each of them, read at `keypoint_stage`."""

    def __init__(self, channels: tuple[int, ...], width: int, keypoints: int, keypoint_stage: int):
        super().__init__()
        stages = _stages(channels)
        self.early = nn.Sequential(*stages[:keypoint_stage])
        self.late = nn.Sequential(*stages[keypoint_stage:], nn.Conv2d(channels[-1], width, 1))
        self.keypoints = nn.Conv2d(channels[keypoint_stage - 1], keypoints, 1) if keypoints else None

    def keypoints_of(self, image: torch.Tensor) -> torch.Tensor:
        """The keypoints alone: the first stages and the keypoint layer, not the token stages."""
        return spatial_softmax(self.keypoints(self.early(image)))

    def forward(self, image: torch.Tensor):
        early = self.early(image)
        tokens = self.late(early).flatten(2).transpose(1, 2)  # (B, h * w, width)
        if self.keypoints is None:
            return tokens, None
        return tokens, spatial_softmax(self.keypoints(early))


def spatial_softmax(scores: torch.Tensor) -> torch.Tensor:
    """(B, K, h, w) scores to (B, 2K): each map's softmax-weighted mean x, then y, in [-1, 1]
    from the left and the top edge's cells to the right and the bottom edge's."""
    batch, count, height, width = scores.shape
    attention = torch.softmax(scores.flatten(2), dim=2).reshape(batch, count, height, width)
    xs = torch.linspace(-1.0, 1.0, width, dtype=scores.dtype, device=scores.device)
    ys = torch.linspace(-1.0, 1.0, height, dtype=scores.dtype, device=scores.device)
    x = (attention.sum(dim=2) * xs).sum(dim=2)
    y = (attention.sum(dim=3) * ys).sum(dim=2)
    return torch.cat([x, y], dim=1)


class ActPolicy(_Clamped):
    def __init__(self, state_size: int, action_size: int, chunk_length: int, cameras: int, image_height: int,
                 image_width: int, width: int = 64, heads: int = 4, encoder_layers: int = 2, decoder_layers: int = 2,
                 feedforward: int = 256, dropout: float = 0.1, channels: tuple[int, ...] | None = None,
                 action_low: list[float] | None = None, action_high: list[float] | None = None,
                 auxiliary_size: int = 0, keypoints: int = 0):
        super().__init__()
        self._bounds(action_size, action_low, action_high)
        if cameras < 1:
            raise ValueError("ActPolicy needs one camera at least; StateMLP takes the state alone")
        if keypoints < 0:
            raise ValueError(f"keypoints {keypoints}; expected 0 (none) or more per camera")
        self.action_size, self.chunk_length = action_size, chunk_length
        channels = tuple(channels) if channels is not None else default_channels(image_height, image_width)
        stage = keypoint_stage(channels, image_height, image_width)
        self.backbones = nn.ModuleList(_Camera(channels, width, keypoints, stage) for _ in range(cameras))
        tokens = 1 + cameras * math.prod(_halved(image_height, image_width, len(channels)))
        self.keypoints_in = None
        if keypoints:
            seen = 2 * keypoints * cameras
            self.keypoints_in = nn.Linear(seen, width)
            tokens += 1
            if auxiliary_size:  # the poses read from the keypoints, and that reading as a token
                self.poses_in = nn.Linear(auxiliary_size, width)
                tokens += 1
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
        self.auxiliary = None  # reads the objects' poses: from the keypoints, or from the state token
        if auxiliary_size:
            self.auxiliary = nn.Sequential(nn.Linear(state_size + 2 * keypoints * cameras, feedforward), nn.GELU(),
                                           nn.Linear(feedforward, auxiliary_size)) if keypoints \
                else nn.Linear(width, auxiliary_size)

    def forward(self, state: torch.Tensor, *images: torch.Tensor) -> torch.Tensor:
        return self.forward_with_auxiliary(state, *images)[0]

    def forward_with_auxiliary(self, state: torch.Tensor, *images: torch.Tensor):
        """The chunk, and the auxiliary head's reading of the objects' poses (None without one)."""
        tokens, keypoints = [self.state_in(state)[:, None, :]], []
        for backbone, image in zip(self.backbones, images):
            cells, points = backbone(image)
            tokens.append(cells)
            keypoints.append(points)
        poses = None
        if self.keypoints_in is not None:
            seen = torch.cat(keypoints, dim=1)
            tokens.append(self.keypoints_in(seen)[:, None, :])
            if self.auxiliary is not None:
                # With the joints: a wrist camera's keypoints say where an object is only
                # together with where the arm holds the camera.
                poses = self.auxiliary(torch.cat([state, seen], dim=1))
                # The decoder takes the reading as it is: the action loss does not bend the poses.
                tokens.append(self.poses_in(poses.detach())[:, None, :])
        memory = self.encoder(torch.cat(tokens, dim=1) + self.position)
        queries = self.queries.expand(state.shape[0], -1, -1)
        chunk = self.clamp(self.head(self.decoder(queries, memory)))
        if poses is None and self.auxiliary is not None:
            poses = self.auxiliary(memory[:, 0])
        return chunk, poses

    def read_poses(self, state: torch.Tensor, *images: torch.Tensor) -> torch.Tensor:
        """The auxiliary head's reading of the objects' poses alone. With keypoints it needs only
        the cameras' first stages, not the transformer: cheap enough to train on thousands of
        still frames (r2s2r train --stills)."""
        if self.auxiliary is None:
            raise ValueError("this policy reads no poses; build it with auxiliary_size")
        if self.keypoints_in is None:
            return self.forward_with_auxiliary(state, *images)[1]
        seen = torch.cat([b.keypoints_of(i) for b, i in zip(self.backbones, images)], dim=1)
        return self.auxiliary(torch.cat([state, seen], dim=1))


__all__ = ["StateMLP", "ActPolicy", "spatial_softmax"]
