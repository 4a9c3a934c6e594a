"""Stand-in for flexivrdk 1.9.4.1 (Flexiv RDK's Python API): the subset FlexivHardware calls.

SDK surface (`SDK_NAMES`): `Robot`, `Gripper`, the value classes they return and the `Mode` and
`OperationalStatus` enums, with the names, parameters and enum values of flexivrdk 1.9.4.1 as
recorded in flexivrdk_api.json (tests/test_backend_flexiv.py checks that). Errors are raised as
pybind11 translates the RDK's C++ exceptions: std::invalid_argument -> ValueError,
std::logic_error and std::runtime_error -> RuntimeError.

Model (`world`, not part of the SDK): simulated Rizon arms by serial number. An arm becomes
operational `enable_delay_s` after Robot.Enable(); in NRT_JOINT_POSITION mode each joint moves
toward the last SendJointPosition target at no more than that call's max_vel; states() refresh
once per millisecond of wall time (the RDK's 1 kHz). Grippers move their width toward the
Move() target at the requested speed. `world.cut_link(sn)` drops the network: the arm stops
where it is, states() of open sessions freeze (same timestamp), connected() turns false after
`connected_grace_s`, blocking requests raise after `request_timeout_s`, streamed commands are
lost; `restore_link` lets new sessions (a new Robot) connect. `inject_fault` puts the arm in a
minor or critical fault: it stops, disables, and ignores commands until ClearFault().
"""

from __future__ import annotations

import enum
import math
import re
import time
from dataclasses import dataclass, field

from tests.standins.call_log import Call  # noqa: F401  (a control name: the records world.calls holds)
from tests.standins.call_log import CallLog as _CallLog

__version__ = "1.9.4.1"

SDK_NAMES = ("Gripper", "GripperParams", "GripperStates", "Mode", "OperationalStatus", "Robot", "RobotEvent",
             "RobotInfo", "RobotStates")
CONTROL_NAMES = ("world", "StandinWorld", "SimulatedArm", "SimulatedGripper", "Call")
DOF = 7
_SERIAL = re.compile(r"[A-Za-z][A-Za-z0-9 ]*-[A-Za-z0-9]+")


class Mode(enum.IntEnum):
    UNKNOWN = 0
    IDLE = 1
    NRT_JOINT_IMPEDANCE = 4
    NRT_JOINT_POSITION = 6
    NRT_PLAN_EXECUTION = 7
    NRT_PRIMITIVE_EXECUTION = 8
    NRT_CARTESIAN_MOTION_FORCE = 10
    NRT_SUPER_PRIMITIVE = 11


class OperationalStatus(enum.IntEnum):
    UNKNOWN = 0
    READY = 1
    BOOTING = 2
    ESTOP_NOT_RELEASED = 3
    NOT_ENABLED = 4
    RELEASING_BRAKE = 5
    MINOR_FAULT = 6
    CRITICAL_FAULT = 7
    IN_REDUCED_STATE = 8
    IN_RECOVERY_STATE = 9
    IN_MANUAL_MODE = 10
    IN_AUTO_MODE = 11


class RobotStates:
    q: list
    dq: list
    tau: list
    timestamp: tuple

    def __init__(self):
        self.q, self.dq, self.tau, self.timestamp = [], [], [], (0, 0)


class RobotInfo:
    DoF: int
    model_name: str
    serial_num: str
    software_ver: str

    def __init__(self):
        self.DoF, self.model_name, self.serial_num, self.software_ver = 0, "", "", ""


class RobotEvent:
    description: str

    def __init__(self):
        self.description = ""


class GripperParams:
    name: str
    min_width: float
    max_width: float
    min_vel: float
    max_vel: float
    min_force: float
    max_force: float

    def __init__(self):
        self.name = ""
        self.min_width = self.max_width = self.min_vel = self.max_vel = self.min_force = self.max_force = 0.0


class GripperStates:
    width: float
    force: float
    is_moving: bool

    def __init__(self):
        self.width, self.force, self.is_moving = 0.0, 0.0, False


