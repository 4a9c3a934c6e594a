"""The Hardware interface every backend implements, sim and real alike.

The lifecycle follows ros2_control's hardware components: unconfigured -> (configure)
inactive -> (activate) active -> (deactivate) inactive; any failure -> error.
Here `connect()` configures, `activate()`/`deactivate()` gate command output.
"""

from __future__ import annotations

import abc
import enum
import time

from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.robots import RobotSpec


class Lifecycle(enum.Enum):
    UNCONFIGURED = "unconfigured"
    INACTIVE = "inactive"
    ACTIVE = "active"
    ERROR = "error"
    FINALIZED = "finalized"


class HardwareError(RuntimeError):
    """The backend cannot do what was asked (link lost, SDK missing, robot in fault)."""


class Hardware(abc.ABC):
    """One robot's joints and grippers. Positions in radians / metres, the robot's joint names."""

    backend: str = "abstract"

    def __init__(self, robot: RobotSpec):
        self.robot = robot
        self.state = Lifecycle.UNCONFIGURED

    @abc.abstractmethod
    def connect(self) -> None:
        """Open the link to the robot (configure)."""

    @abc.abstractmethod
    def read(self) -> JointSample:
        """The latest measured state of every joint the robot reports (arm joints, then fingers)."""

    @abc.abstractmethod
    def write(self, command: JointCommand, gripper_openings) -> None:
        """Send position setpoints for `robot.joint_names` and gripper openings (metres)."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Sim: reset the scene. Real: move home."""

    def home(self) -> None:
        self.reset()

    @abc.abstractmethod
    def disconnect(self) -> None:
        """Close the link (finalize)."""

    def activate(self) -> None:
        self.state = Lifecycle.ACTIVE

    def deactivate(self) -> None:
        self.state = Lifecycle.INACTIVE

    @property
    def now(self) -> float:
        """Seconds on the robot's clock; real backends use the host's monotonic clock."""
        return time.monotonic()
