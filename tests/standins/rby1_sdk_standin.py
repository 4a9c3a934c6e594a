"""Stand-in for rby1-sdk 0.10.0 (Rainbow's RB-Y1 SDK): the subset Rby1Hardware calls.

SDK surface (`SDK_NAMES`): create_robot / create_robot_a, Robot_A and its command stream, the
command builders, the state and info value classes, ControlManagerState with its enums, the
Dynamixel bus and `upc` (device names), with the names and signatures of rby1-sdk 0.10.0:
tests/test_backend_rby1.py checks each against the installed real module. Failures look like the
SDK's: gRPC calls on a dead link raise RuntimeError("gRPC call failed. Code: 14(UNAVAILABLE) ..."),
Robot_A.connect() returns False, Dynamixel reads return None.

Model (`world`, not part of the SDK): simulated robots by address, with Model A's 24 joints. A
streamed JointPositionCommand moves its joints toward the target no faster than its velocity
limit, nor faster than reaching the target in its minimum time, provided the control manager is
enabled and the joints have power and servo; a command not renewed within its control hold time
ends, and so does the stream. State callbacks run on a thread at the requested rate.
`world.cut_link(address)` stops the robot where it is, silences the state callbacks of open
sessions and fails their gRPC calls; `restore_link` lets new sessions connect.
`world.inject_fault(address)` puts the control manager in MinorFault (or MajorFault): the stream
ends and the joints hold until reset_fault_control_manager(). Gripper buses (by device path) hold
Dynamixels that answer only while both tool flanges output 12 V; in current mode a motor runs to
the end of its stroke in the direction of its goal current, in current-based position mode it
runs to its goal position; the operating mode only changes while torque is off, as on a
Dynamixel.
"""

from __future__ import annotations

import enum
import inspect
import re
import threading
import time
import types
from dataclasses import dataclass, field

import numpy as np

from tests.standins.call_log import Call  # noqa: F401  (a control name: the records world.calls holds)
from tests.standins.call_log import CallLog as _CallLog

__version__ = "0.10.0"

SDK_NAMES = ("BodyComponentBasedCommandBuilder", "CommandHeaderBuilder", "ComponentBasedCommandBuilder",
             "ControlManagerState", "DynamixelBus", "JointPositionCommandBuilder", "Model_A", "RobotCommandBuilder",
             "RobotCommandFeedback", "RobotInfo", "RobotState_A", "Robot_A", "Robot_A_CommandStreamHandler",
             "create_robot", "create_robot_a", "upc")
CONTROL_NAMES = ("world", "StandinWorld", "SimulatedRby1", "SimulatedGripperBus", "SimulatedMotor", "Call")

JOINT_NAMES = (["right_wheel", "left_wheel"] + [f"torso_{i}" for i in range(6)] + [f"right_arm_{i}" for i in range(7)]
               + [f"left_arm_{i}" for i in range(7)] + ["head_0", "head_1"])
COMPONENT_INDEX = {"mobility": [0, 1], "torso": list(range(2, 8)), "right_arm": list(range(8, 15)),
                   "left_arm": list(range(15, 22)), "head": [22, 23]}
POWER_DEVICES = ("5v", "12v", "24v", "48v")


def _unavailable(address: str) -> RuntimeError:
    return RuntimeError(f"gRPC call failed. Code: 14(UNAVAILABLE), Message: failed to connect to all addresses; "
                        f"last error: UNAVAILABLE: ipv4:{address}: stand-in link is down")


# -- value classes ------------------------------------------------------------------------------------
class Model_A:
    model_name: str
    robot_dof: int
    robot_joint_names: list
    mobility_idx: list
    torso_idx: list
    right_arm_idx: list
    left_arm_idx: list
    head_idx: list

    def __init__(self):
        self.model_name, self.robot_dof, self.robot_joint_names = "A", len(JOINT_NAMES), list(JOINT_NAMES)
        self.mobility_idx, self.torso_idx = COMPONENT_INDEX["mobility"], COMPONENT_INDEX["torso"]
        self.right_arm_idx, self.left_arm_idx = COMPONENT_INDEX["right_arm"], COMPONENT_INDEX["left_arm"]
        self.head_idx = COMPONENT_INDEX["head"]


