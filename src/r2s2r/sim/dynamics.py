"""A robot's fitted dynamics, as `r2s2r align --fit` writes them (robot_dynamics.yaml), applied to a twin.

A scene names the file with `dynamics: robot_dynamics.yaml` (relative to the scene's folder);
every Twin of that scene then has, after compiling, per joint the fitted actuator stiffness
(`kp`) and damping (`kv`), passive damping, armature and friction loss, delays its commands by
`command_latency_s`, and (`object_priority`) lets the objects' own friction govern their
contacts, the convention the fit identified that friction under (real2sim.params).

    robot: franka_fr3
    command_latency_s: 0.013
    object_priority: 2
    joints:
      fr3_joint1: {kp: 3600.0, kv: 585.0, damping: 2.0, armature: 0.1, frictionloss: 0.3}
      ...
    fitted: {...}            # the fit's own values (real2sim.params names), for the record
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import mujoco
import numpy as np

from r2s2r.config import ConfigError, Section, load_yaml

JOINT_KEYS = ("kp", "kv", "damping", "armature", "frictionloss")


@dataclass(frozen=True)
class DynamicsSpec:
    robot: str
    joints: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # joint -> JOINT_KEYS subset
    command_latency_s: float = 0.0
    object_priority: int | None = None  # geom priority of the scene's objects (None: leave MuJoCo's default)
    source: str = "<dynamics>"

    def __hash__(self) -> int:
        # By value, so that a Scene naming a dynamics file hashes (the evaluation caches twins by scene).
        joints = tuple(sorted((j, tuple(sorted(v.items()))) for j, v in self.joints.items()))
        return hash((self.robot, joints, self.command_latency_s, self.object_priority, self.source))


def load_dynamics(path: str | Path, robot) -> DynamicsSpec:
    """A dynamics file for `robot` (a RobotSpec); errors name the file, the key and what was expected."""
    data = load_yaml(path)
    top = Section(data, str(path))
    top.reject_unknown({"robot", "command_latency_s", "object_priority", "joints", "fitted"})
    name = top.string("robot")
    if name != robot.name:
        raise top.error("robot", f"the scene's robot {robot.name}", name)
    joints = {}
    if top.has("joints"):
        sec = top.section("joints")
        known = set(robot.joint_names)
        for joint in sec.data:
            if joint not in known:
                raise sec.error(str(joint), "an arm joint of " + robot.name + ": " + ", ".join(robot.joint_names))
            j = sec.section(joint)
            j.reject_unknown(set(JOINT_KEYS))
            joints[joint] = {k: j.number(k, minimum=0.0) for k in JOINT_KEYS if j.has(k)}
    priority = top.integer("object_priority", 0, minimum=0) if top.raw("object_priority", None) is not None else None
    return DynamicsSpec(robot=name, joints=joints,
                        command_latency_s=top.number("command_latency_s", 0.0, minimum=0.0, maximum=1.0),
                        object_priority=priority, source=str(path))


def write_joint_dynamics(model: mujoco.MjModel, actuators, dofs, kp=None, kv=None, damping=None, armature=None,
                         frictionloss=None) -> None:
    """The one place that writes position servos' gains and their joints' passive dynamics into a
    compiled model (a fitted file, a fit's trial values, a perturbation's gain scale all come
    through here). `actuators` and `dofs`: indices (scalars or arrays, pairwise); a value left
    None stays as it is."""
    if kp is not None:
        model.actuator_gainprm[actuators, 0] = kp
        model.actuator_biasprm[actuators, 1] = -np.asarray(kp, dtype=float)
    if kv is not None:
        model.actuator_biasprm[actuators, 2] = -np.asarray(kv, dtype=float)
    if damping is not None:
        model.dof_damping[dofs] = damping
    if armature is not None:
        model.dof_armature[dofs] = armature
    if frictionloss is not None:
        model.dof_frictionloss[dofs] = frictionloss


def apply_dynamics(model: mujoco.MjModel, dynamics: DynamicsSpec, object_geoms=()) -> None:
    """Write the file's joint values into a compiled model (a position actuator per joint, named
    after it, as robots.model builds them) and the objects' priority into their geoms."""
    for joint, values in dynamics.joints.items():
        write_joint_dynamics(model, model.actuator(joint).id, model.joint(joint).dofadr[0],
                             **{key: values.get(key) for key in JOINT_KEYS})
    if dynamics.object_priority is not None:
        for geom in object_geoms:
            model.geom_priority[model.geom(geom).id] = dynamics.object_priority


__all__ = ["DynamicsSpec", "load_dynamics", "apply_dynamics", "write_joint_dynamics", "JOINT_KEYS", "ConfigError"]
