"""Image policies for the tests, as users bring them: small convolutional torch modules that see
the block of tests/data/franka_point_at_block.yaml only through the scene camera and turn the
FR3's first joint toward it (tests/pointing_task.py)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from r2s2r.policy import PolicyMetadata
from r2s2r.policy.tensor import _image_tensor  # what the policy makes of an image
from r2s2r.policy.types import ActionSpace, ObservationSpace
from r2s2r.robots import get_robot
from r2s2r.sim.render import TwinRenderer
from r2s2r.sim.twin import Twin
from tests.backend_helpers import REPO

TASK = str(REPO / "tests" / "data" / "franka_point_at_block.yaml")
SIZE = (96, 128)  # the image the model takes (height, width); the camera renders 320 x 240
RED, GREEN = 0.0, 1.0  # block_colour choices
FR3 = get_robot("franka_fr3")


class PointAtRed(nn.Module):
    """A 1x1 convolution finds red pixels; their centroid in the image, mapped to an azimuth, is
    the first joint's target; the other joints hold home. No red: joint 1 at home."""

    def __init__(self, coefficients, chunk_length: int):
        super().__init__()
        self.redness = nn.Conv2d(3, 1, 1)
        with torch.no_grad():
            self.redness.weight[:] = torch.tensor([1.0, -0.6, -0.6]).reshape(1, 3, 1, 1)
            self.redness.bias[:] = -0.25
        self.register_buffer("coefficients", torch.tensor(coefficients, dtype=torch.float32))
        self.register_buffer("home", torch.tensor(FR3.home_positions, dtype=torch.float32))
        self.chunk_length = chunk_length

    def centroid(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mask = torch.relu(self.redness(image))[:, 0]
        height, width = mask.shape[-2], mask.shape[-1]
        total = mask.sum(dim=(1, 2))
        columns = (mask.sum(dim=1) * torch.linspace(0.0, 1.0, width)).sum(dim=1) / (total + 1e-6)
        rows = (mask.sum(dim=2) * torch.linspace(0.0, 1.0, height)).sum(dim=1) / (total + 1e-6)
        return columns, rows, total

    def forward(self, state: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        columns, rows, total = self.centroid(image)
        c = self.coefficients  # tan(azimuth) = y / x: the column's offset, scaled with depth (the row)
        aim = torch.atan(c[0] * columns + c[1] * columns * rows + c[2] * rows + c[3])
        azimuth = torch.where(total > 1.0, aim, torch.zeros_like(total))
        action = self.home.unsqueeze(0).repeat(state.shape[0], 1)
        action = torch.cat([azimuth.unsqueeze(1), action[:, 1:]], dim=1)
        return action.unsqueeze(1).repeat(1, self.chunk_length, 1)


def point_at_red_metadata() -> PolicyMetadata:
    return PolicyMetadata(ObservationSpace({"arm": 7}, (), {"scene": SIZE}), ActionSpace({"arm": 7}, ()),
                          control_rate_hz=10.0, chunk_length=4, name="point_at_red")


def fit_point_at_red(task) -> list[float]:
    """The azimuth from the red centroid, fitted by least squares on renders of the block on a grid."""
    model = PointAtRed([0.0] * 4, 1)
    rows = []
    for dx in (-0.1, 0.0, 0.1):
        for dy in np.linspace(-0.3, 0.3, 5):
            scene = task.scene({"block_x": dx, "block_y": float(dy)})
            twin = Twin(scene)
            with TwinRenderer(twin) as renderer:
                image = _image_tensor("scene", renderer.rgb("scene"), SIZE)
            with torch.no_grad():
                columns, image_rows, _ = model.centroid(torch.from_numpy(image))
            x, y = twin.data.body("block").xpos[:2]
            rows.append((float(columns[0]), float(image_rows[0]), float(np.arctan2(y, x))))
    column, row, azimuth = np.array(rows).T
    design = np.column_stack([column, column * row, row, np.ones_like(row)])
    coefficients, *_ = np.linalg.lstsq(design, np.tan(azimuth), rcond=None)
    worst = np.max(np.abs(np.arctan(design @ coefficients) - azimuth))
    assert worst < 0.03, f"the centroid does not tell the block's azimuth: worst fit error {worst:.3f} rad"
    return [float(c) for c in coefficients]




class AimWithAWobble(PointAtRed):
    """PointAtRed's aim, and on joints 2-7 a small offset from an MLP of the state and the image's
    mean colour (random weights, fixed by `seed`): a model with linear layers, whose rows CPU
    matrix kernels compute differently in a partial block (policy.tensor), and whose every bit
    moves the arm."""

    def __init__(self, coefficients, chunk_length: int, seed: int = 0, amplitude: float = 0.03):
        super().__init__(coefficients, chunk_length)
        generator = torch.Generator().manual_seed(seed)
        self.wobble = nn.Sequential(nn.Linear(10, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 6))
        with torch.no_grad():
            for parameter in self.wobble.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
        self.amplitude = amplitude

    def forward(self, state: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        aimed = super().forward(state, image)
        offset = self.amplitude * torch.tanh(self.wobble(torch.cat([state, image.mean(dim=(2, 3))], dim=1)))
        return aimed + torch.cat([torch.zeros_like(offset[:, :1]), offset], dim=1).unsqueeze(1)


class RefusesWithoutRed(PointAtRed):
    """PointAtRed that raises when an image in its batch shows no red: a model that fails on some
    inputs (run as a `torch:` checkpoint, this class imported by name)."""

    def forward(self, state: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        if bool((self.centroid(image)[2] <= 1.0).any()):
            raise RuntimeError("no red block in view")
        return super().forward(state, image)