class RobotState_A:
    position: np.ndarray
    velocity: np.ndarray
    torque: np.ndarray

    def __init__(self):
        self.position, self.velocity, self.torque = (np.zeros(len(JOINT_NAMES)) for _ in range(3))


class RobotInfo:
    version: str
    sdk_version: str
    robot_model_name: str

    def __init__(self):
        self.version, self.sdk_version, self.robot_model_name = "", "", ""


class ControlManagerState:
    class State(enum.IntEnum):
        Unknown = 0
        Idle = 1
        Enabled = 2
        MinorFault = 3
        MajorFault = 4

    class ControlState(enum.IntEnum):
        Unknown = 0
        Idle = 1
        Executing = 2
        Switching = 3

    state: State
    control_state: ControlState

    def __init__(self):
        self.state, self.control_state = self.State.Unknown, self.ControlState.Unknown


class RobotCommandFeedback:
    class Status(enum.IntEnum):
        Idle = 0
        Initializing = 1
        Running = 2
        Finished = 3

    class FinishCode(enum.IntEnum):
        Unknown = 0
        Ok = 1
        Canceled = 2
        Preempted = 3
        InitializationFailed = 4
        ControlManagerIdle = 5
        ControlManagerFault = 6
        UnexpectedState = 7

    status: Status
    finish_code: FinishCode

    def __init__(self):
        self.status, self.finish_code = self.Status.Idle, self.FinishCode.Unknown


# -- command builders (they record what they were given) -------------------------------------------------
class CommandHeaderBuilder:
    def __init__(self):
        self._hold_time = 0.0

    def set_control_hold_time(self, control_hold_time):
        self._hold_time = float(control_hold_time)
        return self


class JointPositionCommandBuilder:
    def __init__(self):
        self._hold_time, self._position, self._minimum_time = 0.0, None, 0.0
        self._velocity_limit = self._acceleration_limit = None

    def set_command_header(self, command_header_builder):
        _expect(command_header_builder, CommandHeaderBuilder, "set_command_header")
        self._hold_time = command_header_builder._hold_time
        return self

    def set_position(self, position):
        self._position = np.asarray(position, float).ravel().copy()
        return self

    def set_minimum_time(self, minimum_time):
        self._minimum_time = float(minimum_time)
        return self

    def set_velocity_limit(self, velocity_limit):
        self._velocity_limit = np.asarray(velocity_limit, float).ravel().copy()
        return self

    def set_acceleration_limit(self, acceleration_limit):
        self._acceleration_limit = np.asarray(acceleration_limit, float).ravel().copy()
        return self


class BodyComponentBasedCommandBuilder:
    def __init__(self):
        self._parts: dict[str, JointPositionCommandBuilder] = {}

    # The real builders take Torso/ArmCommandBuilder, implicitly converted from a joint position builder.
    def set_torso_command(self, torso_command_builder):
        self._parts["torso"] = _expect(torso_command_builder, JointPositionCommandBuilder, "set_torso_command")
        return self

    def set_right_arm_command(self, arm_command_builder):
        self._parts["right_arm"] = _expect(arm_command_builder, JointPositionCommandBuilder, "set_right_arm_command")
        return self

    def set_left_arm_command(self, arm_command_builder):
        self._parts["left_arm"] = _expect(arm_command_builder, JointPositionCommandBuilder, "set_left_arm_command")
        return self


class ComponentBasedCommandBuilder:
    def __init__(self):
        self._parts: dict[str, JointPositionCommandBuilder] = {}

    def set_body_command(self, body_command_builder):
        _expect(body_command_builder, BodyComponentBasedCommandBuilder, "set_body_command")
        self._parts.update(body_command_builder._parts)
        return self

    def set_head_command(self, head_command_builder):
        self._parts["head"] = _expect(head_command_builder, JointPositionCommandBuilder, "set_head_command")
        return self


