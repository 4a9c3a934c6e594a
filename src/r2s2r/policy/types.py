"""What a policy sees and does, as plain numpy named by the contract, and the `Policy` protocol.

Observations carry joint positions per joint group (radians, the group's joint order),
gripper openings (metres), images by camera name (H x W x 3 uint8 RGB) and optional task
text. An action chunk carries joint position targets per group and gripper openings for
`length` steps `dt` apart, the first one at the stamp of the observation it came from.

Tensor models and remote servers see flat vectors: the state is the observed groups in
order, then the grippers; the action is the commanded groups in order, then the grippers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from r2s2r.config import ConfigError, Section


class PolicyError(RuntimeError):
    """A policy could not be loaded or could not act; the message says what and what was expected."""


class DeadlineMiss(PolicyError):
    """A policy did not answer in time (a remote server silent past its timeout): the runtime
    counts it as a missed deadline, not as an error of the policy's."""


def _as_dims(source, key: str, value) -> dict[str, int]:
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v > 0
            for k, v in value.items()):
        raise ConfigError(source, key, "a mapping of joint group names to joint counts (positive integers)", value)
    return dict(value)


def _as_names(source, key: str, value) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(source, key, "a list of names", value)
    return tuple(value)


POSE_SIZE = 7  # an object's pose in a state vector: position xyz, quaternion wxyz


@dataclass(frozen=True)
class ActionSpace:
    """Joint position targets per group (group -> joint count) and gripper openings."""

    joints: dict[str, int]
    grippers: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return sum(self.joints.values()) + len(self.grippers)

    def describe(self) -> str:
        parts = [f"{g} ({n})" for g, n in self.joints.items()] + [f"{g} (1)" for g in self.grippers]
        return " + ".join(parts) or "nothing"

    def to_dict(self) -> dict:
        return {"joints": dict(self.joints), "grippers": list(self.grippers)}

    @classmethod
    def from_section(cls, sec: Section) -> "ActionSpace":
        sec.reject_unknown({"joints", "grippers"})
        return cls(_as_dims(sec.source, sec.key("joints"), sec.raw("joints")),
                   _as_names(sec.source, sec.key("grippers"), sec.raw("grippers", [])))


@dataclass(frozen=True)
class ObservationSpace(ActionSpace):
    """What the policy observes: the joint layout of ActionSpace, plus cameras and task text.

    `cameras` maps a camera name to the (height, width) the model takes, or None where the
    policy takes the image as it comes (a remote server resizes for itself). `environment`
    names objects whose poses (position xyz, quaternion wxyz) follow the grippers in the state:
    privileged, given by the twin only, so such a policy runs in the evaluation engine, or on the
    live graph in front of the twin with policy_node's privileged_poses. `object_sizes` names
    objects whose sizes the policy perceives (a skill rule's condition), from the same sources.
    """

    cameras: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    task: bool = False
    environment: tuple[str, ...] = ()
    object_sizes: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return super().size + POSE_SIZE * len(self.environment)

    def to_dict(self) -> dict:
        out = super().to_dict() | {"cameras": {c: (list(s) if s else None) for c, s in self.cameras.items()},
                                   "task": self.task}
        if self.environment:
            out["environment"] = list(self.environment)
        if self.object_sizes:
            out["object_sizes"] = list(self.object_sizes)
        return out

    @classmethod
    def from_section(cls, sec: Section) -> "ObservationSpace":
        sec.reject_unknown({"joints", "grippers", "cameras", "task", "environment", "object_sizes"})
        cameras_raw = sec.raw("cameras", {}) or {}
        if isinstance(cameras_raw, list):
            cameras_raw = {name: None for name in _as_names(sec.source, sec.key("cameras"), cameras_raw)}
        if not isinstance(cameras_raw, Mapping):
            raise sec.error("cameras", "a list of camera names or a mapping of names to [height, width]", cameras_raw)
        sizes = Section(dict(cameras_raw), sec.source, sec.key("cameras"))
        cameras = {}
        for name, size in cameras_raw.items():
            if size is not None:
                height, width = sizes.vector(name, 2, positive=True)
                size = (int(height), int(width))
            cameras[str(name)] = size
        return cls(_as_dims(sec.source, sec.key("joints"), sec.raw("joints")),
                   _as_names(sec.source, sec.key("grippers"), sec.raw("grippers", [])),
                   cameras, sec.boolean("task", False),
                   _as_names(sec.source, sec.key("environment"), sec.raw("environment", [])),
                   _as_names(sec.source, sec.key("object_sizes"), sec.raw("object_sizes", [])))