# -- the simulated hardware -------------------------------------------------------------------------
@dataclass
class SimulatedGripper:
    name: str
    # A Robotiq 2F-85's ranges: 0-85 mm, 20-150 mm/s, 20-235 N.
    min_width: float = 0.0
    max_width: float = 0.085
    min_vel: float = 0.02
    max_vel: float = 0.15
    min_force: float = 20.0
    max_force: float = 235.0
    width: float = 0.085
    target: float = 0.085
    speed: float = 0.0
    updated: float = field(default_factory=time.monotonic)

    def advance(self, now: float) -> None:
        step = self.speed * max(0.0, now - self.updated)
        self.width += max(-step, min(step, self.target - self.width))
        self.updated = now


@dataclass
class SimulatedArm:
    serial: str
    q: list
    model_name: str = "Rizon4"
    dof: int = DOF
    software_ver: str = "v3.11 (stand-in)"
    grippers: dict = field(default_factory=dict)
    mode: Mode = Mode.IDLE
    enabled: bool = False
    enable_at: float = 0.0
    estop_released: bool = True
    auto_mode: bool = True
    fault: str = ""  # "", "minor" or "critical"
    events: list = field(default_factory=list)
    link_up: bool = True
    cut_at: float = 0.0
    session: int = 0
    target: list = field(default_factory=list)
    max_vel: list = field(default_factory=list)
    dq: list = field(default_factory=list)
    updated: float = field(default_factory=time.monotonic)

    def __post_init__(self):
        self.target = list(self.q)
        self.max_vel = [0.0] * len(self.q)
        self.dq = [0.0] * len(self.q)

    def advance(self, now: float) -> None:
        dt = now - self.updated
        if dt <= 0:
            return
        moving = self.mode is Mode.NRT_JOINT_POSITION and self.operational(now)
        for i in range(len(self.q)):
            step = self.max_vel[i] * dt if moving else 0.0
            delta = max(-step, min(step, self.target[i] - self.q[i]))
            self.q[i] += delta
            self.dq[i] = delta / dt
        self.updated = now
        for gripper in self.grippers.values():
            gripper.advance(now)

    def hold(self) -> None:
        self.target = list(self.q)
        self.dq = [0.0] * len(self.q)

    def operational(self, now: float) -> bool:
        return self.status(now) is OperationalStatus.READY

    def status(self, now: float) -> OperationalStatus:
        if self.fault:
            return OperationalStatus.CRITICAL_FAULT if self.fault == "critical" else OperationalStatus.MINOR_FAULT
        if not self.estop_released:
            return OperationalStatus.ESTOP_NOT_RELEASED
        if not self.auto_mode:
            return OperationalStatus.IN_MANUAL_MODE
        if not self.enabled:
            return OperationalStatus.NOT_ENABLED
        if now < self.enable_at:
            return OperationalStatus.RELEASING_BRAKE
        return OperationalStatus.READY


class StandinWorld(_CallLog):
    """What the tests control: the arms on the network, their links and faults, the call log."""

    def __init__(self):
        super().__init__()
        self.arms: dict[str, SimulatedArm] = {}
        self.enable_delay_s = 0.05
        self.connected_grace_s = 0.5  # how long connected() still says True after the link drops
        self.request_timeout_s = 0.1  # how long a blocking request waits before it fails
        self.gripper_delivery_s = 0.02  # Gripper.Move blocks this long

    def reset(self) -> None:
        with self.lock:
            self.arms.clear()
            self.calls.clear()

    def add_arm(self, serial: str, q, grippers=("Robotiq-2F-85",), **kwargs) -> SimulatedArm:
        arm = SimulatedArm(serial, [float(v) for v in q],
                           grippers={name: SimulatedGripper(name) for name in grippers}, **kwargs)
        with self.lock:
            self.arms[_key(serial)] = arm
        return arm

    def arm(self, serial: str) -> SimulatedArm:
        return self.arms[_key(serial)]

    def cut_link(self, serial: str) -> None:
        with self.lock:
            arm = self.arm(serial)
            arm.advance(time.monotonic())
            arm.hold()  # the robot stops when it loses its commander
            arm.link_up, arm.cut_at = False, time.monotonic()
            arm.session += 1  # open sessions stay dead even after the link comes back

    def restore_link(self, serial: str) -> None:
        with self.lock:
            self.arm(serial).link_up = True

    def inject_fault(self, serial: str, critical: bool = False, description: str = "joint torque limit exceeded"):
        with self.lock:
            arm = self.arm(serial)
            arm.advance(time.monotonic())
            arm.hold()
            arm.fault = "critical" if critical else "minor"
            arm.enabled = False
            arm.mode = Mode.IDLE
            event = RobotEvent()
            event.description = description
            arm.events.append(event)