class RobotCommandBuilder:
    def __init__(self):
        self._parts: dict[str, JointPositionCommandBuilder] = {}

    def set_command(self, component_based_command_builder):
        _expect(component_based_command_builder, ComponentBasedCommandBuilder, "set_command")
        self._parts = dict(component_based_command_builder._parts)
        return self


def _expect(value, cls, method):
    if not isinstance(value, cls):
        raise TypeError(f"{method}(): incompatible function arguments: got {type(value).__name__}, "
                        f"the stand-in models {cls.__name__}")
    return value


# -- the simulated robot --------------------------------------------------------------------------------
@dataclass
class SimulatedMotor:
    low: float
    high: float
    q: float
    mode: int = 3  # a Dynamixel's default: position control
    torque_enabled: bool = False
    goal_current: float = 0.0
    goal_position: float = 0.0
    speed: float = 10.0  # rad/s, free running


@dataclass
class SimulatedGripperBus:
    robot: str  # the address of the robot whose tool flanges power the motors
    motors: dict
    updated: float = field(default_factory=time.monotonic)
    mode_writes_ignored: int = 0

    def advance(self, now: float) -> None:
        dt, self.updated = now - self.updated, now
        for m in self.motors.values():
            if not m.torque_enabled:
                continue
            if m.mode == DynamixelBus.CurrentControlMode and m.goal_current:
                goal = m.high if m.goal_current > 0 else m.low
            elif m.mode == DynamixelBus.CurrentBasedPositionControlMode:
                goal = min(max(m.goal_position, m.low), m.high)
            else:
                continue
            step = m.speed * dt
            m.q += max(-step, min(step, goal - m.q))


class SimulatedRby1:
    def __init__(self, address: str, q):
        self.address = address
        self.q = np.array(q, float)
        self.velocity = np.zeros_like(self.q)
        self.target = self.q.copy()
        self.speed = np.zeros_like(self.q)
        self.hold_until = 0.0
        self.powered: set[str] = set()
        self.servoed: set[str] = set()
        self.control_manager = ControlManagerState.State.Idle
        self.flange_voltage = {"right": 0, "left": 0}
        self.link_up = True
        self.session = 0
        self.stream = None  # the stream whose command runs
        self.updated = time.monotonic()

    def advance(self, now: float) -> None:
        dt = now - self.updated
        if dt <= 0:
            return
        self.updated = now
        if self.stream is not None and now > self.hold_until:
            self.stream._finish(RobotCommandFeedback.FinishCode.Ok)  # not renewed in its hold time
        if self.stream is None:
            self.velocity[:] = 0.0
            return
        step = np.clip(self.target - self.q, -self.speed * dt, self.speed * dt)
        self.q += step
        self.velocity = step / dt

    def executing(self) -> bool:
        return self.stream is not None

    def state(self) -> RobotState_A:
        state = RobotState_A()
        state.position, state.velocity = self.q.copy(), self.velocity.copy()
        state.torque = 3.0 * np.sin(self.q)  # a stand-in gravity load
        return state

    def control_manager_state(self) -> ControlManagerState:
        cm = ControlManagerState()
        cm.state = self.control_manager
        cm.control_state = cm.ControlState.Executing if self.executing() else cm.ControlState.Idle
        return cm

    def hold(self) -> None:
        if self.stream is not None:
            self.stream._finish(RobotCommandFeedback.FinishCode.Canceled)
        self.target = self.q.copy()
        self.velocity[:] = 0.0


