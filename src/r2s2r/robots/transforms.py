"""Every link's transform from its parent, from joint positions and the robot's URDF, as
robot_state_publisher computes them: a joint's origin, then its motion (a turn about its axis, or
a slide along it). Fixed joints give the static transforms (/tf_static), moving ones /tf; a joint
that mimics another follows it when its own position is not given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.robots.spec import RobotSpec

MOVING = ("revolute", "continuous", "prismatic")


@dataclass(frozen=True)
class Transform:
    """`child`'s pose in `parent`: a translation (m) and a rotation as a quaternion x, y, z, w."""

    parent: str
    child: str
    translation: np.ndarray
    rotation: np.ndarray

    def matrix(self) -> np.ndarray:
        out = np.eye(4)
        out[:3, :3] = Rotation.from_quat(self.rotation).as_matrix()
        out[:3, 3] = self.translation
        return out


def _joint_transform(joint: dict, position: float) -> tuple[np.ndarray, Rotation]:
    origin = Rotation.from_euler("xyz", joint["rpy"])  # URDF's roll, pitch, yaw about fixed axes
    translation = np.array(joint["xyz"], float)
    axis = np.array(joint["axis"], float)
    axis = axis / np.linalg.norm(axis)
    if joint["type"] in ("revolute", "continuous"):
        return translation, origin * Rotation.from_rotvec(axis * position)
    if joint["type"] == "prismatic":
        return translation + origin.apply(axis * position), origin
    return translation, origin


def fixed_transforms(robot: RobotSpec) -> list[Transform]:
    """The transforms of the URDF's fixed joints (they never change)."""
    out = []
    for joint in robot.urdf_joints.values():
        if joint["type"] not in MOVING:
            translation, rotation = _joint_transform(joint, 0.0)
            out.append(Transform(joint["parent"], joint["child"], translation, rotation.as_quat()))
    return out


def moving_transforms(robot: RobotSpec, positions: Mapping[str, float]) -> list[Transform]:
    """The transforms of the URDF's moving joints at `positions` (joint name -> rad or m); a joint
    missing from `positions` follows the joint it mimics, and is left out if it mimics none."""
    out = []
    for name, joint in robot.urdf_joints.items():
        if joint["type"] not in MOVING:
            continue
        value = positions.get(name)
        if (value is None or not np.isfinite(value)) and joint["mimic"] in positions:
            value = joint["multiplier"] * positions[joint["mimic"]] + joint["offset"]
        if value is None or not np.isfinite(value):
            continue
        translation, rotation = _joint_transform(joint, float(value))
        out.append(Transform(joint["parent"], joint["child"], translation, rotation.as_quat()))
    return out


def mount_transform(robot: RobotSpec, world: str) -> Transform:
    """The robot's base link in the world frame (where the twin mounts it)."""
    w, x, y, z = robot.mount_quat
    return Transform(world, robot.base_link, np.array(robot.mount_pos, float), np.array([x, y, z, w], float))


def link_poses(transforms: list[Transform], root: str) -> dict[str, np.ndarray]:
    """Each frame's 4x4 pose in `root`, composed along `transforms` (a tree)."""
    poses = {root: np.eye(4)}
    children: dict[str, list[Transform]] = {}
    for t in transforms:
        children.setdefault(t.parent, []).append(t)
    stack = [root]
    while stack:
        parent = stack.pop()
        for t in children.get(parent, ()):
            poses[t.child] = poses[parent] @ t.matrix()
            stack.append(t.child)
    return poses