world = StandinWorld()


def _key(serial: str) -> str:
    return serial.replace(" ", "")


# -- the SDK surface ----------------------------------------------------------------------------------
class Robot:
    def __init__(self, robot_sn, network_interface_whitelist=[], verbose=True, lite=False):  # noqa: B006 (the SDK's)
        world.log("Robot", robot_sn, tuple(network_interface_whitelist), verbose, lite)
        if not _SERIAL.fullmatch(robot_sn):
            raise ValueError(f"[flexiv::rdk::Robot] invalid format of robot serial number: {robot_sn}")
        with world.lock:
            arm = world.arms.get(_key(robot_sn))
            if arm is None or not arm.link_up:
                raise RuntimeError(f"[flexiv::rdk::Robot] failed to establish connection with robot [{robot_sn}]")
            self._arm, self._session = arm, arm.session
        self._last = self._snapshot()

    def _alive(self) -> bool:
        return self._arm.link_up and self._session == self._arm.session

    def _request(self, name: str, *args) -> None:
        """A [Blocking] call: delivered, or an error once the request times out."""
        world.log(name, *args)
        if not self._alive():
            time.sleep(world.request_timeout_s)
            raise RuntimeError(f"[flexiv::rdk::Robot] {name}: failed to deliver the request to the connected robot")

    def _snapshot(self) -> RobotStates:
        arm = self._arm
        now = time.monotonic()
        arm.advance(now)
        states = RobotStates()
        states.q, states.dq = list(arm.q), list(arm.dq)
        states.tau = [2.0 * math.sin(v) for v in arm.q]  # a stand-in gravity load
        ms = int(time.time() * 1000)  # refreshed once per millisecond, as at 1 kHz
        states.timestamp = (ms // 1000, (ms % 1000) * 1_000_000)
        return states

    # [Non-blocking] queries
    def connected(self) -> bool:
        return self._alive() or time.monotonic() - self._arm.cut_at < world.connected_grace_s

    def states(self) -> RobotStates:
        with world.lock:
            if self._alive():
                self._last = self._snapshot()
            states = RobotStates()
            states.q, states.dq, states.tau, states.timestamp = (
                list(self._last.q), list(self._last.dq), list(self._last.tau), self._last.timestamp)
            return states

    def info(self) -> RobotInfo:
        info = RobotInfo()
        info.DoF, info.model_name = self._arm.dof, self._arm.model_name
        info.serial_num, info.software_ver = self._arm.serial, self._arm.software_ver
        return info

    def fault(self) -> bool:
        return bool(self._arm.fault)

    def estop_released(self) -> bool:
        return self._arm.estop_released

    def operational(self) -> bool:
        return self._arm.operational(time.monotonic())

    def operational_status(self) -> OperationalStatus:
        return self._arm.status(time.monotonic())

    def mode(self) -> Mode:
        return self._arm.mode

    def event_log(self) -> list:
        return list(self._arm.events)

    # [Blocking] requests
    def Enable(self) -> None:
        self._request("Enable")
        with world.lock:
            arm = self._arm
            if not arm.estop_released:
                raise RuntimeError("[flexiv::rdk::Robot] Enable: E-stop is not released")
            if not arm.fault:
                arm.enabled, arm.enable_at = True, time.monotonic() + world.enable_delay_s

    def SwitchMode(self, mode) -> None:
        self._request("SwitchMode", mode)
        with world.lock:
            arm = self._arm
            if not arm.operational(time.monotonic()):
                raise RuntimeError("[flexiv::rdk::Robot] SwitchMode: robot is not operational")
            if mode not in (Mode.IDLE, Mode.NRT_JOINT_POSITION):
                raise ValueError(f"[flexiv::rdk::Robot] SwitchMode: mode {mode!r} is not modelled by the stand-in")
            arm.advance(time.monotonic())
            arm.hold()
            arm.mode = Mode(mode)

    def Stop(self) -> None:
        self._request("Stop")
        with world.lock:
            self._arm.advance(time.monotonic())
            self._arm.hold()
            self._arm.mode = Mode.IDLE

    def ClearFault(self, timeout_sec=30) -> bool:
        self._request("ClearFault", timeout_sec)
        with world.lock:
            if self._arm.fault == "critical":
                return False
            self._arm.fault = ""
            return True

    def SendJointPosition(self, positions, velocities, max_vel, max_acc) -> None:
        world.log("SendJointPosition", list(positions), list(velocities), list(max_vel), list(max_acc))
        with world.lock:
            arm = self._arm
            for name, values in (("positions", positions), ("velocities", velocities), ("max_vel", max_vel),
                                 ("max_acc", max_acc)):
                if len(values) != arm.dof:
                    raise ValueError(f"[flexiv::rdk::Robot] SendJointPosition: size of {name} does not match robot DoF")
            if min(max_vel) <= 0 or min(max_acc) <= 0:
                raise ValueError("[flexiv::rdk::Robot] SendJointPosition: max_vel and max_acc must be positive")
            if arm.mode is not Mode.NRT_JOINT_POSITION:
                raise RuntimeError("[flexiv::rdk::Robot] SendJointPosition: robot is not in an applicable control mode")
            if not arm.operational(time.monotonic()):
                raise RuntimeError("[flexiv::rdk::Robot] SendJointPosition: robot is not operational")
            if not self._alive():
                return  # non-blocking: the packet is lost on the dead link
            arm.advance(time.monotonic())
            arm.target, arm.max_vel = [float(p) for p in positions], [float(v) for v in max_vel]


class Gripper:
    def __init__(self, robot):
        self._robot = robot
        self._device: SimulatedGripper | None = None

    def Enable(self, name) -> None:
        self._robot._request("Gripper.Enable", name)
        if name not in self._robot._arm.grippers:
            raise ValueError(f"[flexiv::rdk::Gripper] Enable: device [{name}] does not exist")
        if self._device is not None:
            raise RuntimeError("[flexiv::rdk::Gripper] Enable: a gripper is already enabled")
        self._device = self._robot._arm.grippers[name]

    def _enabled(self) -> SimulatedGripper:
        if self._device is None:
            raise RuntimeError("[flexiv::rdk::Gripper] no gripper is enabled")
        return self._device

    def Move(self, width, velocity, force_limit) -> None:
        self._robot._request("Gripper.Move", width, velocity, force_limit)
        device = self._enabled()
        for name, value, lo, hi in (("width", width, device.min_width, device.max_width),
                                    ("velocity", velocity, device.min_vel, device.max_vel),
                                    ("force_limit", force_limit, device.min_force, device.max_force)):
            if not lo <= value <= hi:
                raise ValueError(f"[flexiv::rdk::Gripper] Move: {name} {value} is outside [{lo}, {hi}]")
        time.sleep(world.gripper_delivery_s)
        with world.lock:
            device.advance(time.monotonic())
            device.target, device.speed = float(width), float(velocity)

    def params(self) -> GripperParams:
        device, params = self._enabled(), GripperParams()
        params.name = device.name
        params.min_width, params.max_width = device.min_width, device.max_width
        params.min_vel, params.max_vel = device.min_vel, device.max_vel
        params.min_force, params.max_force = device.min_force, device.max_force
        return params

    def states(self) -> GripperStates:
        device, states = self._enabled(), GripperStates()
        with world.lock:
            if self._robot._alive():
                device.advance(time.monotonic())
            states.width = device.width
            states.is_moving = abs(device.target - device.width) > 1e-6
        return states