class StandinWorld(_CallLog):
    def __init__(self):
        super().__init__()
        self.robots: dict[str, SimulatedRby1] = {}
        self.buses: dict[str, SimulatedGripperBus] = {}
        self.rpc_timeout_s = 0.1  # how long a gRPC call on a dead link waits before it fails

    def reset(self) -> None:
        with self.lock:
            self.robots.clear()
            self.buses.clear()
            self.calls.clear()

    def add_robot(self, address: str, q) -> SimulatedRby1:
        with self.lock:
            robot = self.robots[address] = SimulatedRby1(address, q)
        return robot

    def add_gripper_bus(self, device: str, robot: str, strokes=((0.4, 1.9), (-1.2, 0.3))) -> SimulatedGripperBus:
        motors = {i: SimulatedMotor(low, high, (low + high) / 2) for i, (low, high) in enumerate(strokes)}
        with self.lock:
            bus = self.buses[device] = SimulatedGripperBus(robot, motors)
        return bus

    def cut_link(self, address: str) -> None:
        with self.lock:
            robot = self.robots[address]
            robot.advance(time.monotonic())
            robot.hold()
            robot.link_up = False
            robot.session += 1

    def restore_link(self, address: str) -> None:
        with self.lock:
            self.robots[address].link_up = True

    def inject_fault(self, address: str, major: bool = False) -> None:
        with self.lock:
            robot = self.robots[address]
            robot.advance(time.monotonic())
            if robot.stream is not None:
                robot.stream._finish(RobotCommandFeedback.FinishCode.ControlManagerFault)
            robot.hold()
            State = ControlManagerState.State
            robot.control_manager = State.MajorFault if major else State.MinorFault


world = StandinWorld()


# -- the robot interface ----------------------------------------------------------------------------------
class Robot_A_CommandStreamHandler:
    def _attach(self, robot: "Robot_A") -> "Robot_A_CommandStreamHandler":
        self._robot, self._sim = robot, robot._sim
        self._done, self._finish_code = False, RobotCommandFeedback.FinishCode.Unknown
        return self

    def _finish(self, code) -> None:
        sim = self._sim
        self._done, self._finish_code = True, code
        if sim is not None and sim.stream is self:
            sim.stream = None
            sim.target = sim.q.copy()

    def is_done(self):
        return self._done

    def cancel(self):
        world.log("stream.cancel")
        with world.lock:
            if not self._done:
                self._finish(RobotCommandFeedback.FinishCode.Canceled)

    def send_command(self, builder, timeout_ms=1000):
        _expect(builder, RobotCommandBuilder, "send_command")
        world.log("stream.send_command", {k: v._position.copy() for k, v in builder._parts.items()},
                  {k: (v._minimum_time, v._hold_time, v._velocity_limit, v._acceleration_limit)
                   for k, v in builder._parts.items()})
        robot = self._robot
        if not robot._alive():
            time.sleep(min(timeout_ms / 1000, world.rpc_timeout_s))
            raise _unavailable(robot._address)
        feedback = RobotCommandFeedback()
        with world.lock:
            sim = robot._sim
            now = time.monotonic()
            sim.advance(now)
            if self._done:
                raise RuntimeError("the command stream is done")
            for component, part in builder._parts.items():
                index = COMPONENT_INDEX[component]
                given = 0 if part._position is None else len(part._position)
                if given != len(index):
                    self._finish(RobotCommandFeedback.FinishCode.InitializationFailed)
                    raise RuntimeError(f"stand-in: {component} command has {given} positions, expected {len(index)}")
            if sim.control_manager is not ControlManagerState.State.Enabled:
                self._finish(RobotCommandFeedback.FinishCode.ControlManagerIdle)
            elif any(JOINT_NAMES[i] not in sim.servoed for c in builder._parts for i in COMPONENT_INDEX[c]):
                self._finish(RobotCommandFeedback.FinishCode.InitializationFailed)
            else:
                if sim.stream is not None and sim.stream is not self:
                    sim.stream._finish(RobotCommandFeedback.FinishCode.Preempted)
                sim.stream = self
                hold = 0.0
                for component, part in builder._parts.items():
                    index = COMPONENT_INDEX[component]
                    limit = part._velocity_limit if part._velocity_limit is not None else np.ones(len(index))
                    distance = np.abs(part._position - sim.q[index])
                    sim.target[index] = part._position
                    sim.speed[index] = np.minimum(limit, distance / max(part._minimum_time, 1e-9))
                    hold = max(hold, part._hold_time)
                sim.hold_until = now + hold
            feedback.status = feedback.Status.Finished if self._done else feedback.Status.Running
            feedback.finish_code = self._finish_code
        return feedback


