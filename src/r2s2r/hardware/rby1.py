"""Rainbow Robotics RB-Y1 (model A) through Rainbow's `rby1-sdk` (0.10.0), base held fixed.

Joints: the SDK's model lists 24 joints (two wheels, torso 6, right arm 7, left arm 7, head 2);
the robot spec has the 22 that are not wheels, and both are mapped by name. Power goes on for
`power` and servo for `servo` (regexes of device and joint names); the servo pattern may not
name a wheel, and no mobility command is ever sent, so the base stays where it is.

Commands: on_activate() enables the control manager and opens a command stream; every
`1 / command_rate_hz` the newest setpoint goes out as one RobotCommand holding a
JointPositionCommand for each component (torso, right arm, left arm, head), each with a minimum
time just over the send period, so the robot's own planner tracks the stream. Each command holds
for HOLD_TIME_S: should the driver stall, the robot stops commanding itself after that. The
stream's send_command waits for the robot's reply, so it runs on a worker thread.

State: the SDK's state-update callback (`state_rate_hz`) brings positions, velocities, torques
and the control manager's state; it is stamped on arrival (host monotonic clock) and read() hands
out the newest. No callback for `link_timeout_s` means the link is lost (time the host did not
run us is not counted: hardware._link). A control-manager fault, or a command stream that ended,
puts the backend in ERROR: nothing is streamed, describe() says why, reset() clears it.

Grippers: Rainbow's two Dynamixels (ID 0 right, ID 1 left) hang on a USB bus of the robot's own
PC (the UPC, device `gripper_device`), powered by the tool flanges' 12 V output; they are only
reachable when the driver runs on the UPC (set `gripper_device: ""` elsewhere: the finger joints
then read NaN and gripper commands are ignored). The first on_activate() homes them as Rainbow's
examples do (drive each way in current mode until the encoders stall, the two stalls bound the
stroke), then they run in current-based position mode; a worker thread writes goal positions
when the opening changes and polls the encoders.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from typing import Any, Mapping

import numpy as np

from r2s2r.config import ConfigError, Section
from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.hardware._link import SilenceClock
from r2s2r.hardware._worker import LatestWorker
from r2s2r.hardware.base import Hardware, HardwareError, Lifecycle, LinkLost, grip_share
from r2s2r.robots import RobotSpec

SDK_PACKAGE = "rby1-sdk"
SDK_VERSION = "0.10.0"
SETTINGS_SOURCE = "driver parameters"
WHEELS = ("right_wheel", "left_wheel")  # Model A's mobility joints
COMPONENTS = ("torso", "right_arm", "left_arm", "head")  # the SDK's command components = our groups
HOLD_TIME_S = 1.0  # how long the robot keeps executing a streamed command without a newer one
PARKED_HOLD_TIME_S = 1e6  # on_deactivate(): hold the last setpoint until the next activation
SEND_TIMEOUT_MS = 500
# Rainbow streams with acceleration limits far above the model's so that the robot's planner
# follows the stream; our setpoints already respect the spec's acceleration limits.
STREAM_ACCELERATION_SCALE = 30.0

GRIPPER_IDS = {"right_gripper": 0, "left_gripper": 1}  # Dynamixel IDs, as in Rainbow's examples
FLANGE_VOLTAGE_V = 12  # the tool flanges' output that powers the gripper motors
# Goal currents in the SDK's torque units (torque constant 1), the values of Rainbow's examples.
HOMING_TORQUE = 0.5  # while homing in current mode
HOLD_TORQUE = 5.0  # in current-based position mode: bounds the grip force
HOMING_POLL_S = 0.05
HOMING_TIMEOUT_S = 30.0
GRIPPER_POLL_S = 0.02
GRIPPER_DEADBAND_M = 1e-4


class Rby1Hardware(Hardware):
    backend = "rby1"

    def __init__(self, robot: RobotSpec, settings: Mapping[str, Any] | None = None):
        super().__init__(robot, settings)
        try:
            device, reversed_, stall_s = self._read_settings(Section(self.settings, SETTINGS_SOURCE, self.backend))
        except ConfigError as error:
            raise HardwareError(str(error)) from None
        missing = [g for g in COMPONENTS if g not in robot.group_names]
        if missing or set(g.name for g in robot.grippers) != set(GRIPPER_IDS):
            raise HardwareError(f"backend rby1 drives groups {', '.join(COMPONENTS)} and grippers "
                                f"{', '.join(GRIPPER_IDS)}; robot {robot.name} has groups "
                                f"{', '.join(robot.group_names)}")
        self._grippers = _Grippers(robot, device, reversed_, stall_s) if device else None
        self._names = robot.joint_names + robot.gripper_joint_names
        self._sdk: Any = None
        self._robot: Any = None
        self._stream: Any = None
        self._sender: LatestWorker | None = None
        self._index = np.zeros(0, int)  # SDK joint index of each of robot.joint_names
        self._components: dict[str, np.ndarray] = {}  # component -> our joint indices, in the SDK's order
        self._velocity_limit = self._acceleration_limit = np.zeros(0)
        self._lock = threading.Lock()  # the SDK's state thread writes what the loop reads
        self._state: tuple | None = None  # (position, velocity, torque, host time)
        self._control_manager: Any = None
        self._silence = SilenceClock(self.link_timeout_s, 0.0)
        self._facts: dict[str, Any] = {}
        self._sent_at = -math.inf
        self._setpoint: np.ndarray | None = None
        self._resume_after_reset = False
        self._lost = False
        self._last_error = ""

    def _read_settings(self, s: Section) -> tuple[str, bool, float]:
        """The connection settings; returns the gripper's (device, reversed, homing stall time)."""
        s.reject_unknown({"address", "model", "power", "servo", "command_rate_hz", "state_rate_hz",
                          "connect_timeout_s", "gripper_device", "gripper_reversed", "gripper_homing_stall_s"})
        self.address = s.string("address", "192.168.30.1:50051")
        host, _, port = self.address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise s.error("address", "the robot's gRPC address as host:port, e.g. 192.168.30.1:50051", self.address)
        self.model = s.string("model", "a", choices=("a",))  # Model M and UB have other joint sets
        self.power = self._pattern(s, "power", ".*")
        self.servo = self._pattern(s, "servo", "torso_.*|right_arm_.*|left_arm_.*|head_.*")
        if any(re.fullmatch(self.servo, wheel) for wheel in WHEELS):
            raise s.error("servo", f"a pattern that names no wheel ({', '.join(WHEELS)}): this driver keeps "
                          "the mobile base fixed", self.servo)
        self.command_rate_hz = s.number("command_rate_hz", 100.0, minimum=1.0, maximum=500.0)
        # At least 2.5 state updates per link timeout, or a healthy link would look lost.
        self.state_rate_hz = s.number("state_rate_hz", 100.0, minimum=2.5 / self.link_timeout_s, maximum=1000.0)
        self.connect_timeout_s = s.number("connect_timeout_s", 5.0, positive=True)
        device = s.raw("gripper_device", "/dev/rby1_gripper")
        if not isinstance(device, str):
            raise s.error("gripper_device", "the gripper bus's device path on the UPC, or '' for none", device)
        reversed_ = s.boolean("gripper_reversed", False)
        stall_s = s.number("gripper_homing_stall_s", 3.0, positive=True)
        return device, reversed_, stall_s

    @staticmethod
    def _pattern(s: Section, key: str, default: str) -> str:
        pattern = s.string(key, default)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise s.error(key, f"a regular expression ({exc})", pattern) from None
        return pattern

    # -- the lifecycle ---------------------------------------------------------------------------
    def on_configure(self) -> None:
        self._release()
        if self._grippers is not None and not os.path.exists(self._grippers.device):
            raise HardwareError(f"rby1: no gripper bus at {self._grippers.device}: the grippers' Dynamixels are on "
                                "the UPC's USB; run the driver on the UPC, or set rby1.gripper_device to '' for none")
        sdk = _import_sdk()
        robot = sdk.create_robot(self.address, self.model)
        tries = 5
        if not robot.connect(tries, max(1, int(self.connect_timeout_s * 1000 / tries))):
            raise LinkLost(f"rby1: no answer from {self.address} within {self.connect_timeout_s:g} s; check that "
                           "the robot is on and this PC reaches it (rby1.address)")
        try:
            model = robot.model()
            self._map_joints(model)
            try:
                state = robot.get_state()
                info = robot.get_robot_info()
                self._control_manager = robot.get_control_manager_state()
            except RuntimeError as exc:
                raise LinkLost(f"rby1: {self.address} connected but does not answer: {exc}") from None
        except HardwareError:
            robot.disconnect()
            raise
        self._sdk, self._robot = sdk, robot
        self._silence.reset(time.monotonic())
        self._on_state(state, self._control_manager)
        robot.start_state_update(self._on_state, self.state_rate_hz)
        self._facts = {"address": self.address, "model": str(model.model_name), "robot_software": str(info.version),
                       "sdk_version": str(getattr(sdk, "__version__", "unknown"))}
        self._sent_at, self._setpoint = -math.inf, None
        self._resume_after_reset = self._lost = False
        self._last_error = ""
        self.state = Lifecycle.INACTIVE

    def _map_joints(self, model) -> None:
        """Our joints by name in the SDK model's joint vector and command components."""
        names = list(model.robot_joint_names)
        unknown = [j for j in self.robot.joint_names if j not in names]
        if unknown:
            raise HardwareError(f"rby1: the SDK's model {model.model_name} has no joints {unknown}")
        wheels = [names[i] for i in model.mobility_idx]
        if any(re.fullmatch(self.servo, w) for w in wheels):
            raise HardwareError(f"rby1: rby1.servo {self.servo!r} names a wheel ({', '.join(wheels)}); this driver "
                                "keeps the mobile base fixed")
        ours = list(self.robot.joint_names)
        self._index = np.array([names.index(j) for j in ours])
        self._components = {c: np.array([ours.index(names[i]) for i in getattr(model, f"{c}_idx")])
                            for c in COMPONENTS}
        limits = self.robot.limits
        self._velocity_limit = limits.velocity
        self._acceleration_limit = limits.acceleration * STREAM_ACCELERATION_SCALE

    def _on_state(self, state, control_manager) -> None:
        """The SDK's state thread (and on_configure()): keep the newest state, stamped on arrival."""
        sample = (np.asarray(state.position, float)[self._index], np.asarray(state.velocity, float)[self._index],
                  np.asarray(state.torque, float)[self._index], time.monotonic())
        with self._lock:
            self._state, self._control_manager = sample, control_manager

    def on_activate(self) -> None:
        robot = self._session()
        try:
            self._control_manager = robot.get_control_manager_state()
            if self._faulted():
                raise HardwareError(f"rby1: the control manager is in {self._control_manager.state.name}; "
                                    "clear it with ~/reset before enabling")
            if not robot.is_power_on(self.power) and not robot.power_on(self.power):
                raise HardwareError(f"rby1: power_on({self.power!r}) failed; check the E-stop and the battery")
            if not robot.is_servo_on(self.servo) and not robot.servo_on(self.servo):
                raise HardwareError(f"rby1: servo_on({self.servo!r}) failed")
            if not robot.enable_control_manager():
                raise HardwareError("rby1: enable_control_manager() failed; see the robot's fault log")
            if self._grippers is not None:
                self._grippers.start(self._sdk, robot)
            self._stream = robot.create_command_stream(1)
        except RuntimeError as exc:
            raise self._request_failed("enabling", exc) from None
        self._sender = LatestWorker("rby1-stream", self._send)
        self._sent_at = -math.inf
        self.state = Lifecycle.ACTIVE

    def _send(self, command) -> None:
        self._stream.send_command(command, SEND_TIMEOUT_MS)

    def on_deactivate(self) -> None:
        if self.state is not Lifecycle.ACTIVE:
            return
        self._session()
        # Park on the last setpoint (or where the robot is) and send nothing more.
        self._sender.submit(self._command(self._setpoint if self._setpoint is not None else self._measured(),
                                          PARKED_HOLD_TIME_S))
        self._sender.flush(SEND_TIMEOUT_MS / 1000 + 0.1)
        self._sender.close()
        error = self._sender.take_error()
        self._sender = None
        self.state = Lifecycle.INACTIVE
        if error is not None:
            raise self._request_failed("parking", error)

    def on_cleanup(self) -> None:
        self._release()
        self.state = Lifecycle.FINALIZED

    def _release(self) -> None:
        if self._sender is not None:
            self._sender.close()
        if self._grippers is not None:
            self._grippers.stop()
        robot, stream = self._robot, self._stream
        self._robot = self._stream = self._sender = None
        for call in (stream.cancel if stream is not None else None,
                     robot.stop_state_update if robot is not None else None,
                     robot.disconnect if robot is not None else None):
            if call is not None:
                try:
                    call()
                except RuntimeError:
                    pass  # letting go of a robot whose link is gone

    def reset(self) -> None:
        """Clear a control-manager fault (reset_fault_control_manager); if the robot was streaming
        when it struck, enable streaming again. Nothing moves: the driver streams the way home."""
        robot = self._session()
        resume = self._resume_after_reset or self.state is Lifecycle.ACTIVE
        try:
            # Asked, not the state callback's copy: the stream's end can be seen before the fault.
            self._control_manager = robot.get_control_manager_state()
            if self._faulted():
                if not robot.reset_fault_control_manager():
                    raise HardwareError("rby1: reset_fault_control_manager() failed; see the robot's fault log")
                self._control_manager = robot.get_control_manager_state()
        except RuntimeError as exc:
            raise self._request_failed("clearing the fault", exc) from None
        if self._sender is not None:
            self._sender.close()
        self._sender, self._stream = None, None
        self._resume_after_reset, self._last_error = False, ""
        self.state = Lifecycle.INACTIVE
        if resume:
            self.on_activate()

    # -- the control cycle -------------------------------------------------------------------------
    def read(self) -> JointSample:
        position, velocity, torque = self._fresh_state()
        fingers = len(self.robot.gripper_joint_names)
        if self._grippers is not None:
            finger_positions = self._grippers.finger_positions()
        else:
            finger_positions = np.full(fingers, np.nan)
        unknown = np.full(fingers, np.nan)
        return JointSample(self.now, self._names, np.concatenate([position, finger_positions]),
                           np.concatenate([velocity, unknown]), np.concatenate([torque, unknown]))

    def write(self, command: JointCommand, gripper_openings: np.ndarray,
              gripper_forces: np.ndarray | None = None) -> None:
        self._fresh_state()
        if self.state is not Lifecycle.ACTIVE:
            return  # not streaming (inactive, or in fault until ~/reset): the robot holds
        error = self._sender.take_error()
        if error is not None or self._stream.is_done():
            self._stop_streaming(f"command stream: {error}" if error is not None else
                                 "the command stream ended (preempted by another command, or stopped by the robot)")
            return
        now = self.now
        if now - self._sent_at >= 1.0 / self.command_rate_hz - 1e-6:
            self._setpoint = np.array(command.position, float)
            self._sender.submit(self._command(self._setpoint, HOLD_TIME_S))
            self._sent_at = now
        if self._grippers is not None:
            self._grippers.command(gripper_openings, gripper_forces)

    def _command(self, position: np.ndarray, hold_time_s: float):
        sdk = self._sdk

        def joints(component: str):
            index = self._components[component]
            return (sdk.JointPositionCommandBuilder()
                    .set_command_header(sdk.CommandHeaderBuilder().set_control_hold_time(hold_time_s))
                    .set_position(position[index])
                    .set_minimum_time(1.01 / self.command_rate_hz)
                    .set_velocity_limit(self._velocity_limit[index])
                    .set_acceleration_limit(self._acceleration_limit[index]))

        body = (sdk.BodyComponentBasedCommandBuilder().set_torso_command(joints("torso"))
                .set_right_arm_command(joints("right_arm")).set_left_arm_command(joints("left_arm")))
        return sdk.RobotCommandBuilder().set_command(
            sdk.ComponentBasedCommandBuilder().set_body_command(body).set_head_command(joints("head")))

    # -- link and faults ---------------------------------------------------------------------------
    def _session(self):
        if self._robot is None or self._lost:
            raise LinkLost(f"rby1: not connected to {self.address}; connect again (on_configure)")
        return self._robot

    def _fresh_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The newest state; LinkLost when it is older than link_timeout_s. Notes faults."""
        self._session()
        with self._lock:
            position, velocity, torque, at = self._state
            faulted = self._faulted()
        self._silence.heard(at)
        silent = self._silence.silence(time.monotonic())
        if silent > self.link_timeout_s:
            self._lost, self.state = True, Lifecycle.ERROR
            raise LinkLost(f"rby1: {self.address} stopped answering: no state for {silent * 1000:.0f} ms "
                           f"(link timeout {self.link_timeout_s * 1000:.0f} ms)")
        if faulted:
            reason = f"control manager {self._control_manager.state.name}"
            if self.state is not Lifecycle.ERROR:
                self._stop_streaming(reason)
            else:
                self._last_error = reason  # the cause, where the stream's end came first
        return position, velocity, torque

    def _faulted(self) -> bool:
        state = self._control_manager.state
        return state.name in ("MinorFault", "MajorFault")

    def _stop_streaming(self, reason: str) -> None:
        self._last_error = reason
        self._resume_after_reset = self.state is Lifecycle.ACTIVE
        self.state = Lifecycle.ERROR

    def _measured(self) -> np.ndarray:
        with self._lock:
            return self._state[0].copy()

    def _request_failed(self, doing: str, exc: BaseException) -> HardwareError:
        if self._robot is None or not self._robot.is_connected():
            self._lost, self.state = True, Lifecycle.ERROR
            return LinkLost(f"rby1: link to {self.address} lost while {doing}: {exc}")
        return HardwareError(f"rby1: {doing} failed: {exc}")

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        facts.update(self._facts)
        facts.update(address=self.address, command_rate_hz=self.command_rate_hz, servo=self.servo,
                     mode="joint position stream" if self.state is Lifecycle.ACTIVE else "idle")
        if self._control_manager is not None:
            with self._lock:
                control_manager = self._control_manager
            facts.update(control_manager=control_manager.state.name,
                         control_state=control_manager.control_state.name, fault=self._faulted())
        if self._last_error:
            facts["last_error"] = self._last_error
        if self._grippers is not None:
            facts.update(self._grippers.describe())
        return facts


class _Grippers:
    """Both grippers' Dynamixels on the UPC's gripper bus: homing, goal positions, encoder polling."""

    def __init__(self, robot: RobotSpec, device: str, reversed_: bool, stall_s: float):
        self.device = device
        self.reversed = reversed_
        self.stall_s = stall_s
        self.specs = robot.grippers
        self.ids = [GRIPPER_IDS[g.name] for g in robot.grippers]
        self.fingers = [len(g.joints) for g in robot.grippers]
        self._bus: Any = None
        self._worker: LatestWorker | None = None
        self._low = self._high = None  # encoder stroke ends per motor, found by homing (rad)
        self._encoders = np.full(len(self.ids), np.nan)
        self._sent = np.full(len(self.ids), np.nan)
        self._torques = np.full(len(self.ids), HOLD_TORQUE)  # last submitted goal currents (grip)
        self._torques_written = self._torques.copy()  # on the bus: the worker's own copy
        self._lock = threading.Lock()
        self.read_failures = 0
        self.last_error = ""

    def start(self, sdk, robot) -> None:
        """Power the motors, open the bus, home once, then run in current-based position mode."""
        if self._worker is not None:
            return
        for side in ("right", "left"):
            if not robot.set_tool_flange_output_voltage(side, FLANGE_VOLTAGE_V):
                raise HardwareError(f"rby1: could not switch the {side} tool flange to {FLANGE_VOLTAGE_V} V")
        sdk.upc.initialize_device(self.device)  # the USB latency timer to 1 ms
        bus = sdk.DynamixelBus(self.device)
        if not bus.open_port() or not bus.set_baud_rate(sdk.DynamixelBus.DefaultBaudrate):
            raise HardwareError(f"rby1: cannot open the gripper bus {self.device}")
        bus.set_torque_constant([1.0] * len(self.ids))
        silent = [i for i in self.ids if not bus.ping(i)]
        if silent:
            raise HardwareError(f"rby1: gripper motors {silent} do not answer on {self.device}")
        self._bus = bus
        if self._low is None:
            self._home(sdk)
        self._mode(sdk.DynamixelBus.CurrentBasedPositionControlMode)
        bus.group_sync_write_send_torque([(i, HOLD_TORQUE) for i in self.ids])
        self._sent[:] = np.nan
        self._torques[:] = self._torques_written[:] = HOLD_TORQUE
        self._worker = LatestWorker("rby1-gripper", self._send, idle=self._poll, idle_period_s=GRIPPER_POLL_S)

    def _mode(self, mode: int) -> None:
        self._bus.group_sync_write_torque_enable([(i, 0) for i in self.ids])
        self._bus.group_sync_write_operating_mode([(i, mode) for i in self.ids])
        self._bus.group_sync_write_torque_enable([(i, 1) for i in self.ids])

    def _home(self, sdk) -> None:
        self._mode(sdk.DynamixelBus.CurrentControlMode)
        low, high = np.full(len(self.ids), np.inf), np.full(len(self.ids), -np.inf)
        deadline = time.monotonic() + HOMING_TIMEOUT_S
        for direction in (1.0, -1.0):
            self._bus.group_sync_write_send_torque([(i, direction * HOMING_TORQUE) for i in self.ids])
            previous, still_since = None, time.monotonic()
            while time.monotonic() - still_since < self.stall_s:
                if time.monotonic() > deadline:
                    raise HardwareError(f"rby1: gripper homing did not finish within {HOMING_TIMEOUT_S:g} s")
                q = self._read_encoders()
                if q is not None:
                    low, high = np.minimum(low, q), np.maximum(high, q)
                    if previous is None or not np.array_equal(q, previous):
                        previous, still_since = q, time.monotonic()
                time.sleep(HOMING_POLL_S)
        if not np.all(high - low > 1e-3):
            raise HardwareError(f"rby1: gripper homing found no stroke (encoders {low} .. {high})")
        self._bus.group_sync_write_send_torque([(i, 0.0) for i in self.ids])
        self._low, self._high = low, high

    def _read_encoders(self) -> np.ndarray | None:
        reply = self._bus.group_fast_sync_read_encoder(self.ids)
        if reply is None:
            return None
        by_id = dict(reply)
        return np.array([by_id[i] for i in self.ids], float) if all(i in by_id for i in self.ids) else None

    def _poll(self) -> None:
        q = self._read_encoders()
        with self._lock:
            if q is None:
                self.read_failures += 1
            else:
                self._encoders = q

    def _send(self, command: tuple[np.ndarray, np.ndarray]) -> None:
        goals, torques = command
        if not np.array_equal(torques, self._torques_written):
            self._bus.group_sync_write_send_torque([(i, float(t)) for i, t in zip(self.ids, torques)])
            self._torques_written = torques
        self._bus.group_sync_write_send_position([(i, float(q)) for i, q in zip(self.ids, goals)])

    def _open_fraction(self, encoders: np.ndarray) -> np.ndarray:
        fraction = (encoders - self._low) / (self._high - self._low)
        return 1.0 - fraction if self.reversed else fraction

    def command(self, openings: np.ndarray, forces: np.ndarray | None) -> None:
        """Goal positions for `openings` (m), gripping with `forces` (N, NaN for the default): in
        current-based position mode the goal current bounds the grip, HOLD_TORQUE standing for
        each gripper's max_force and a smaller force for its share of it (uncalibrated)."""
        if self._worker is None:
            return
        error = self._worker.take_error()
        if error is not None:
            self.last_error = f"gripper bus {self.device}: {error}"
        openings = np.asarray(openings, float)
        torques = np.array([HOLD_TORQUE * grip_share(forces, slot, spec.max_force)
                            for slot, spec in enumerate(self.specs)])
        if np.all(np.abs(openings - self._sent) <= GRIPPER_DEADBAND_M) and np.array_equal(torques, self._torques):
            return
        self._torques = torques
        ranges = np.array([g.opening_range for g in self.specs])
        fraction = np.clip((openings - ranges[:, 0]) / (ranges[:, 1] - ranges[:, 0]), 0.0, 1.0)
        if self.reversed:
            fraction = 1.0 - fraction
        self._worker.submit((self._low + fraction * (self._high - self._low), torques))
        self._sent = openings.copy()

    def finger_positions(self) -> np.ndarray:
        """Each finger's travel (opening / fingers), NaN until homed."""
        with self._lock:
            encoders = self._encoders.copy()
        if self._low is None:
            return np.full(sum(self.fingers), np.nan)
        ranges = np.array([g.opening_range for g in self.specs])
        openings = ranges[:, 0] + self._open_fraction(encoders) * (ranges[:, 1] - ranges[:, 0])
        return np.concatenate([np.full(n, o / n) for n, o in zip(self.fingers, openings)])

    def stop(self) -> None:
        if self._worker is not None:
            self._worker.close()
        self._worker = self._bus = None  # the SDK closes the port with the bus object
        self._encoders[:] = np.nan

    def describe(self) -> dict[str, Any]:
        facts = {"gripper_device": self.device, "gripper_homed": self._low is not None,
                 "gripper_read_failures": self.read_failures,
                 "gripper_goal_currents": ", ".join(f"{t:g}" for t in self._torques)}
        if self.last_error:
            facts["gripper_error"] = self.last_error
        return facts


def _import_sdk():
    try:
        import rby1_sdk
    except ImportError as exc:
        raise HardwareError(f"backend rby1 needs {SDK_PACKAGE} {SDK_VERSION} (Rainbow's RB-Y1 SDK), which does not "
                            f"import here ({exc}); install it with `pip install .[drivers]` (or "
                            f"`pip install {SDK_PACKAGE}=={SDK_VERSION}`)") from None
    return rby1_sdk
