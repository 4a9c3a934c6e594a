"""Value types that cross the interface, as plain numpy. No ROS import here."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class CommandError(ValueError):
    """A command was rejected; the message names what is wrong and what was expected."""


class JointNamesError(CommandError):
    """A command named joints the group does not have, named one twice or left one out."""


class StaleCommandError(CommandError):
    """A trajectory stamped to start so long ago that it has already ended."""


def _frozen_array(values, dtype=np.float64) -> np.ndarray:
    array = np.array(values, dtype=dtype, copy=True)
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class JointSample:
    """The measured state of a set of joints at one instant (seconds on the robot's clock)."""

    stamp: float
    names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray

    def __post_init__(self):
        n = len(self.names)
        for attr in ("position", "velocity", "effort"):
            value = _frozen_array(getattr(self, attr))
            if value.shape != (n,):
                raise ValueError(f"JointSample.{attr} has shape {value.shape}, expected ({n},)")
            object.__setattr__(self, attr, value)
        object.__setattr__(self, "names", tuple(self.names))

    def positions_of(self, names) -> np.ndarray:
        return self._of(self.position, names)

    def velocities_of(self, names) -> np.ndarray:
        return self._of(self.velocity, names)

    def efforts_of(self, names) -> np.ndarray:
        return self._of(self.effort, names)

    def _of(self, values: np.ndarray, names) -> np.ndarray:
        index = {name: i for i, name in enumerate(self.names)}
        return np.array([values[index[name]] for name in names])


@dataclass(frozen=True)
class JointCommand:
    """Position targets for named joints; velocity is an optional feed-forward."""

    names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray | None = None
    stamp: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "position", _frozen_array(self.position))
        if self.velocity is not None:
            object.__setattr__(self, "velocity", _frozen_array(self.velocity))


@dataclass(frozen=True)
class CameraFrame:
    """One image with the time it was captured (not published)."""

    camera: str
    stamp: float
    image: np.ndarray
    encoding: str  # ROS encodings: rgb8, bgr8, mono8, 16UC1 (mm), 32FC1 (m)
    frame_id: str
    depth: np.ndarray | None = field(default=None)