class Robot_A:
    def __init__(self, address):
        self._address = address
        self._sim: SimulatedRby1 | None = None
        self._session = -1
        self._updates: threading.Event | None = None

    @staticmethod
    def model():
        return Model_A()

    def _alive(self) -> bool:
        sim = self._sim
        return sim is not None and sim.link_up and sim.session == self._session

    def _rpc(self, name: str, *args) -> SimulatedRby1:
        world.log(name, *args)
        if not self._alive():
            if self._sim is not None:
                time.sleep(world.rpc_timeout_s)
            raise _unavailable(self._address)
        return self._sim

    def connect(self, max_retries=5, timeout_ms=1000):
        world.log("connect", max_retries, timeout_ms)
        with world.lock:
            sim = world.robots.get(self._address)
            if sim is None or not sim.link_up:
                time.sleep(min(max_retries * timeout_ms / 1000, 0.05))
                return False
            self._sim, self._session = sim, sim.session
            return True

    def is_connected(self):
        return self._alive()

    def disconnect(self):
        world.log("disconnect")
        self.stop_state_update()
        self._sim, self._session = None, -1

    def get_robot_info(self):
        self._rpc("get_robot_info")
        info = RobotInfo()
        info.version, info.sdk_version, info.robot_model_name = "v0.10 (stand-in)", __version__, "A"
        return info

    def get_state(self):
        with world.lock:
            sim = self._rpc("get_state")
            sim.advance(time.monotonic())
            return sim.state()

    def get_control_manager_state(self):
        with world.lock:
            return self._rpc("get_control_manager_state").control_manager_state()

    def start_state_update(self, cb, rate):
        world.log("start_state_update", rate)
        self.stop_state_update()
        takes_two = len(inspect.signature(cb).parameters) == 2
        stop = self._updates = threading.Event()

        def updates():
            while not stop.wait(1.0 / rate):
                with world.lock:
                    if not self._alive():
                        continue  # a dead link: the SDK's stream gets nothing
                    self._sim.advance(time.monotonic())
                    state, cm = self._sim.state(), self._sim.control_manager_state()
                cb(state, cm) if takes_two else cb(state)

        threading.Thread(target=updates, name="rby1-standin-state", daemon=True).start()

    def stop_state_update(self):
        if self._updates is not None:
            self._updates.set()
            self._updates = None

    def is_power_on(self, dev_name):
        devices = [d for d in POWER_DEVICES if re.fullmatch(dev_name, d)]
        return bool(devices) and set(devices) <= self._rpc("is_power_on", dev_name).powered

    def power_on(self, dev_name):
        with world.lock:
            self._rpc("power_on", dev_name).powered |= {d for d in POWER_DEVICES if re.fullmatch(dev_name, d)}
        return True

    def is_servo_on(self, dev_name):
        joints = [j for j in JOINT_NAMES if re.fullmatch(dev_name, j)]
        return bool(joints) and set(joints) <= self._rpc("is_servo_on", dev_name).servoed

    def servo_on(self, dev_name):
        with world.lock:
            sim = self._rpc("servo_on", dev_name)
            if "48v" not in sim.powered:
                return False  # the actuators' supply is off
            sim.servoed |= {j for j in JOINT_NAMES if re.fullmatch(dev_name, j)}
        return True

    def enable_control_manager(self, unlimited_mode_enabled=False):
        with world.lock:
            sim = self._rpc("enable_control_manager", unlimited_mode_enabled)
            if sim.control_manager in (ControlManagerState.State.MinorFault, ControlManagerState.State.MajorFault):
                return False
            sim.control_manager = ControlManagerState.State.Enabled
        return True

    def reset_fault_control_manager(self):
        with world.lock:
            sim = self._rpc("reset_fault_control_manager")
            if sim.control_manager is ControlManagerState.State.MajorFault:
                return False  # the stand-in's major faults need a power cycle
            sim.control_manager = ControlManagerState.State.Idle
        return True

    def create_command_stream(self, priority=1):
        world.log("create_command_stream", priority)
        return Robot_A_CommandStreamHandler.__new__(Robot_A_CommandStreamHandler)._attach(self)

    def set_tool_flange_output_voltage(self, name, voltage):
        with world.lock:
            sim = self._rpc("set_tool_flange_output_voltage", name, voltage)
            if name not in sim.flange_voltage:
                return False
            sim.flange_voltage[name] = int(voltage)
        return True


