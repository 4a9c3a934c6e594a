"""Scripted policies written in Python, chosen by `scripted:NAME`.

A scripted policy is a factory that gets the policy's parameters (a config Section) and the
default metadata (the robot's layout, where the caller knows the robot):

    def make_wave(params: Section, defaults: PolicyMetadata | None) -> Policy: ...

registered as an `r2s2r.scripted_policies` plug-in (r2s2r.plugins: `wave =
"my_lab.policies:make_wave"` in the package's entry points), or reached without registering
as `scripted:package.module:make_wave`. r2s2r registers `hold`, `goto` and the task experts
(`scripted:franka_block_in_bowl`, ...; in r2s2r.skills.experts).
"""

from __future__ import annotations

import importlib
from typing import Callable

import numpy as np

from r2s2r import plugins
from r2s2r.config import Section
from r2s2r.policy.types import (ActionChunk, ActionSpace, Observation, ObservationSpace, Policy, PolicyError,
                                PolicyMetadata)

ScriptedFactory = Callable[[Section, "PolicyMetadata | None"], Policy]

DEFAULT_RATE_HZ = 10.0
DEFAULT_CHUNK = 10


def scripted_factory(name: str) -> ScriptedFactory:
    """The factory `name` names: a registered plug-in, or `package.module:ATTRIBUTE`."""
    if ":" not in name:
        try:
            return plugins.load("scripted_policies", name)
        except plugins.PluginError as error:
            raise PolicyError(f"{error} (or scripted:package.module:FACTORY)") from None
    module_name, _, attribute = name.rpartition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PolicyError(f"scripted:{name}: module {module_name!r} cannot be imported ({exc})") from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise PolicyError(f"scripted:{name}: module {module_name} defines no scripted policy factory {attribute!r}")
    return factory


def make_scripted(name: str, params: Section, defaults: PolicyMetadata | None = None) -> Policy:
    return scripted_factory(name)(params, defaults)


def _timing(params: Section, defaults: PolicyMetadata | None) -> tuple[float, int]:
    rate = params.number("control_rate_hz", defaults.control_rate_hz if defaults else DEFAULT_RATE_HZ, positive=True)
    chunk = params.integer("chunk_length", defaults.chunk_length if defaults else DEFAULT_CHUNK, minimum=1)
    return rate, chunk


def _constant_chunk(observation: Observation, space: ActionSpace, target: np.ndarray, length: int,
                    dt: float) -> ActionChunk:
    return ActionChunk.from_array(space, np.repeat(target[None], length, axis=0), observation.stamp, dt)


class HoldPolicy:
    """Holds the position it first observed after a reset."""

    def __init__(self, metadata: PolicyMetadata):
        self.metadata = metadata
        self._held: np.ndarray | None = None

    def reset(self) -> None:
        self._held = None

    def act(self, observation: Observation) -> ActionChunk:
        if self._held is None:
            self._held = observation.state(self.metadata.action)
        return _constant_chunk(observation, self.metadata.action, self._held, self.metadata.chunk_length,
                               self.metadata.dt)


def make_hold(params: Section, defaults: PolicyMetadata | None) -> Policy:
    params.reject_unknown({"control_rate_hz", "chunk_length"})
    if defaults is None:
        raise PolicyError("scripted:hold needs the robot's joint layout (run it for a robot, e.g. policy_node's "
                          "`robot` parameter)")
    rate, chunk = _timing(params, defaults)
    space = defaults.action
    return HoldPolicy(PolicyMetadata(ObservationSpace(space.joints, space.grippers), space, rate, chunk, "hold"))


class GotoPolicy:
    """Moves in a straight line in joint space to a goal, every joint arriving together.

    Each chunk starts where the robot is; target i is `i + 1` steps of at most `max_speed`
    (rad/s, the fastest joint) along the line, so replanning from any state converges.
    """

    def __init__(self, metadata: PolicyMetadata, goal: np.ndarray, max_speed: float, max_gripper_speed: float):
        self.metadata = metadata
        self.goal = goal
        n_joints = sum(metadata.action.joints.values())
        self.speed = np.array([max_speed] * n_joints + [max_gripper_speed] * len(metadata.action.grippers))

    def reset(self) -> None:
        """Goto keeps no state: every chunk is planned from the observation."""

    def act(self, observation: Observation) -> ActionChunk:
        start = observation.state(self.metadata.action)
        delta = self.goal - start
        # Time to the goal of the slowest coordinate at its speed; all coordinates share it.
        duration = float(np.max(np.abs(delta) / self.speed)) if delta.size else 0.0
        steps = np.arange(1, self.metadata.chunk_length + 1) * self.metadata.dt
        fraction = np.ones_like(steps) if duration == 0 else np.minimum(steps / duration, 1.0)
        return ActionChunk.from_array(self.metadata.action, start + fraction[:, None] * delta, observation.stamp,
                                      self.metadata.dt)


def make_goto(params: Section, defaults: PolicyMetadata | None) -> Policy:
    params.reject_unknown({"goal", "gripper", "max_speed", "max_gripper_speed", "control_rate_hz", "chunk_length"})
    goal_sec = params.section("goal", {})
    if not goal_sec.data:
        raise params.error("goal", "a mapping of joint group names to goal positions (rad), e.g. {arm: [...]}")
    known = defaults.action.joints if defaults else None
    joints, values = {}, []
    for group, raw in goal_sec.data.items():
        if known is not None and group not in known:
            raise goal_sec.error(str(group), f"one of the robot's joint groups: {', '.join(known)}", "unknown group")
        lengths = known[group] if known is not None else (len(raw) if isinstance(raw, (list, tuple)) else 1)
        joints[str(group)] = lengths
        values += goal_sec.vector(str(group), lengths)
    gripper_sec = params.section("gripper", {})
    known_grippers = defaults.action.grippers if defaults else None
    grippers = []
    for gripper in gripper_sec.data:
        if known_grippers is not None and gripper not in known_grippers:
            raise gripper_sec.error(str(gripper), f"one of the robot's grippers: {', '.join(known_grippers) or 'none'}",
                                    "unknown gripper")
        grippers.append(str(gripper))
        values.append(gripper_sec.number(str(gripper), minimum=0.0))
    rate, chunk = _timing(params, defaults)
    space = ActionSpace(joints, tuple(grippers))
    metadata = PolicyMetadata(ObservationSpace(space.joints, space.grippers), space, rate, chunk, "goto")
    return GotoPolicy(metadata, np.array(values), params.number("max_speed", 0.5, positive=True),
                      params.number("max_gripper_speed", 0.05, positive=True))