@dataclass(frozen=True)
class PolicyMetadata:
    """What a policy observes, what it commands, at which rate, in chunks of which length."""

    observation: ObservationSpace
    action: ActionSpace
    control_rate_hz: float
    chunk_length: int
    name: str = ""

    @property
    def dt(self) -> float:
        return 1.0 / self.control_rate_hz

    def to_dict(self) -> dict:
        return {"name": self.name, "observation": self.observation.to_dict(), "action": self.action.to_dict(),
                "control_rate_hz": self.control_rate_hz, "chunk_length": self.chunk_length}

    @classmethod
    def from_section(cls, sec: Section, defaults: "PolicyMetadata | None" = None) -> "PolicyMetadata":
        """Read metadata; keys left out come from `defaults` (e.g. the robot's layout)."""
        sec.reject_unknown({"name", "observation", "action", "control_rate_hz", "chunk_length"})
        if sec.has("observation"):
            observation = ObservationSpace.from_section(sec.section("observation"))
        elif defaults is not None:
            observation = defaults.observation
        else:
            raise sec.error("observation", "the observation space (joints, grippers, cameras, task)")
        if sec.has("action"):
            action = ActionSpace.from_section(sec.section("action"))
        else:  # a policy commands what it observes unless told otherwise
            action = defaults.action if defaults is not None else ActionSpace(observation.joints, observation.grippers)
        rate = sec.number("control_rate_hz", defaults.control_rate_hz if defaults else ..., positive=True)
        chunk = sec.integer("chunk_length", defaults.chunk_length if defaults else ..., minimum=1)
        return cls(observation, action, rate, chunk, sec.raw("name", defaults.name if defaults else "") or "")

    @classmethod
    def from_dict(cls, data: dict, source: str = "<policy metadata>") -> "PolicyMetadata":
        return cls.from_section(Section(data, source))

    @classmethod
    def for_robot(cls, robot, cameras: Sequence[str] = (), control_rate_hz: float = 10.0,
                  chunk_length: int = 10, task: bool = False) -> "PolicyMetadata":
        """Every joint group and gripper of a RobotSpec, observed and commanded."""
        joints = {g.name: len(g.joints) for g in robot.groups}
        grippers = tuple(g.name for g in robot.grippers)
        return cls(ObservationSpace(joints, grippers, {c: None for c in cameras}, task),
                   ActionSpace(joints, grippers), control_rate_hz, chunk_length, robot.name)


@dataclass(frozen=True)
class Observation:
    """One synchronised observation; `stamp` is the oldest of its parts, on the robot's clock.

    `objects` holds privileged object poses (position xyz, quaternion wxyz) by object name: the
    in-process evaluation engine fills it for scripted experts; on the ROS graph it is empty
    unless policy_node reads them from the twin's /tf (privileged_poses). `object_sizes` holds
    their bounding boxes' extents along their own axes (m), from the same sources (on the graph,
    the twin's twin/object_sizes).
    """

    stamp: float
    joints: dict[str, np.ndarray]
    grippers: dict[str, float] = field(default_factory=dict)
    images: dict[str, np.ndarray] = field(default_factory=dict)
    task: str | None = None
    # Privileged object poses, name -> (position xyz, quaternion wxyz): the twin gives them to
    # scripted experts (eval.tasks.Task.object_poses); a learned policy does not see them.
    objects: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    object_sizes: dict[str, np.ndarray] = field(default_factory=dict)

    def state(self, space: ActionSpace) -> np.ndarray:
        """The flat state vector: `space`'s groups in order, then its grippers."""
        missing = [g for g in space.joints if g not in self.joints] + \
                  [g for g in space.grippers if g not in self.grippers]
        if missing:
            raise PolicyError(f"observation lacks {', '.join(missing)}; the policy observes {space.describe()}")
        parts = []
        for group, n in space.joints.items():
            values = np.asarray(self.joints[group], float).ravel()
            if values.shape != (n,):
                raise PolicyError(f"observation of group {group!r} has {values.size} positions, expected {n}")
            parts.append(values)
        parts.append(np.array([float(self.grippers[g]) for g in space.grippers]))
        for name in getattr(space, "environment", ()):
            if name not in self.objects:
                raise PolicyError(f"observation has no pose of {name!r}; the policy observes privileged object "
                                  "poses, which only the twin gives (in the evaluation engine, or on the live graph "
                                  "with policy_node's privileged_poses in front of the twin)")
            position, quaternion = self.objects[name]
            parts.append(np.concatenate([np.asarray(position, float).ravel(), np.asarray(quaternion, float).ravel()]))
        return np.concatenate(parts)