def create_robot_a(address):
    world.log("create_robot_a", address)
    return Robot_A(address)


def create_robot(address, model_name):
    world.log("create_robot", address, model_name)
    if str(model_name).lower() != "a":
        raise RuntimeError(f"stand-in: models other than 'a' are not modelled (got {model_name!r})")
    return Robot_A(address)


# -- the Dynamixel bus on the UPC ----------------------------------------------------------------------
class DynamixelBus:
    CurrentControlMode = 0
    CurrentBasedPositionControlMode = 5
    DefaultBaudrate = 2000000

    def __init__(self, dev_name):
        self._device, self._open, self._baud = dev_name, False, 57600

    def _motors(self):
        bus = world.buses.get(self._device)
        if bus is None or not self._open:
            return None, {}
        robot = world.robots.get(bus.robot)
        powered = robot is not None and all(v == 12 for v in robot.flange_voltage.values())
        if not powered or self._baud != self.DefaultBaudrate:
            return bus, {}
        bus.advance(time.monotonic())
        return bus, bus.motors

    def open_port(self):
        world.log("bus.open_port", self._device)
        self._open = self._device in world.buses
        return self._open

    def set_baud_rate(self, baudrate):
        world.log("bus.set_baud_rate", baudrate)
        self._baud = int(baudrate)
        return self._open

    def set_torque_constant(self, torque_constant):
        world.log("bus.set_torque_constant", list(torque_constant))

    def ping(self, id):
        with world.lock:
            return id in self._motors()[1]

    def group_sync_write_torque_enable(self, id_and_enable_vector):
        world.log("bus.torque_enable", list(id_and_enable_vector))
        with world.lock:
            motors = self._motors()[1]
            for i, enable in id_and_enable_vector:
                if i in motors:
                    motors[i].torque_enabled = bool(enable)
                    motors[i].goal_position = motors[i].q  # torque on: hold where it is

    def group_sync_write_operating_mode(self, id_and_mode_vector):
        world.log("bus.operating_mode", list(id_and_mode_vector))
        with world.lock:
            bus, motors = self._motors()
            for i, mode in id_and_mode_vector:
                if i in motors:
                    if motors[i].torque_enabled:
                        bus.mode_writes_ignored += 1  # a Dynamixel refuses EEPROM writes with torque on
                    else:
                        motors[i].mode = int(mode)

    def group_sync_write_send_torque(self, id_and_torque_vector):
        world.log("bus.send_torque", list(id_and_torque_vector))
        with world.lock:
            motors = self._motors()[1]
            for i, current in id_and_torque_vector:
                if i in motors:
                    motors[i].goal_current = float(current)

    def group_sync_write_send_position(self, id_and_position_vector):
        world.log("bus.send_position", list(id_and_position_vector))
        with world.lock:
            motors = self._motors()[1]
            for i, q in id_and_position_vector:
                if i in motors:
                    motors[i].goal_position = float(q)

    def group_fast_sync_read_encoder(self, ids):
        with world.lock:
            motors = self._motors()[1]
            if not all(i in motors for i in ids):
                return None
            return [(i, motors[i].q) for i in ids]


def _initialize_device(device_name):
    world.log("upc.initialize_device", device_name)


upc = types.ModuleType("rby1_sdk.upc", "The stand-in of rby1_sdk.upc: the UPC's device names.")
upc.GripperDeviceName = "/dev/rby1_gripper"
upc.initialize_device = _initialize_device
_initialize_device.__name__ = "initialize_device"
