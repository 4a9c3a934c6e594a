"""TCP emulator of a UFACTORY xArm 7 controller, for tests against the real ``xarm-python-sdk``.

The emulator speaks the controller's private Modbus-TCP-framed command protocol on port 502
(and 503) and streams the automatic report packets on ports 30001 (normal), 30002 (rich) and
30003 (real-time), so an unmodified ``xarm.wrapper.XArmAPI(host)`` connects to it.

The SDK hard-codes those ports (``XCONF.SocketConf``) and only lets the caller choose the IP
address, so each emulator binds the real port numbers on its own loopback address
(127.0.0.1, 127.0.0.2, ... all work on Linux without set-up). Binding port 502 needs root or
``net.ipv4.ip_unprivileged_port_start <= 502``; other ports can be passed for raw-socket use.

Modelled: the connection handshake (version, serial numbers, state, error/warn codes), the
report streams at the rates the SDK expects (5 Hz normal/rich, 100 Hz real-time), mode 0
(queued joint moves at the requested speed) and mode 1 (servo-j streaming, bounded by the
xArm's 180 deg/s joint speed), motion enable, states 0/3/4, error and warning handling with
the xArm 7 joint limits (controller error C23), and an xArm Gripper on the tool RS-485 bus.
Not modelled: Cartesian motion and kinematics (the reported TCP pose is a constant), joint
torques (reported as zero), accelerations (moves run at constant speed), IO, F/T sensors.

Run standalone with ``python -m tests.emulators.xarm_emulator --host 127.0.0.2``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import enum
import logging
import math
import selectors
import signal
import socket
import struct
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

LOG = logging.getLogger("xarm_emulator")

# --------------------------------------------------------------------------------------
# Protocol facts (from the SDK's x_config.py / uxbus_cmd.py and UFACTORY's protocol docs)
# --------------------------------------------------------------------------------------

DEFAULT_PORTS: Mapping[str, int] = {
    "command": 502,  # main command socket
    "command_aux": 503,  # second command socket the SDK opens for RS-485 pass-through on request
    "normal": 30001,  # 145-byte report, 5 Hz
    "rich": 30002,  # 587-byte report, 5 Hz (the SDK's default report_type)
    "real": 30003,  # 135-byte report, 100 Hz
}
COMMAND_KINDS = ("command", "command_aux")
REPORT_KINDS = ("normal", "rich", "real")

NUM_JOINTS = 7
TWO_PI = 2.0 * math.pi
# xArm 7 working range (UFACTORY spec: J2 -118..120 deg, J4 -11..225 deg, J6 -97..180 deg,
# the others +-360 deg); the same numbers as the SDK's JOINT_LIMITS for device type 7.
XARM7_JOINT_LIMITS: Tuple[Tuple[float, float], ...] = (
    (-TWO_PI, TWO_PI),
    (-2.059488, 2.094395),
    (-TWO_PI, TWO_PI),
    (-0.191986, 3.92699),
    (-TWO_PI, TWO_PI),
    (-1.692969, math.pi),
    (-TWO_PI, TWO_PI),
)
MAX_JOINT_SPEED = math.radians(180.0)  # rad/s, xArm spec
MIN_JOINT_SPEED = 1e-4  # rad/s, the SDK's lower clamp
# The SDK itself lets targets 0.1 deg past a limit through; the emulator accepts the same
# slack, so a target the SDK's own check passes is never refused here for rounding alone.
LIMIT_TOLERANCE = math.radians(0.1)
MAX_QUEUED_COMMANDS = 1024  # XCONF.MAX_CMD_NUM
SERVO_LOG_LENGTH = 100_000  # servo-j targets kept for inspection: over six minutes at 250 Hz

# Constant TCP pose reported because kinematics are not modelled (mm, rad).
NOMINAL_TCP_POSE = (207.0, 0.0, 112.0, math.pi, 0.0, 0.0)

# Private-protocol identifiers in the 2nd word of the frame header.
PROTOCOL_STANDARD_MODBUS = 0
PROTOCOL_HEARTBEAT = 1  # the SDK's optional heartbeat frames; the controller does not answer

# Status byte of every private-protocol response.
STATUS_INVALID = 0x08
STATUS_NOT_READY = 0x10  # "cannot perform motion"
STATUS_WARN = 0x20
STATUS_ERROR = 0x40


class State(enum.IntEnum):
    READY = 0  # the value a client sets to start; the controller then reports 1 or 2
    MOVING = 1
    SLEEPING = 2  # ready, no motion
    PAUSED = 3
    STOPPED = 4


class Mode(enum.IntEnum):
    POSITION = 0
    SERVO = 1


# Controller error / warning codes (the SDK's ControllerErrorCodeMap / ControllerWarnCodeMap).
ERROR_END_EFFECTOR_COMM = 19
ERROR_JOINT_LIMIT = 23
ERROR_CONTROL_BOX_RS485 = 111
WARN_CACHE_FULL = 11
WARN_PARAMETER = 12
WARN_UNKNOWN_COMMAND = 13


class Reg(enum.IntEnum):
    """Command registers (the SDK's XCONF.UxbusReg) handled by the emulator."""

    GET_VERSION = 1
    GET_ROBOT_SN = 2
    CHECK_VERIFY = 3
    RELOAD_DYNAMICS = 4
    GET_REPORT_TAU_OR_I = 5
    SYSTEM_CONTROL = 10
    MOTION_EN = 11
    SET_STATE = 12
    GET_STATE = 13
    GET_CMDNUM = 14
    GET_ERROR = 15
    CLEAN_ERR = 16
    CLEAN_WAR = 17
    SET_BRAKE = 18
    SET_MODE = 19
    MOVE_JOINT = 23
    MOVE_JOINTB = 24
    MOVE_HOME = 25
    SLEEP_INSTT = 26
    MOVE_SERVOJ = 29
    SET_TCP_JERK = 31
    SET_TCP_MAXACC = 32
    SET_JOINT_JERK = 33
    SET_JOINT_MAXACC = 34
    SET_TCP_OFFSET = 35
    SET_LOAD_PARAM = 36
    SET_COLLIS_SENS = 37
    SET_TEACH_SENS = 38
    CLEAN_CONF = 39
    SAVE_CONF = 40
    GET_TCP_POSE = 41
    GET_JOINT_POS = 42
    IS_JOINT_LIMIT = 45
    SET_GRAVITY_DIR = 51
    GET_JOINT_TAU = 55
    REPORT_TAU_OR_I = 70
    CNTER_RESET = 74
    CNTER_PLUS = 75
    GET_TCP_POSE_AA = 91
    TGPIO_MB_TIOUT = 123
    RS485_RTU = 124
    TGPIO_ERR = 125
    TGPIO_W16B = 127
    TGPIO_R16B = 128
    TGPIO_W32B = 129
    TGPIO_R32B = 130
    TGPIO_COM_TIOUT = 240
    SET_FEEDBACK_TYPE = 254


# RS-485 "host" ids the SDK puts in front of a pass-through frame.
TOOL_RS485_HOST_ID = 9
CONTROL_BOX_RS485_HOST_ID = 11
# Registers of the tool board itself (host id 9), read/written with TGPIO_R16B/W16B.
TOOL_REG_BAUD_INDEX = 0x0A0B
TOOL_REG_SET_BAUD_INDEX = 0x1A0B
TOOL_BAUDRATES = (4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600,
                  1000000, 1500000, 2000000, 2500000)
GRIPPER_BAUD_INDEX = TOOL_BAUDRATES.index(2000000)  # the xArm Gripper's factory baud rate


def _fp32(values: Sequence[float]) -> bytes:
    """Floats are little-endian fp32 in both the command payloads and the reports."""
    return struct.pack("<%df" % len(values), *values)


def _unpack_fp32(data: bytes, count: int) -> List[float]:
    return list(struct.unpack_from("<%df" % count, data))


# --------------------------------------------------------------------------------------
# xArm Gripper (Modbus-RTU slave 8 on the tool RS-485 bus)
# --------------------------------------------------------------------------------------


class GripperModel:
    """Registers and motion of an xArm Gripper; positions are pulses, 0 (closed) .. 850 (open)."""

    SLAVE_ID = 8
    MIN_POSITION = 0
    MAX_POSITION = 850
    # Travel rate per unit of the speed register: 5000 (the maximum) gives 1250 pulse/s,
    # about 0.7 s for the full stroke. An assumption; the real profile is not published.
    PULSES_PER_SECOND_PER_SPEED_UNIT = 0.25
    VERSION = (3, 4, 3)  # >= 3.4.3 makes the SDK poll the status register when waiting

    REG_STATUS = 0x0000
    REG_ERROR = 0x000F
    REG_ENABLE = 0x0100
    REG_MODE = 0x0101
    REG_RESET_ERROR = 0x0109
    REG_SPEED = 0x0303
    REG_TARGET = 0x0700  # 32-bit, two registers, high word first
    REG_POSITION = 0x0702  # 32-bit, two registers, high word first
    REG_VERSION = 0x0801  # three registers: major, minor, patch
    REG_SET_ZERO = 0x0817

    def __init__(self, position: float = 0.0):
        self.enabled = False
        self.mode = 0
        self.speed = 1500
        self.error = 0
        self.position = float(self._clamp(position))
        self.target = int(round(self.position))
        self._target_high_word = 0

    @classmethod
    def _clamp(cls, pulses: float) -> float:
        return min(max(pulses, cls.MIN_POSITION), cls.MAX_POSITION)

    @property
    def moving(self) -> bool:
        return self.enabled and abs(self.target - self.position) > 0.5

    def step(self, dt: float) -> None:
        if not self.moving:
            return
        max_step = self.speed * self.PULSES_PER_SECOND_PER_SPEED_UNIT * dt
        delta = self.target - self.position
        self.position = float(self.target) if abs(delta) <= max_step else self.position + math.copysign(max_step, delta)

    def read_register(self, addr: int) -> Optional[int]:
        """One 16-bit register, or None for an address the gripper does not have."""
        pos = int(round(self.position)) & 0xFFFFFFFF
        tgt = self.target & 0xFFFFFFFF
        values = {
            self.REG_STATUS: 1 if self.moving else 0,
            self.REG_ERROR: self.error,
            self.REG_ENABLE: int(self.enabled),
            self.REG_MODE: self.mode,
            self.REG_SPEED: self.speed,
            self.REG_TARGET: tgt >> 16,
            self.REG_TARGET + 1: tgt & 0xFFFF,
            self.REG_POSITION: pos >> 16,
            self.REG_POSITION + 1: pos & 0xFFFF,
            self.REG_VERSION: self.VERSION[0],
            self.REG_VERSION + 1: self.VERSION[1],
            self.REG_VERSION + 2: self.VERSION[2],
        }
        return values.get(addr)

    def read_u32(self, addr: int) -> Optional[int]:
        high, low = self.read_register(addr), self.read_register(addr + 1)
        if high is None or low is None:
            return None
        return struct.unpack(">i", struct.pack(">HH", high, low))[0]

    def write_register(self, addr: int, value: int) -> bool:
        value &= 0xFFFF
        if addr == self.REG_ENABLE:
            if value & 1 and not self.enabled:
                self.target = int(round(self.position))  # an enabled servo first holds still
            self.enabled = bool(value & 1)
        elif addr == self.REG_MODE:
            self.mode = value
        elif addr == self.REG_SPEED:
            self.speed = value
        elif addr == self.REG_TARGET:
            self._target_high_word = value  # latched until the low word arrives
        elif addr == self.REG_TARGET + 1:
            raw = struct.unpack(">i", struct.pack(">HH", self._target_high_word, value))[0]
            self.target = int(self._clamp(raw))
        elif addr == self.REG_RESET_ERROR:
            self.error = 0
        elif addr == self.REG_SET_ZERO:
            self.position, self.target = 0.0, 0
        else:
            return False
        return True

    def write_u32(self, addr: int, value: int) -> bool:
        word = struct.pack(">i", int(value))
        high, low = struct.unpack(">HH", word)
        return self.write_register(addr, high) and self.write_register(addr + 1, low)

    def handle_modbus(self, pdu: bytes) -> bytes:
        """Answer one Modbus-RTU PDU (function code + data, no slave id, no CRC)."""
        if not pdu:
            return bytes([0x80, 0x03])
        function = pdu[0]
        try:
            if function in (0x03, 0x04):
                addr, count = struct.unpack_from(">HH", pdu, 1)
                words = [self.read_register(addr + i) for i in range(count)]
                if count == 0 or None in words:
                    return bytes([function | 0x80, 0x02])
                return bytes([function, 2 * count]) + struct.pack(">%dH" % count, *words)
            if function == 0x06:
                addr, value = struct.unpack_from(">HH", pdu, 1)
                if not self.write_register(addr, value):
                    return bytes([function | 0x80, 0x02])
                return pdu[:5]
            if function == 0x10:
                addr, count, nbytes = struct.unpack_from(">HHB", pdu, 1)
                words = struct.unpack_from(">%dH" % count, pdu, 6)
                if nbytes != 2 * count or not all(self.write_register(addr + i, w) for i, w in enumerate(words)):
                    return bytes([function | 0x80, 0x02])
                return pdu[:5]
        except struct.error:
            return bytes([function | 0x80, 0x03])
        return bytes([function | 0x80, 0x01])


# --------------------------------------------------------------------------------------
# Controller model (no sockets; all methods run under the emulator's lock)
# --------------------------------------------------------------------------------------


def _consume(item, dt: float) -> float:
    """Spend up to dt of a queued item's duration; returns the time used.

    Finishing sets elapsed to exactly the duration, so float rounding can never leave a
    sliver of time that the queue loop would chase forever."""
    left = item.duration - item.elapsed
    if dt >= left:
        item.elapsed = item.duration
        return max(left, 0.0)
    item.elapsed += dt
    return dt


@dataclasses.dataclass
class _JointMove:
    """One queued mode-0 joint move: all joints arrive together, the longest at `speed`."""

    goal: List[float]
    speed: float
    start: Optional[List[float]] = None
    duration: float = 0.0
    elapsed: float = 0.0

    def advance(self, q: List[float], dt: float) -> float:
        if self.start is None:
            self.start = list(q)
            self.duration = max(abs(g - s) for g, s in zip(self.goal, self.start)) / self.speed
        used = _consume(self, dt)
        frac = 1.0 if self.duration <= 0 else min(1.0, self.elapsed / self.duration)
        q[:] = [s + frac * (g - s) for s, g in zip(self.start, self.goal)]
        return used

    @property
    def done(self) -> bool:
        return self.start is not None and self.elapsed >= self.duration


@dataclasses.dataclass
class _Dwell:
    """A queued sleep instruction (register 26)."""

    duration: float
    elapsed: float = 0.0

    def advance(self, q: List[float], dt: float) -> float:
        return _consume(self, dt)

    @property
    def done(self) -> bool:
        return self.elapsed >= self.duration


@dataclasses.dataclass(frozen=True)
class XArmSnapshot:
    """Ground truth of the emulated controller, for assertions that bypass the SDK."""

    joints: Tuple[float, ...]
    joint_velocities: Tuple[float, ...]
    state: int
    mode: int
    error_code: int
    warn_code: int
    cmd_num: int
    motors_enabled: bool
    gripper_position: float
    gripper_target: int
    gripper_enabled: bool


class XArmControllerModel:
    """State machine and motion model of the controller; turns requests into response data."""

    def __init__(
        self,
        *,
        firmware_version: str = "2.6.0",
        robot_sn: str = "XI1303A0000000",
        control_box_sn: str = "AC1302A0000000",
        gripper: bool = True,
        initial_joints: Optional[Sequence[float]] = None,
        motors_enabled: bool = False,
    ):
        self.firmware_version = firmware_version
        # The SDK reads the arm's hardware generation from sn[2:6]; below 1305 it applies the
        # device-type-7 joint limits, which are the ones this model enforces.
        self.robot_sn = robot_sn
        self.control_box_sn = control_box_sn
        if initial_joints is not None and len(initial_joints) != NUM_JOINTS:
            raise ValueError("initial_joints needs %d values" % NUM_JOINTS)
        self.q: List[float] = [float(v) for v in initial_joints] if initial_joints is not None else [0.0] * NUM_JOINTS
        self.qd: List[float] = [0.0] * NUM_JOINTS
        self.enabled_mask = 0x7F if motors_enabled else 0
        self.state = State.STOPPED
        self.mode = Mode.POSITION
        self.error_code = 0
        self.warn_code = 0
        self.gripper: Optional[GripperModel] = GripperModel() if gripper else None
        self.tool_registers: Dict[int, int] = {TOOL_REG_BAUD_INDEX: GRIPPER_BAUD_INDEX}
        self.user_counter = 0
        self.report_tau_or_current = 0
        self.register_counts: collections.Counter = collections.Counter()
        # Every servo-j target received, with the host's monotonic time: what reached the controller.
        self.servo_log: collections.deque = collections.deque(maxlen=SERVO_LOG_LENGTH)
        self.unknown_registers: List[int] = []
        self._queue: collections.deque = collections.deque()
        self._active = None  # the _JointMove/_Dwell being executed in mode 0
        self._servo_target: Optional[List[float]] = None
        self._last_time: Optional[float] = None
        self._handlers: Dict[int, Callable[[bytes], bytes]] = self._build_handler_table()

    # ----- time and motion ---------------------------------------------------------------

    def reset_clock(self, now: float) -> None:
        """Forget elapsed time (after pause or restart) so the arm does not jump."""
        self._last_time = now

    def advance(self, now: float) -> None:
        if self._last_time is None:
            self._last_time = now
        dt = now - self._last_time
        self._last_time = now
        if dt <= 0:
            return
        before = list(self.q)
        if self.state in (State.MOVING, State.SLEEPING) and self.error_code == 0:
            if self.mode == Mode.POSITION:
                self._step_queue(dt)
            elif self.mode == Mode.SERVO:
                self._step_servo(dt)
            busy = self._active is not None or bool(self._queue) or any(
                abs(a - b) > 1e-12 for a, b in zip(self.q, before))
            self.state = State.MOVING if busy else State.SLEEPING
        self.qd = [(a - b) / dt for a, b in zip(self.q, before)]
        if self.gripper is not None:
            self.gripper.step(dt)

    def _step_queue(self, dt: float) -> None:
        remaining = dt
        while remaining > 1e-12:
            if self._active is None:
                if not self._queue:
                    return
                self._active = self._queue.popleft()
            remaining -= self._active.advance(self.q, remaining)
            if self._active.done:
                self._active = None

    def _step_servo(self, dt: float) -> None:
        if self._servo_target is None:
            return
        max_step = MAX_JOINT_SPEED * dt
        self.q = [q + max(-max_step, min(max_step, t - q)) for q, t in zip(self.q, self._servo_target)]

    def _halt(self) -> None:
        """Drop every pending motion; the arm stands still where it is."""
        self._queue.clear()
        self._active = None
        self._servo_target = None
        self.qd = [0.0] * NUM_JOINTS

    def _system_reset(self) -> None:
        """What the protocol docs call a system reset: stop, clear the cache, state 4."""
        self._halt()
        self.state = State.STOPPED

    def raise_error(self, code: int, *, disable_motors: bool = False) -> None:
        self.error_code = code
        if disable_motors:
            self.enabled_mask = 0
        self._system_reset()

    @property
    def motors_enabled(self) -> bool:
        return self.enabled_mask == 0x7F

    @property
    def cmd_num(self) -> int:
        return len(self._queue) + (1 if self._active is not None else 0)

    @property
    def accepts_motion(self) -> bool:
        return self.error_code == 0 and self.state in (State.MOVING, State.SLEEPING, State.PAUSED)

    @staticmethod
    def first_joint_out_of_limits(joints: Sequence[float]) -> Optional[int]:
        for i, (value, (low, high)) in enumerate(zip(joints, XARM7_JOINT_LIMITS)):
            if not (low - LIMIT_TOLERANCE <= value <= high + LIMIT_TOLERANCE):
                return i
        return None

    def _resolve_targets(self, raw: Sequence[float], reference: Sequence[float]) -> List[float]:
        # The SDK sends +inf (or NaN) for joints a single-joint command leaves alone.
        return [v if math.isfinite(v) else ref for v, ref in zip(raw, reference)]

    def _queue_end_joints(self) -> List[float]:
        for item in reversed(self._queue):
            if isinstance(item, _JointMove):
                return list(item.goal)
        if isinstance(self._active, _JointMove):
            return list(self._active.goal)
        return list(self.q)

    def snapshot(self) -> XArmSnapshot:
        g = self.gripper
        return XArmSnapshot(
            joints=tuple(self.q),
            joint_velocities=tuple(self.qd),
            state=int(self.state),
            mode=int(self.mode),
            error_code=self.error_code,
            warn_code=self.warn_code,
            cmd_num=self.cmd_num,
            motors_enabled=self.motors_enabled,
            gripper_position=g.position if g else float("nan"),
            gripper_target=g.target if g else 0,
            gripper_enabled=g.enabled if g else False,
        )

    # ----- command dispatch --------------------------------------------------------------

    def status_byte(self) -> int:
        status = 0
        if self.error_code:
            status |= STATUS_ERROR
        if self.warn_code:
            status |= STATUS_WARN
        if self.state not in (State.MOVING, State.SLEEPING, State.PAUSED) or self.error_code:
            status |= STATUS_NOT_READY
        return status

    def handle(self, register: int, payload: bytes) -> Tuple[int, bytes]:
        """Execute one request; returns (status byte, response data)."""
        self.register_counts[register] += 1
        handler = self._handlers.get(register)
        if handler is None:
            LOG.warning("unsupported register %d (payload %d bytes)", register, len(payload))
            self.unknown_registers.append(register)
            self.warn_code = WARN_UNKNOWN_COMMAND
            return self.status_byte(), b""
        try:
            data = handler(payload)
        except (struct.error, IndexError, ValueError):
            LOG.warning("malformed payload for register %d: %s", register, payload.hex())
            self.warn_code = WARN_PARAMETER
            return self.status_byte() | STATUS_INVALID, b""
        return self.status_byte(), data

    def _build_handler_table(self) -> Dict[int, Callable[[bytes], bytes]]:
        def ack(_payload: bytes) -> bytes:
            return b""

        def ack_queued(_payload: bytes) -> bytes:
            # Motion-parameter setters are queued commands and answer with the cache size.
            return struct.pack(">H", self.cmd_num)

        def ack_with_reset(_payload: bytes) -> bytes:
            self._system_reset()
            return b""

        table: Dict[int, Callable[[bytes], bytes]] = {
            Reg.GET_VERSION: self._get_version,
            Reg.GET_ROBOT_SN: self._get_robot_sn,
            Reg.CHECK_VERIFY: lambda p: b"\x00",
            Reg.RELOAD_DYNAMICS: ack,
            Reg.GET_REPORT_TAU_OR_I: lambda p: bytes([self.report_tau_or_current]),
            Reg.REPORT_TAU_OR_I: self._set_report_tau_or_i,
            Reg.SYSTEM_CONTROL: ack,
            Reg.MOTION_EN: self._motion_enable,
            Reg.SET_STATE: self._set_state,
            Reg.GET_STATE: lambda p: bytes([int(self.state)]),
            Reg.GET_CMDNUM: lambda p: struct.pack(">H", self.cmd_num),
            Reg.GET_ERROR: lambda p: bytes([self.error_code & 0xFF, self.warn_code & 0xFF]),
            Reg.CLEAN_ERR: self._clean_error,
            Reg.CLEAN_WAR: self._clean_warn,
            Reg.SET_BRAKE: ack_with_reset,
            Reg.SET_MODE: self._set_mode,
            Reg.MOVE_JOINT: self._move_joint,
            Reg.MOVE_JOINTB: self._move_joint,
            Reg.MOVE_HOME: self._move_home,
            Reg.SLEEP_INSTT: self._sleep_instruction,
            Reg.MOVE_SERVOJ: self._move_servoj,
            Reg.SET_TCP_JERK: ack_queued,
            Reg.SET_TCP_MAXACC: ack_queued,
            Reg.SET_JOINT_JERK: ack_queued,
            Reg.SET_JOINT_MAXACC: ack_queued,
            Reg.SET_TCP_OFFSET: ack_with_reset,
            Reg.SET_LOAD_PARAM: ack_queued,
            Reg.SET_COLLIS_SENS: ack_with_reset,
            Reg.SET_TEACH_SENS: ack_with_reset,
            Reg.CLEAN_CONF: ack_with_reset,
            Reg.SAVE_CONF: ack,
            Reg.GET_TCP_POSE: lambda p: _fp32(NOMINAL_TCP_POSE),
            Reg.GET_TCP_POSE_AA: lambda p: _fp32(NOMINAL_TCP_POSE[:3] + (math.pi, 0.0, 0.0)),
            Reg.GET_JOINT_POS: self._get_joint_pos,
            Reg.IS_JOINT_LIMIT: self._is_joint_limit,
            Reg.SET_GRAVITY_DIR: ack,
            Reg.GET_JOINT_TAU: lambda p: _fp32([0.0] * NUM_JOINTS),
            Reg.CNTER_RESET: self._counter_reset,
            Reg.CNTER_PLUS: self._counter_plus,
            Reg.TGPIO_MB_TIOUT: ack,
            Reg.TGPIO_COM_TIOUT: ack,
            Reg.RS485_RTU: self._rs485_rtu,
            Reg.TGPIO_ERR: lambda p: bytes([0, self.gripper.error if self.gripper else 0]),
            Reg.TGPIO_W16B: self._tgpio_write16,
            Reg.TGPIO_W32B: self._tgpio_write32,
            Reg.TGPIO_R16B: self._tgpio_read16,
            Reg.TGPIO_R32B: self._tgpio_read32,
            Reg.SET_FEEDBACK_TYPE: ack,
        }
        return {int(k): v for k, v in table.items()}

    # ----- identification ------------------------------------------------------------------

    def _get_version(self, _payload: bytes) -> bytes:
        # "<axes>,<type>,<arm hw>,<box hw>,v<firmware>"; the SDK parses axis, type and version.
        text = "7,7,%s,%s,v%s" % (self.robot_sn[:6], self.control_box_sn[:6], self.firmware_version)
        return text.encode("ascii")[:40].ljust(40, b"\0")

    def _get_robot_sn(self, _payload: bytes) -> bytes:
        text = self.robot_sn.encode("ascii") + b"\0" + self.control_box_sn.encode("ascii") + b"\0"
        return text[:40].ljust(40, b"\0")

    def _set_report_tau_or_i(self, payload: bytes) -> bytes:
        self.report_tau_or_current = payload[0]
        return b""

    # ----- system state ----------------------------------------------------------------------

    def _motion_enable(self, payload: bytes) -> bytes:
        axis, enable = payload[0], payload[1]
        mask = 0x7F if axis == 8 else (1 << (axis - 1)) if 1 <= axis <= NUM_JOINTS else None
        if mask is None:
            self.warn_code = WARN_PARAMETER
            return b""
        self.enabled_mask = (self.enabled_mask | mask) if enable else (self.enabled_mask & ~mask)
        self._system_reset()
        return b""

    def _set_state(self, payload: bytes) -> bytes:
        requested = payload[0]
        if requested == State.READY:
            # Starting needs enabled motors and no pending error; otherwise stay stopped.
            if self.error_code == 0 and self.motors_enabled and self.state != State.MOVING:
                self.state = State.SLEEPING
        elif requested == State.PAUSED:
            if self.state in (State.MOVING, State.SLEEPING):
                self.state = State.PAUSED
                self.qd = [0.0] * NUM_JOINTS
        elif requested == State.STOPPED:
            self._system_reset()
        else:
            self.warn_code = WARN_PARAMETER
        return b""

    def _set_mode(self, payload: bytes) -> bytes:
        mode = payload[0]
        if mode > 7:
            self.warn_code = WARN_PARAMETER
            return b""
        self.mode = mode
        self._system_reset()  # a mode switch needs set_state(0) again, as on the real box
        return b""

    def _clean_error(self, _payload: bytes) -> bytes:
        self.error_code = 0
        self._system_reset()
        return b""

    def _clean_warn(self, _payload: bytes) -> bytes:
        self.warn_code = 0
        return b""

    def _counter_reset(self, _payload: bytes) -> bytes:
        self.user_counter = 0
        return struct.pack(">H", self.cmd_num)

    def _counter_plus(self, _payload: bytes) -> bytes:
        self.user_counter += 1
        return struct.pack(">H", self.cmd_num)

    # ----- motion -----------------------------------------------------------------------------

    def _enqueue(self, item, only_check: bool, check_result: int) -> bytes:
        """Queue a mode-0 command; answers cache size (+ check result for only-check calls)."""
        if only_check:
            return struct.pack(">HB", self.cmd_num, check_result)
        if self.mode != Mode.POSITION or not self.accepts_motion:
            # Wrong mode or not started: the controller ignores the move (the status byte
            # tells the SDK whether the arm could move at all).
            return struct.pack(">H", self.cmd_num)
        if self.cmd_num >= MAX_QUEUED_COMMANDS:
            self.warn_code = WARN_CACHE_FULL
            return struct.pack(">H", self.cmd_num)
        self._queue.append(item)
        if self.state == State.SLEEPING:
            self.state = State.MOVING
        return struct.pack(">H", self.cmd_num)

    def _move_joint(self, payload: bytes) -> bytes:
        values = _unpack_fp32(payload, NUM_JOINTS + 3)
        only_check = len(payload) > 40 and payload[40] > 0
        goal = self._resolve_targets(values[:NUM_JOINTS], self._queue_end_joints())
        speed = values[NUM_JOINTS]
        bad_joint = self.first_joint_out_of_limits(goal)
        if bad_joint is not None and not only_check:
            LOG.info("joint move refused: J%d target %.4f rad outside limits", bad_joint + 1, goal[bad_joint])
            self.raise_error(ERROR_JOINT_LIMIT)
            return struct.pack(">H", self.cmd_num)
        speed = MAX_JOINT_SPEED if not math.isfinite(speed) else min(max(speed, MIN_JOINT_SPEED), MAX_JOINT_SPEED)
        return self._enqueue(_JointMove(goal=goal, speed=speed), only_check, int(bad_joint is not None))

    def _move_home(self, payload: bytes) -> bytes:
        speed = _unpack_fp32(payload, 3)[0]
        only_check = len(payload) > 12 and payload[12] > 0
        speed = MAX_JOINT_SPEED if not math.isfinite(speed) else min(max(speed, MIN_JOINT_SPEED), MAX_JOINT_SPEED)
        return self._enqueue(_JointMove(goal=[0.0] * NUM_JOINTS, speed=speed), only_check, 0)

    def _sleep_instruction(self, payload: bytes) -> bytes:
        seconds = max(0.0, _unpack_fp32(payload, 1)[0])
        return self._enqueue(_Dwell(duration=seconds), False, 0)

    def _move_servoj(self, payload: bytes) -> bytes:
        values = _unpack_fp32(payload, NUM_JOINTS)
        self.servo_log.append((time.monotonic(), tuple(values)))
        if self.mode != Mode.SERVO or not self.accepts_motion:
            return b""  # ignored, as the controller does in the wrong mode or when stopped
        reference = self._servo_target if self._servo_target is not None else self.q
        target = self._resolve_targets(values, reference)
        bad_joint = self.first_joint_out_of_limits(target)
        if bad_joint is not None:
            LOG.info("servo_j refused: J%d target %.4f rad outside limits", bad_joint + 1, target[bad_joint])
            self.raise_error(ERROR_JOINT_LIMIT)
            return b""
        self._servo_target = target
        if self.state == State.SLEEPING:
            self.state = State.MOVING
        return b""

    def _get_joint_pos(self, payload: bytes) -> bytes:
        if not payload:
            return _fp32(self.q)
        # get_joint_states: low nibble = how many blocks of 7 (position, velocity, effort).
        blocks = max(1, min(3, payload[0] & 0x0F))
        data = [self.q, self.qd, [0.0] * NUM_JOINTS][:blocks]
        return b"".join(_fp32(block) for block in data)

    def _is_joint_limit(self, payload: bytes) -> bytes:
        joints = _unpack_fp32(payload, NUM_JOINTS)
        return bytes([int(self.first_joint_out_of_limits(joints) is not None)])

    # ----- tool RS-485 bus / gripper -------------------------------------------------------

    def _tool_device_reachable(self, slave_id: int) -> bool:
        """Only the gripper answers, and only if the tool bus runs at its baud rate."""
        return (self.gripper is not None and slave_id == GripperModel.SLAVE_ID
                and self.tool_registers.get(TOOL_REG_BAUD_INDEX) == GRIPPER_BAUD_INDEX)

    def _rs485_rtu(self, payload: bytes) -> bytes:
        host_id, frame = payload[0], payload[1:]
        if host_id == TOOL_RS485_HOST_ID and frame and self._tool_device_reachable(frame[0]):
            return bytes([host_id, frame[0]]) + self.gripper.handle_modbus(frame[1:])
        # Nobody answered on the bus: the controller flags a communication error (and stops).
        self.raise_error(ERROR_END_EFFECTOR_COMM if host_id == TOOL_RS485_HOST_ID else ERROR_CONTROL_BOX_RS485)
        return bytes([host_id])

    def _tgpio_write16(self, payload: bytes) -> bytes:
        return self._tgpio_write(payload, wide=False)

    def _tgpio_write32(self, payload: bytes) -> bytes:
        return self._tgpio_write(payload, wide=True)

    def _tgpio_write(self, payload: bytes, wide: bool) -> bytes:
        bid, addr = payload[0], struct.unpack_from(">H", payload, 1)[0]
        value = int(_unpack_fp32(payload[3:7], 1)[0])  # the SDK sends register values as fp32
        if bid == TOOL_RS485_HOST_ID:
            if addr == TOOL_REG_SET_BAUD_INDEX:
                self.tool_registers[TOOL_REG_BAUD_INDEX] = value
            else:
                self.tool_registers[addr] = value
            return b""
        if self._tool_device_reachable(bid):
            ok = self.gripper.write_u32(addr, value) if wide else self.gripper.write_register(addr, value)
            if not ok:
                self.warn_code = WARN_PARAMETER
            return b""
        self.raise_error(ERROR_END_EFFECTOR_COMM)
        return b""

    def _tgpio_read(self, payload: bytes, wide: bool) -> bytes:
        bid, addr = payload[0], struct.unpack_from(">H", payload, 1)[0]
        if bid == TOOL_RS485_HOST_ID:
            return struct.pack(">i", self.tool_registers.get(addr, 0))
        if self._tool_device_reachable(bid):
            value = self.gripper.read_u32(addr) if wide else self.gripper.read_register(addr)
            if value is None:
                self.warn_code = WARN_PARAMETER
                value = 0
            return struct.pack(">i", value)
        self.raise_error(ERROR_END_EFFECTOR_COMM)
        return struct.pack(">i", 0)

    def _tgpio_read16(self, payload: bytes) -> bytes:
        return self._tgpio_read(payload, wide=False)

    def _tgpio_read32(self, payload: bytes) -> bytes:
        return self._tgpio_read(payload, wide=True)

    # ----- report packets -----------------------------------------------------------------

    def build_report(self, kind: str) -> bytes:
        """One automatic-report packet for port 30001 ('normal'), 30002 ('rich') or 30003 ('real')."""
        body = bytearray()
        body += bytes([(int(self.state) & 0x0F) | ((int(self.mode) & 0x0F) << 4)])
        body += struct.pack(">H", self.cmd_num)
        body += _fp32(self.q)
        body += _fp32(NOMINAL_TCP_POSE)
        body += _fp32([0.0] * NUM_JOINTS)  # joint torques are not modelled
        if kind == "real":
            body += _fp32([0.0] * 12)  # F/T sensor: filtered + raw
            return self._frame_report(body, 135)
        # Brake released and motor enabled bits are both set for an enabled joint.
        body += bytes([self.enabled_mask, self.enabled_mask, self.error_code & 0xFF, self.warn_code & 0xFF])
        body += _fp32([0.0] * 6)  # TCP offset
        body += _fp32([0.0] * 4)  # TCP payload: mass + centre of mass
        body += bytes([3, 3])  # collision and teaching sensitivity
        body += _fp32([0.0, 0.0, -1.0])  # gravity direction
        if kind == "normal":
            return self._frame_report(body, 145)
        body += bytes([7, NUM_JOINTS, 0xAA, 0x55, 0, 0])  # type, axes, master id, slave id, reserved
        body += ("v" + self.firmware_version).encode("ascii")[:30].ljust(30, b"\0")
        body += _fp32([10000.0, 1.0, 50000.0, 0.1, 1000.0])  # TCP jerk, min/max acc, min/max speed
        body += _fp32([500.0, 0.01, 20.0, MIN_JOINT_SPEED, MAX_JOINT_SPEED])  # joint equivalents
        body += _fp32([2.3, 2.7])  # rotation jerk, max rotation acc
        body += bytes(16)  # servo status/error per joint + tool IO error
        body += bytes([30] * NUM_JOINTS)  # joint temperatures, deg C
        body += _fp32([0.0] + list(self.qd))  # TCP speed, joint speeds
        body += struct.pack(">I", self.user_counter & 0xFFFFFFFF)
        body += _fp32([0.0] * 6)  # world offset
        body += bytes([0, 0])  # reset-on-stop flags for controller / tool outputs
        body += bytes([0, 1, 0])  # simulation robot, self-collision check, collision tool type
        body += _fp32([0.0] * 6)  # collision tool model parameters
        body += struct.pack(">7H", *([4800] * NUM_JOINTS))  # joint voltages x100
        body += _fp32([0.0] * NUM_JOINTS)  # joint currents
        body += bytes([0, 0]) + struct.pack(">8H", 0xFFFF, 0xFFFF, 0, 0, 0, 0, 0, 0)  # control box GPIO
        body += bytes(32)  # IO function configuration
        body += _fp32([0.0] * 12)  # F/T sensor: filtered + raw
        body += bytes([0])  # load identification progress
        body += _fp32([math.pi, 0.0, 0.0])  # axis-angle orientation
        body += bytes([0, 0])  # settings bits, reduced mode
        body += struct.pack(">6h", 9999, -9999, 9999, -9999, 9999, -9999)  # safety boundary
        body += _fp32([1000.0, MAX_JOINT_SPEED])  # reduced TCP / joint speed
        body += _fp32([bound for limit in XARM7_JOINT_LIMITS for bound in limit])  # reduced ranges
        body += bytes([0, 0])  # fence, collision rebound
        body += struct.pack(">I", 0) + bytes([0, 0, 0]) + struct.pack(">3h", 0, 0, 0)  # alarms, monitor
        return self._frame_report(body, 587)

    @staticmethod
    def _frame_report(body: bytearray, expected_size: int) -> bytes:
        packet = struct.pack(">I", len(body) + 4) + bytes(body)
        assert len(packet) == expected_size, (len(packet), expected_size)
        return packet


# --------------------------------------------------------------------------------------
# Network front end
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class _Client:
    sock: socket.socket
    kind: str
    peer: Tuple[str, int]
    inbuf: bytearray = dataclasses.field(default_factory=bytearray)
    outbuf: bytearray = dataclasses.field(default_factory=bytearray)
    next_report: float = 0.0
    held: List[Tuple[float, bytes]] = dataclasses.field(default_factory=list)  # (due, reply) while delayed


class XArmEmulator:
    """An emulated xArm 7 controller listening on one IP address; runs in one background thread.

    ``stop()`` closes every socket (a lost link) and freezes the simulated arm until
    ``start()``; ``pause()`` keeps sockets open but neither answers nor reports (a hung
    controller, arm frozen too) until ``resume()``.
    """

    MAX_FRAME_LENGTH = 4096
    MAX_PENDING_OUTPUT = 1 << 20  # a report client this far behind is dropped

    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        ports: Optional[Mapping[str, Optional[int]]] = None,
        normal_report_hz: float = 5.0,
        real_report_hz: float = 100.0,
        tick_hz: float = 100.0,
        **model_options,
    ):
        """``ports`` overrides DEFAULT_PORTS per kind (None disables a listener);
        ``model_options`` go to XArmControllerModel (firmware_version, robot_sn, control_box_sn,
        gripper, initial_joints, motors_enabled)."""
        self.host = host
        self.ports: Dict[str, Optional[int]] = dict(DEFAULT_PORTS)
        if ports:
            unknown = set(ports) - set(DEFAULT_PORTS)
            if unknown:
                raise ValueError("unknown port kinds: %s" % sorted(unknown))
            self.ports.update(ports)
        self._report_periods = {"normal": 1.0 / normal_report_hz, "rich": 1.0 / normal_report_hz,
                                "real": 1.0 / real_report_hz}
        self._tick_period = 1.0 / tick_hz
        self.model = XArmControllerModel(**model_options)
        self._lock = threading.RLock()
        self._thread: Optional[threading.Thread] = None
        self._stop_event = threading.Event()
        self._selector: Optional[selectors.BaseSelector] = None
        self._listeners: List[socket.socket] = []
        self._clients: List[_Client] = []
        self._paused = False
        self._reply_delay = 0.0

    # ----- lifecycle --------------------------------------------------------------------

    def start(self) -> "XArmEmulator":
        """Bind the listeners and start serving; raises OSError if a port cannot be bound."""
        if self.running:
            return self
        selector = selectors.DefaultSelector()
        listeners = []
        try:
            for kind, port in self.ports.items():
                if port is None:
                    continue
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                # SO_REUSEADDR lets start() rebind at once after stop(), despite TIME_WAIT.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((self.host, port))
                except OSError as exc:
                    sock.close()
                    raise OSError(exc.errno, "cannot bind %s:%d (%s port): %s"
                                  % (self.host, port, kind, exc.strerror)) from exc
                sock.listen(8)
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ, ("listener", kind))
                listeners.append(sock)
        except OSError:
            for sock in listeners:
                sock.close()
            selector.close()
            raise
        with self._lock:
            self.model.reset_clock(time.monotonic())
        self._selector, self._listeners = selector, listeners
        self._stop_event.clear()
        self._thread = threading.Thread(target=self._serve, name="xarm-emulator-%s" % self.host, daemon=True)
        self._thread.start()
        LOG.info("xArm emulator listening on %s ports %s", self.host,
                 ", ".join("%s=%d" % (k, p) for k, p in self.ports.items() if p is not None))
        return self

    def stop(self) -> None:
        """Close the listening sockets and drop all clients (the link is lost)."""
        if self._thread is None:
            return
        self._stop_event.set()
        self._thread.join(timeout=5.0)
        self._thread = None

    close = stop

    def pause(self) -> None:
        """Hang: keep sockets open, but answer nothing, report nothing and freeze the arm."""
        with self._lock:
            self._paused = True

    def delay_replies(self, seconds: float) -> None:
        """Hold every command reply for `seconds` while reports stream on (a busy controller or
        network); 0 answers at once again."""
        with self._lock:
            self._reply_delay = float(seconds)

    def resume(self) -> None:
        with self._lock:
            if not self._paused:
                return
            self._paused = False
            now = time.monotonic()
            self.model.reset_clock(now)
            for client in self._clients:
                client.next_report = now

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def paused(self) -> bool:
        return self._paused

    def __enter__(self) -> "XArmEmulator":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # ----- inspection and fault injection (thread-safe) -------------------------------------

    def snapshot(self) -> XArmSnapshot:
        with self._lock:
            if self.running and not self._paused:
                self.model.advance(time.monotonic())
            return self.model.snapshot()

    def set_joint_positions(self, joints: Sequence[float]) -> None:
        """Teleport the arm (test set-up); cancels any motion in progress."""
        if len(joints) != NUM_JOINTS:
            raise ValueError("expected %d joint values" % NUM_JOINTS)
        with self._lock:
            self.model._halt()
            self.model.q = [float(v) for v in joints]

    def inject_error(self, code: int, *, disable_motors: bool = False) -> None:
        """Raise a controller error (e.g. 31, collision) as if the arm had detected it."""
        with self._lock:
            self.model.raise_error(code, disable_motors=disable_motors)

    def inject_warning(self, code: int) -> None:
        with self._lock:
            self.model.warn_code = code

    def register_count(self, register: int) -> int:
        """How many requests for a command register arrived (e.g. Reg.MOVE_SERVOJ)."""
        with self._lock:
            return self.model.register_counts[int(register)]

    def servo_targets(self) -> List[Tuple[float, Tuple[float, ...]]]:
        """The servo-j targets received so far (the newest SERVO_LOG_LENGTH), as (host monotonic
        time, J1..J7 in rad as the fp32 payload carried them)."""
        with self._lock:
            return list(self.model.servo_log)

    def client_counts(self) -> Dict[str, int]:
        with self._lock:
            return dict(collections.Counter(c.kind for c in self._clients))

    # ----- event loop -------------------------------------------------------------------------

    def _serve(self) -> None:
        selector = self._selector
        next_tick = time.monotonic()
        try:
            while not self._stop_event.is_set():
                # Waking at the tick rate also bounds how long stop() waits for the loop.
                for key, mask in selector.select(max(0.0, next_tick - time.monotonic())):
                    with self._lock:
                        if key.data[0] == "listener":
                            self._accept(key.fileobj, key.data[1])
                        else:
                            self._service(key.data[1], mask)
                now = time.monotonic()
                if now >= next_tick:
                    with self._lock:
                        self._tick(now)
                    next_tick = max(next_tick + self._tick_period, now)
        except Exception:  # keep the failure visible in test logs rather than dying silently
            LOG.exception("xArm emulator loop crashed")
            raise
        finally:
            with self._lock:
                for client in list(self._clients):
                    self._drop(client)
                for sock in self._listeners:
                    selector.unregister(sock)
                    sock.close()
                self._listeners = []
                selector.close()
                self._selector = None

    def _accept(self, listener: socket.socket, kind: str) -> None:
        try:
            sock, peer = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = _Client(sock=sock, kind=kind, peer=peer, next_report=time.monotonic())
        self._clients.append(client)
        self._selector.register(sock, selectors.EVENT_READ, ("client", client))
        LOG.debug("%s client connected from %s:%d", kind, *peer)

    def _drop(self, client: _Client) -> None:
        if client in self._clients:
            self._clients.remove(client)
            try:
                self._selector.unregister(client.sock)
            except (KeyError, ValueError):
                pass
            client.sock.close()
            LOG.debug("%s client %s:%d dropped", client.kind, *client.peer)

    def _service(self, client: _Client, mask: int) -> None:
        if client not in self._clients:
            return
        if mask & selectors.EVENT_WRITE:
            self._flush(client)
        if mask & selectors.EVENT_READ:
            try:
                data = client.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._drop(client)
                return
            if self._paused or client.kind not in COMMAND_KINDS:
                return  # a hung controller swallows requests; report sockets ignore input
            client.inbuf += data
            self._process_frames(client)

    def _process_frames(self, client: _Client) -> None:
        self.model.advance(time.monotonic())  # answer with the arm's state as of now
        buf = client.inbuf
        while len(buf) >= 6:
            length = struct.unpack_from(">H", buf, 4)[0]
            if length == 0 or length > self.MAX_FRAME_LENGTH:
                LOG.warning("garbage on command socket from %s:%d, closing", *client.peer)
                self._drop(client)
                return
            if len(buf) < 6 + length:
                break
            frame = bytes(buf[:6 + length])
            del buf[:6 + length]
            response = self._answer(frame)
            if response and self._reply_delay > 0:
                client.held.append((time.monotonic() + self._reply_delay, response))
            elif response:
                client.outbuf += response
        self._flush(client)

    def _answer(self, frame: bytes) -> bytes:
        transaction_id, protocol = struct.unpack_from(">HH", frame, 0)
        unit, payload = frame[6], frame[7:]
        if protocol == PROTOCOL_HEARTBEAT:
            return b""
        if protocol == PROTOCOL_STANDARD_MODBUS:
            # Standard Modbus-TCP register access is not emulated: "illegal function".
            function = payload[0] if payload else 0
            return struct.pack(">HHHBBB", transaction_id, protocol, 3, unit, function | 0x80, 0x01)
        status, data = self.model.handle(unit, payload)
        # The SDK checks that transaction id, protocol id and register are echoed back.
        return struct.pack(">HHHBB", transaction_id, protocol, len(data) + 2, unit, status) + data

    def _flush(self, client: _Client) -> None:
        if client.outbuf:
            try:
                sent = client.sock.send(client.outbuf)
                del client.outbuf[:sent]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._drop(client)
                return
        if len(client.outbuf) > self.MAX_PENDING_OUTPUT:
            LOG.warning("%s client %s:%d is not reading, dropping it", client.kind, *client.peer)
            self._drop(client)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.outbuf else 0)
        key = self._selector.get_key(client.sock)
        if key.events != events:
            self._selector.modify(client.sock, events, key.data)

    def _tick(self, now: float) -> None:
        if self._paused:
            return
        self.model.advance(now)
        for client in list(self._clients):
            while client.held and client.held[0][0] <= now:
                client.outbuf += client.held.pop(0)[1]
            if client.outbuf:
                self._flush(client)
        packets: Dict[str, bytes] = {}
        for client in list(self._clients):
            if client.kind not in REPORT_KINDS or now < client.next_report:
                continue
            if client.kind not in packets:
                packets[client.kind] = self.model.build_report(client.kind)
            client.outbuf += packets[client.kind]
            period = self._report_periods[client.kind]
            # Keep a steady cadence, but do not burst to catch up after a stall.
            client.next_report = max(client.next_report + period, now + 0.5 * period)
            self._flush(client)


# --------------------------------------------------------------------------------------
# Standalone entry point
# --------------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Emulated UFACTORY xArm 7 controller.")
    parser.add_argument("--host", default="127.0.0.1", help="IP address to listen on (default 127.0.0.1)")
    parser.add_argument("--firmware", default="2.6.0", help="firmware version to report")
    parser.add_argument("--no-gripper", action="store_true", help="emulate an arm without the xArm Gripper")
    parser.add_argument("--enabled", action="store_true", help="start with the motors enabled")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")

    emulator = XArmEmulator(args.host, firmware_version=args.firmware, gripper=not args.no_gripper,
                            motors_enabled=args.enabled)
    try:
        emulator.start()
    except OSError as exc:
        LOG.error("%s", exc)
        return 1
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    print("xArm emulator running on %s; Ctrl-C to stop" % args.host, flush=True)
    try:
        while not done.wait(1.0):
            pass
    finally:
        emulator.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
