"""RobotSpec: what the rest of r2s2r needs to know about one robot.

Kinematics, joint position / velocity / effort limits and collision geometry live in the
robot's URDF (the single source of those numbers); the spec adds what URDF cannot say:
joint groups, acceleration limits, home pose, grippers, rates, actuator gains and cameras.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from r2s2r import paths


@dataclass(frozen=True)
class JointGroup:
    """A set of joints commanded together (`<group>_controller`, `<group>_position_controller`)."""

    name: str
    joints: tuple[str, ...]
    acceleration_limits: tuple[float, ...]  # rad/s^2, datasheet
    kp: tuple[float, ...]  # position actuator stiffness, N m / rad
    kv: tuple[float, ...]  # position actuator damping, N m s / rad
    damping: tuple[float, ...] = ()  # passive joint damping, N m s / rad (default 0)
    armature: tuple[float, ...] = ()  # reflected rotor inertia, kg m^2 (default 0)
    frictionloss: tuple[float, ...] = ()  # dry friction, N m (default 0)
    flange: tuple[str, tuple[float, float, float]] | None = None  # (URDF link, offset): `<group>_flange`
    tcp: tuple[str, tuple[float, float, float]] | None = None  # (URDF link, offset): `<group>_tcp`
    # This group's share of its acceleration limits in the twin, where it differs from the robot's
    # (RobotSpec.twin_acceleration_share): a group that carries others feels their pull most.
    twin_acceleration_share: float | None = None

    def __post_init__(self):
        n = len(self.joints)
        for attr in ("acceleration_limits", "kp", "kv"):
            if len(getattr(self, attr)) != n:
                raise ValueError(f"group {self.name}: {attr} has {len(getattr(self, attr))} values, expected {n}")
        for attr in ("damping", "armature", "frictionloss"):
            values = getattr(self, attr)
            if values and len(values) != n:
                raise ValueError(f"group {self.name}: {attr} has {len(values)} values, expected {n} or none")


@dataclass(frozen=True)
class GripperSpec:
    """A parallel gripper: opening in metres is the sum of its finger joints' travel."""

    name: str  # `gripper`, `left_gripper`, ...
    joints: tuple[str, ...]  # prismatic finger joints; the first drives, the others mimic it
    opening_range: tuple[float, float]  # metres
    max_speed: float  # opening speed, m/s
    max_force: float  # grasp force, N
    kp: float = 800.0  # N / m on the opening
    friction: tuple[float, float, float] = (1.5, 0.02, 0.002)  # finger pads: slide, spin, roll
    home_opening: float | None = None  # defaults to fully open


@dataclass(frozen=True)
class CameraSpec:
    """A camera of the robot or the cell; a `parent` link makes it move with the robot."""

    name: str
    width: int
    height: int
    fovy: float  # vertical field of view, degrees
    pos: tuple[float, float, float]
    lookat: tuple[float, float, float] | None = None  # world cameras: aim at this point
    quat: tuple[float, float, float, float] | None = None  # wxyz; MuJoCo camera frame (looks along -z)
    parent: str | None = None  # URDF link, None for the world


@dataclass(frozen=True)
class JointLimits:
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    effort: np.ndarray


