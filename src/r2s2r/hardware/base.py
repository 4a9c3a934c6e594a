"""The Hardware interface every backend implements, sim and real alike.

The lifecycle follows ros2_control's hardware components. The driver core (hardware.driver)
makes every transition by calling the backend's hooks; a backend records its own state, and
nothing outside it writes `Hardware.state`:

    unconfigured --on_configure()--> inactive --on_activate()--> active --on_deactivate()--> inactive
    any state --on_error(fault or lost link)--> error --on_configure()--> inactive ...
    any state --on_cleanup()--> finalized

`read()` and `write()` are called once per control cycle by `ControlLoop`; a backend must
answer within its `link_timeout_s` or raise `LinkLost`, so the driver can report the fault
within 100 ms and stop commanding.
"""

from __future__ import annotations

import abc
import enum
import time
from typing import Any, Mapping

import numpy as np

from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.robots import RobotSpec


def grip_force(gripper_forces: np.ndarray | None, slot: int, default: float) -> float:
    """The grip force (N) to close robot.grippers[slot] with: the commanded limit (write()'s
    `gripper_forces`), or `default`, the backend's configured force, where none is set."""
    if gripper_forces is None or slot >= len(gripper_forces) or not np.isfinite(gripper_forces[slot]):
        return float(default)
    return float(gripper_forces[slot])


def grip_share(gripper_forces: np.ndarray | None, slot: int, max_force: float) -> float:
    """The commanded grip of robot.grippers[slot] as a share of its `max_force` (1 where none
    is set): what a gripper bounded by a motor current scales its configured current by."""
    return min(grip_force(gripper_forces, slot, max_force) / max_force, 1.0)


class Lifecycle(enum.Enum):
    UNCONFIGURED = "unconfigured"
    INACTIVE = "inactive"
    ACTIVE = "active"
    ERROR = "error"
    FINALIZED = "finalized"


class HardwareError(RuntimeError):
    """The backend cannot do what was asked (SDK missing, robot in fault, bad settings)."""


class LinkLost(HardwareError):
    """The robot stopped answering; the driver holds, reports and reconnects."""


class Hardware(abc.ABC):
    """One robot's joints and grippers. Positions in radians / metres, the robot's joint names.

    `settings` are the backend's connection settings (IP, serial number, serial port, baud
    rate ...), from config/robots/<robot>.yaml and driver parameters `<backend>.<key>`.
    """

    backend: str = "abstract"
    link_timeout_s: float = 0.05  # a read that takes longer than this is a lost link
    # A backend that plays one setpoint per robot cycle needs the driver at exactly that rate.
    required_control_rate_hz: float | None = None
    # A simulated backend's clock moves only when the control loop steps it (`advance`); a real
    # robot's is the host's.
    simulated: bool = False

    def __init__(self, robot: RobotSpec, settings: Mapping[str, Any] | None = None):
        self.robot = robot
        self.settings = dict(settings or {})
        self.state = Lifecycle.UNCONFIGURED

    # -- the lifecycle: ros2_control's hooks, called by the driver core ------------------------------
    @abc.abstractmethod
    def on_configure(self) -> None:
        """Open the link to the robot; raise HardwareError or LinkLost with the reason."""

    def on_activate(self) -> None:
        """Start accepting setpoints (servo / streaming mode on, brakes open)."""
        self.state = Lifecycle.ACTIVE

    def on_deactivate(self) -> None:
        """Stop accepting setpoints; the robot holds where it is."""
        self.state = Lifecycle.INACTIVE

    def on_error(self, error: Exception) -> None:
        """The link was lost or the robot faulted (`error`): close the link, whatever it still
        answers, and stay in error until on_configure() connects again."""
        try:
            self.on_cleanup()
        finally:
            self.state = Lifecycle.ERROR

    @abc.abstractmethod
    def on_cleanup(self) -> None:
        """Close the link (finalize), leaving the robot safe. Safe to call in any state, more than once."""

    # -- the control cycle -------------------------------------------------------------------------
    @abc.abstractmethod
    def read(self) -> JointSample:
        """The latest measured state: arm joints in `robot.joint_names` order, then finger joints."""

    @abc.abstractmethod
    def write(self, command: JointCommand, gripper_openings: np.ndarray,
              gripper_forces: np.ndarray | None = None) -> None:
        """Position setpoints for `robot.joint_names` and gripper openings (metres), already safe;
        `gripper_forces` bounds each gripper's grip (N, at most its max_force), NaN or None for
        the backend's configured force."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Sim: reset the scene. Real: move home (the driver streams the motion)."""

    def home(self) -> None:
        self.reset()

    def command_limits(self, limits):
        """The SafetyLimits this backend can follow, within `limits` (the datasheet's by default):
        a backend whose servos cannot keep up with some of them narrows them here."""
        return limits

    @property
    def now(self) -> float:
        """Seconds on the robot's clock; real backends use the host's monotonic clock."""
        return time.monotonic()

    def describe(self) -> dict[str, Any]:
        """Backend facts for diagnostics (firmware, serial number, mode, ...)."""
        return {"backend": self.backend, "state": self.state.value}