@dataclass(frozen=True)
class ActionChunk:
    """`length` targets `dt` seconds apart; target i is for time `stamp + i * dt`."""

    stamp: float
    dt: float
    joints: dict[str, np.ndarray]  # group -> (length, joints)
    grippers: dict[str, np.ndarray] = field(default_factory=dict)  # gripper -> (length,)

    def __post_init__(self):
        lengths = {np.asarray(v).shape[0] for v in (*self.joints.values(), *self.grippers.values())}
        if len(lengths) != 1 or 0 in lengths:
            raise PolicyError(f"action chunk parts have lengths {sorted(lengths)}; expected one common length >= 1")
        if not self.dt > 0:
            raise PolicyError(f"action chunk dt is {self.dt}; expected a positive step in seconds")

    @property
    def length(self) -> int:
        return int(np.asarray(next(iter((*self.joints.values(), *self.grippers.values())))).shape[0])

    @property
    def span(self) -> float:
        """Seconds from the first target to the last."""
        return (self.length - 1) * self.dt

    def to_array(self, space: ActionSpace) -> np.ndarray:
        """(length, space.size): the groups in `space` order, then the grippers."""
        columns = []
        for group, n in space.joints.items():
            if group not in self.joints:
                raise PolicyError(f"action chunk lacks group {group!r}; the action space is {space.describe()}")
            values = np.asarray(self.joints[group], float).reshape(self.length, -1)
            if values.shape[1] != n:
                raise PolicyError(f"action chunk group {group!r} has {values.shape[1]} joints, expected {n}")
            columns.append(values)
        for gripper in space.grippers:
            if gripper not in self.grippers:
                raise PolicyError(f"action chunk lacks gripper {gripper!r}; the action space is {space.describe()}")
            columns.append(np.asarray(self.grippers[gripper], float).reshape(self.length, 1))
        return np.concatenate(columns, axis=1) if columns else np.zeros((self.length, 0))

    @classmethod
    def from_array(cls, space: ActionSpace, actions, stamp: float, dt: float) -> "ActionChunk":
        actions = np.asarray(actions, dtype=float)
        if actions.ndim == 1:
            actions = actions[None, :]
        if actions.ndim != 2 or actions.shape[1] != space.size or actions.shape[0] < 1:
            raise PolicyError(f"actions have shape {actions.shape}; expected (chunk length, {space.size}) "
                              f"for the action space {space.describe()}")
        if not np.all(np.isfinite(actions)):
            raise PolicyError("actions contain NaN or Inf; expected finite joint targets")
        joints, start = {}, 0
        for group, n in space.joints.items():
            joints[group] = actions[:, start:start + n]
            start += n
        grippers = {g: actions[:, start + i] for i, g in enumerate(space.grippers)}
        return cls(stamp, dt, joints, grippers)


@runtime_checkable
class Policy(Protocol):
    """The one interface the evaluation engine and `policy_node` drive.

    `act` gets one observation and returns a chunk whose stamp is the observation's. It may
    block (a network round trip, a forward pass); the runtime calls it off the control loop.
    """

    metadata: PolicyMetadata

    def reset(self) -> None:
        """Forget episode state (observation history, queued actions)."""

    def act(self, observation: Observation) -> ActionChunk:
        ...