@dataclass(frozen=True)
class RobotSpec:
    name: str
    description: str
    urdf: str  # file name under urdf/
    base_link: str
    groups: tuple[JointGroup, ...]
    home: dict[str, float]  # joint name -> position, every group joint
    grippers: tuple[GripperSpec, ...] = ()
    cameras: tuple[CameraSpec, ...] = ()
    control_rate_hz: float = 500.0
    state_rate_hz: float = 250.0
    mount_pos: tuple[float, float, float] = (0.0, 0.0, 0.0)
    mount_quat: tuple[float, float, float, float] = (1.0, 0.0, 0.0, 0.0)
    vendor_packages: str = ""  # the vendor ROS 2 packages whose joint names we follow
    # The share of the velocity limits the twin's servos can follow without overshooting them,
    # where the model's torque cannot brake the arm at full speed (sim.servo.twin_command_limits).
    twin_velocity_scale: float = 1.0
    # The share of the acceleration limits the twin plans with, where the other joints' pull
    # through the off-diagonal inertia would push a joint past them (sim.servo.twin_command_limits).
    twin_acceleration_share: float = 1.0
    extra: dict = field(default_factory=dict)
    # A variant of `urdf`: (element path from <robot>, attribute, value) changes, e.g. an older
    # revision of a link; urdf_path is then the file with them made (one source for both).
    urdf_changes: tuple[tuple[str, str, str], ...] = ()
    variant_of: str = ""  # the robot this one revises: its config, scenes and stacks serve this one too

    def __post_init__(self):
        missing = [j for j in self.joint_names if j not in self.home]
        if missing:
            raise ValueError(f"robot {self.name}: home pose lacks joints {missing}")

    # -- names -------------------------------------------------------------------------
    @property
    def joint_names(self) -> tuple[str, ...]:
        """Every commanded arm/torso/head joint, group after group."""
        return tuple(j for g in self.groups for j in g.joints)

    @property
    def gripper_joint_names(self) -> tuple[str, ...]:
        return tuple(j for g in self.grippers for j in g.joints)

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.groups)

    def group(self, name: str) -> JointGroup:
        for g in self.groups:
            if g.name == name:
                return g
        raise KeyError(f"robot {self.name} has no joint group {name!r}; groups: {', '.join(self.group_names)}")

    def gripper(self, name: str) -> GripperSpec:
        for g in self.grippers:
            if g.name == name:
                return g
        known = ", ".join(g.name for g in self.grippers) or "none"
        raise KeyError(f"robot {self.name} has no gripper {name!r}; grippers: {known}")

    @property
    def home_positions(self) -> np.ndarray:
        return np.array([self.home[j] for j in self.joint_names])

    # -- URDF-derived facts --------------------------------------------------------------
    @property
    def urdf_path(self):
        if not self.urdf_changes:
            return paths.urdf_path(self.urdf)
        return paths.derived_urdf(self.urdf, self.name, self.urdf_changes)

    @cached_property
    def urdf_name(self) -> str:
        """The URDF's robot name."""
        return ET.parse(self.urdf_path).getroot().get("name")

    @cached_property
    def urdf_joints(self) -> dict[str, dict]:
        """Joint name -> {type, parent, child, xyz, rpy, axis, mimic, multiplier, offset, and, where
        the URDF has a <limit>, lower, upper, velocity, effort} parsed from the URDF (URDF's
        defaults where an element is left out)."""
        root = ET.parse(self.urdf_path).getroot()
        joints = {}

        def vector(element, key, default):
            return tuple(float(v) for v in element.get(key, default).split()) if element is not None else \
                tuple(float(v) for v in default.split())
        for joint in root.iter("joint"):
            limit = joint.find("limit")
            mimic = joint.find("mimic")
            origin = joint.find("origin")
            entry = {"type": joint.get("type"), "parent": joint.find("parent").get("link"),
                     "child": joint.find("child").get("link"), "xyz": vector(origin, "xyz", "0 0 0"),
                     "rpy": vector(origin, "rpy", "0 0 0"), "axis": vector(joint.find("axis"), "xyz", "1 0 0"),
                     "mimic": mimic.get("joint") if mimic is not None else None,
                     "multiplier": float(mimic.get("multiplier", "1")) if mimic is not None else 1.0,
                     "offset": float(mimic.get("offset", "0")) if mimic is not None else 0.0}
            if limit is not None:
                for key in ("lower", "upper", "velocity", "effort"):
                    entry[key] = float(limit.get(key, "nan"))
            joints[joint.get("name")] = entry
        return joints

    @cached_property
    def limits(self) -> JointLimits:
        """Limits of `joint_names` in order: position and velocity and effort from the URDF."""
        rows = []
        for name in self.joint_names:
            if name not in self.urdf_joints or "upper" not in self.urdf_joints[name]:
                raise ValueError(f"robot {self.name}: joint {name} has no <limit> in {self.urdf}")
            j = self.urdf_joints[name]
            rows.append((j["lower"], j["upper"], j["velocity"], j["effort"]))
        arr = np.array(rows).reshape(-1, 4)
        accel = np.array([a for g in self.groups for a in g.acceleration_limits])
        return JointLimits(arr[:, 0], arr[:, 1], arr[:, 2], accel, arr[:, 3])

    @cached_property
    def twin_acceleration_shares(self) -> np.ndarray:
        """Per joint of `joint_names`: the share of its acceleration limit the twin plans with (its
        group's twin_acceleration_share, else the robot's), at most 1."""
        return np.array([min(1.0, self.twin_acceleration_share if g.twin_acceleration_share is None
                             else g.twin_acceleration_share) for g in self.groups for _ in g.joints])

    def summary(self) -> str:
        groups = ", ".join(f"{g.name} ({len(g.joints)})" for g in self.groups)
        grippers = ", ".join(g.name for g in self.grippers) or "none"
        return f"{self.name:22s} {self.description}; groups: {groups}; grippers: {grippers}"
