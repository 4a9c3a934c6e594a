"""ALOHA's two ViperX 300 6DOF follower arms through ROBOTIS' `dynamixel-sdk` (Protocol 2.0).

Each follower is one Dynamixel bus behind its own U2D2 (`left_port`, `right_port`), nine servos
as Interbotix numbers them: 1 waist, 2 shoulder, 3 shoulder shadow, 4 elbow, 5 elbow shadow,
6 forearm_roll, 7 wrist_angle, 8 wrist_rotate, 9 gripper; XM540-W270 for ids 1-7, XM430-W350
for 8 and 9. The shadows are second motors on the shoulder and elbow: Interbotix gives them the
primary's id as Secondary ID (12), so a goal written to id 2 or 4 moves both. Where a shadow's
Secondary ID is not set, this backend writes the primary's goal to the shadow itself.

Set-up (connect): ping every id and check its model number; reboot servos that report a hardware
error (as ALOHA's own set-up reboots the gripper); check the Drive Mode reverse bits that make
each servo count in its joint's direction (Interbotix's motor config: shoulder, elbow and
wrist_angle reversed, their shadows not); then, as ALOHA's follower set-up does, position control
(3) for the arm servos and current-based position control (5) for the gripper, velocity-based
profiles with Profile Velocity / Acceleration 0 (no profile: each move runs at the Velocity
Limit, 131 = 3.14 rad/s in Interbotix's config), and a Goal Current for the gripper so it
squeezes an object with a bounded current instead of stalling into an overload. EEPROM items are
written only when they differ, and only with the torque off: on_configure() never drops a holding arm.
on_activate() turns the torque on (each servo then holds where it is); on_deactivate() and on_cleanup()
leave it on, so the arms keep holding their last goal: a follower without torque collapses.

Units: 4096 ticks per turn, 2048 ticks = 0 rad (Interbotix's convention), plus a per-joint offset
(`left_offsets`, `right_offsets`) for calibration; velocity in 0.229 rev/min units; effort is a
torque estimate, Present Current (2.69 mA units) times the servo's stall torque / stall current
(XM540-W270 10.6 N m at 4.4 A, XM430-W350 4.1 N m at 2.3 A, 12 V), summed over a joint's motors.
ROBOTIS says current is only a rough proxy for torque; treat it as such. The gripper's opening
is a straight line through two calibrated points, the servo angle when closed
(`gripper_closed_rad`, ALOHA's PUPPET_GRIPPER_JOINT_CLOSE -0.6213 rad) and when open
(`gripper_open_rad`, PUPPET_GRIPPER_JOINT_OPEN 1.4910 rad), mapped onto the robot's opening range;
the real linkage is not linear, so calibrate the two points and take the map between them as an
approximation. Finger efforts are NaN (no calibrated force).

Each control cycle is one Sync Read and one Sync Write per bus. read() sends the Sync Read of
Present Current, Velocity and Position (126..135) on both buses before collecting either answer,
so the two buses answer in parallel. It collects the status packets with the packet handler's
readRx rather than GroupSyncRead, because GroupSyncRead drops each packet's error byte, whose
Alert bit is how a servo says it has a hardware error. write() sends Goal Position (116) for the
arm servos every cycle, and for the gripper only when its goal changed.

Hardware errors: a servo whose Alert bit comes up gets its Hardware Error Status (70) read and
decoded (input voltage, overheating, motor encoder, electrical shock, overload); from then on
read() still reads, describe() names the servo and the bits, and write() raises HardwareError
until reset() reboots that servo and sets it up again.

Link loss: a U2D2 that vanishes makes pyserial / termios raise; a pulled servo cable makes the
status packets time out (COMM_RX_TIMEOUT). Both raise LinkLost. The SDK waits for a status packet
for 2 x LATENCY_TIMER + 2 ms plus the transfer time, and assumes the FTDI chip's default latency
timer of 16 ms; this backend uses the real latency timer instead (read from sysfs, else
`latency_timer_ms`), so with ALOHA's udev rule (latency timer 1 ms) a dead bus is noticed within
about 6 ms, and with the default within 36 ms: both inside `link_timeout_s`. The SDK also polls
the port in a busy loop while it waits; this backend's port sleeps in select() until a byte comes.
"""

from __future__ import annotations

import array
import contextlib
import functools
import math
import os
import select
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Iterator, Mapping

import numpy as np

from r2s2r.config import ConfigError, Section
from r2s2r.contract.types import JointCommand, JointSample
from r2s2r.hardware.base import Hardware, HardwareError, Lifecycle, LinkLost, grip_share
from r2s2r.robots import RobotSpec

try:  # pyserial's POSIX backend reports a vanished pty or USB adapter from tcflush as termios.error
    import termios
    _PORT_ERRORS: tuple[type[BaseException], ...] = (OSError, termios.error)
except ImportError:  # no termios (Windows): pyserial raises SerialException, an OSError
    _PORT_ERRORS = (OSError,)

SDK_PACKAGE = "dynamixel-sdk"
SIDES = ("left", "right")

# The follower's motors in id order, and the joints they drive (Interbotix's vx300s config).
MOTORS = ("waist", "shoulder", "shoulder_shadow", "elbow", "elbow_shadow", "forearm_roll", "wrist_angle",
          "wrist_rotate", "gripper")
ARM_JOINTS = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")
SHADOW_OF = {"shoulder_shadow": "shoulder", "elbow_shadow": "elbow"}
JOINT_MOTORS = {joint: (joint, *(s for s, p in SHADOW_OF.items() if p == joint)) for joint in ARM_JOINTS}
GRIPPER = "gripper"
REVERSED = frozenset({"shoulder", "elbow", "wrist_angle"})  # Drive Mode bit 0 set in Interbotix's config
DEFAULT_IDS = tuple(range(1, 10))

MODEL_NAMES = {1020: "XM430-W350", 1030: "XM430-W210", 1060: "XL430-W250", 1120: "XM540-W270", 1130: "XM540-W150"}
XM540_W270, XM430_W350 = 1120, 1020
EXPECTED_MODEL = {name: XM430_W350 if name in ("wrist_rotate", GRIPPER) else XM540_W270 for name in MOTORS}
NM_PER_AMPERE = {XM540_W270: 10.6 / 4.4, XM430_W350: 4.1 / 2.3}  # stall torque / stall current, 12 V

# Control table of the X series (addresses, bytes).
ADDR_FIRMWARE = 6
EEPROM_BLOCK = (6, 50)  # Firmware Version (6) .. Min Position Limit (52..55), one read per servo
ADDR_DRIVE_MODE, ADDR_OPERATING_MODE, ADDR_SECONDARY_ID = 10, 11, 12
ADDR_CURRENT_LIMIT, ADDR_MAX_POSITION_LIMIT, ADDR_MIN_POSITION_LIMIT = 38, 48, 52
ADDR_TORQUE_ENABLE, ADDR_HARDWARE_ERROR = 64, 70
RAM_STATUS_BLOCK = (64, 7)  # Torque Enable (64) .. Hardware Error Status (70)
ADDR_GOAL_CURRENT, ADDR_PROFILE_ACCELERATION, ADDR_PROFILE_VELOCITY, ADDR_GOAL_POSITION = 102, 108, 112, 116
STATE_BLOCK = (126, 10)  # Present Current (126, 2), Present Velocity (128, 4), Present Position (132, 4)

DRIVE_REVERSE, DRIVE_TIME_BASED_PROFILE = 0x01, 0x04
MODE_POSITION, MODE_CURRENT_BASED_POSITION = 3, 5
ERRBIT_ALERT = 0x80
HARDWARE_ERROR_BITS = {0x01: "input voltage", 0x04: "overheating", 0x08: "motor encoder",
                       0x10: "electrical shock", 0x20: "overload"}

CENTER_TICKS = 2048
RAD_PER_TICK = 2.0 * math.pi / 4096
RAD_S_PER_VELOCITY_UNIT = 0.229 * 2.0 * math.pi / 60.0
AMPERE_PER_CURRENT_UNIT = 0.00269
BAUD_RATES = (9600, 57600, 115200, 1_000_000, 2_000_000, 3_000_000, 4_000_000)  # X series and the SDK both
REBOOT_TIMEOUT_S = 2.0  # how long a rebooted servo may take to answer again
PING_ATTEMPTS = 2
READ_POLL_S = 0.001  # longest wait for a byte before the SDK looks at its packet timeout again
SYSFS_LATENCY = "/sys/bus/usb-serial/devices/{}/latency_timer"


def _read_window_ms(baud: int, latency_ms: float) -> float:
    """How long the SDK waits for the nine status packets of one state read."""
    status_bytes = (11 + STATE_BLOCK[1]) * len(MOTORS)
    return status_bytes * 10_000.0 / baud + 2.0 * latency_ms + 2.0


@dataclass(frozen=True)
class AlohaSettings:
    """The `aloha:` settings (config/robots/aloha.yaml, driver parameters `aloha.<key>`)."""

    left_port: str = "/dev/ttyDXL_follower_left"
    right_port: str = "/dev/ttyDXL_follower_right"
    baud: int = 1_000_000
    left_ids: tuple[int, ...] = DEFAULT_IDS  # in MOTORS order
    right_ids: tuple[int, ...] = DEFAULT_IDS
    left_offsets: tuple[float, ...] = (0.0,) * 6  # rad, added to each servo angle, ARM_JOINTS order
    right_offsets: tuple[float, ...] = (0.0,) * 6
    gripper_closed_rad: float = -0.6213  # servo angle at the smallest opening
    gripper_open_rad: float = 1.4910  # servo angle at the largest opening
    gripper_goal_current: int = 200  # Goal Current units of 2.69 mA: 538 mA
    profile_velocity: int = 0  # 0.229 rev/min units; 0: no profile, the Velocity Limit bounds the speed
    profile_acceleration: int = 0  # 214.577 rev/min^2 units; 0: no bound
    latency_timer_ms: float = 16.0  # the adapter's latency timer where sysfs does not tell it
    link_timeout_s: float = 0.05

    @classmethod
    def parse(cls, settings: Mapping[str, Any]) -> "AlohaSettings":
        """Validate; a bad value raises HardwareError naming `aloha.<key>` and what was expected."""
        # ROS parameters hand integer arrays over as array.array.
        data = {k: list(v) if isinstance(v, (array.array, tuple)) else v for k, v in settings.items()}
        try:
            section = Section(data, "driver parameters", "aloha")
            section.reject_unknown(f.name for f in fields(cls))
            values: dict[str, Any] = {}
            for side in SIDES:
                values[f"{side}_port"] = section.string(f"{side}_port", getattr(cls, f"{side}_port"))
                values[f"{side}_ids"] = cls._ids(section, f"{side}_ids")
                offsets = section.vector(f"{side}_offsets", 6, list(cls.left_offsets))
                if any(abs(v) > math.pi for v in offsets):
                    raise section.error(f"{side}_offsets", "6 offsets in radians, each within [-pi, pi]", offsets)
                values[f"{side}_offsets"] = offsets
            if values["left_port"] == values["right_port"]:
                raise section.error("right_port", "a different serial port from aloha.left_port (one U2D2 per arm)",
                                    values["right_port"])
            baud = section.integer("baud", cls.baud)
            if baud not in BAUD_RATES:
                raise section.error("baud", "one of " + ", ".join(map(str, BAUD_RATES)) + " (Interbotix: 1000000)",
                                    baud)
            closed = section.number("gripper_closed_rad", cls.gripper_closed_rad, -2 * math.pi, 2 * math.pi)
            opened = section.number("gripper_open_rad", cls.gripper_open_rad, -2 * math.pi, 2 * math.pi)
            if abs(opened - closed) < 0.1:
                raise section.error("gripper_open_rad", "a servo angle at least 0.1 rad away from "
                                    f"aloha.gripper_closed_rad ({closed})", opened)
            current = section.integer("gripper_goal_current", cls.gripper_goal_current, minimum=1)
            if current > 1193:
                raise section.error("gripper_goal_current", "1 to 1193 (the XM430-W350's Current Limit range, "
                                    "2.69 mA units)", current)
            profile = {}
            for key in ("profile_velocity", "profile_acceleration"):
                profile[key] = section.integer(key, getattr(cls, key), minimum=0)
                if profile[key] > 32767:
                    raise section.error(key, "an integer from 0 to 32767", profile[key])
            latency = section.number("latency_timer_ms", cls.latency_timer_ms, minimum=1.0, maximum=255.0)
            link_timeout = section.number("link_timeout_s", cls.link_timeout_s, minimum=0.01, maximum=0.1)
            window = _read_window_ms(baud, latency)
            if window > 1000.0 * link_timeout:
                raise section.error("latency_timer_ms", f"a latency timer whose reply window (2 x latency + 2 ms "
                                    f"+ transfer = {window:.0f} ms) fits in aloha.link_timeout_s "
                                    f"({1000 * link_timeout:.0f} ms); set the U2D2's latency timer to 1 ms",
                                    latency)
            return cls(**values, baud=baud, gripper_closed_rad=closed, gripper_open_rad=opened,
                       gripper_goal_current=current, **profile, latency_timer_ms=latency, link_timeout_s=link_timeout)
        except ConfigError as error:
            raise HardwareError(str(error)) from None

    @staticmethod
    def _ids(section: Section, key: str) -> tuple[int, ...]:
        ids = section.raw(key, list(DEFAULT_IDS))
        expected = f"9 distinct servo ids from 0 to 252, in the order {', '.join(MOTORS)}"
        ok = (isinstance(ids, list) and len(ids) == len(MOTORS) and len(set(ids)) == len(ids)
              and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= 252 for i in ids))
        if not ok:
            raise section.error(key, expected, ids)
        return tuple(ids)


@dataclass(frozen=True)
class _Motor:
    """One servo's identity and EEPROM, as on_configure() found them."""

    name: str
    id: int
    firmware: int
    drive_mode: int
    operating_mode: int
    secondary_id: int
    current_limit: int
    min_ticks: int
    max_ticks: int


def _import_sdk():
    try:
        import dynamixel_sdk
    except ImportError as exc:
        raise HardwareError(f"backend aloha needs ROBOTIS' Dynamixel SDK, which is not installed ({exc}): "
                            f"pip install {SDK_PACKAGE} pyserial, or the project's drivers extra: "
                            "pip install .[drivers]") from exc
    return dynamixel_sdk


@functools.cache
def _port_class(port_handler: type) -> type:
    """The SDK's PortHandler, waiting for status packets as long as this adapter's latency timer
    needs, and waiting for bytes in the kernel rather than on the CPU."""

    class LatencyAwarePort(port_handler):
        latency_ms = 16.0

        def setPacketTimeout(self, packet_length):
            # The SDK computes this with the FTDI default of 16 ms whatever the adapter is set to.
            self.packet_start_time = self.getCurrentTime()
            self.packet_timeout = self.tx_time_per_byte * packet_length + 2.0 * self.latency_ms + 2.0

        def readPort(self, length):
            # The SDK polls this in a loop until a packet is complete or times out; sleeping in
            # select() until a byte arrives (at most READ_POLL_S) keeps that loop off the CPU.
            if not self.ser.in_waiting:
                select.select([self.ser.fileno()], [], [], READ_POLL_S)
            return super().readPort(length)

    return LatencyAwarePort


def _latency_from_sysfs(port: str) -> float | None:
    """The latency timer of the USB serial adapter behind `port` (a udev symlink), if sysfs has it."""
    device = os.path.basename(os.path.realpath(port))
    try:
        with open(SYSFS_LATENCY.format(device)) as f:
            return float(f.read().strip())
    except (OSError, ValueError):
        return None


def _hardware_error_text(bits: int) -> str:
    names = [name for bit, name in HARDWARE_ERROR_BITS.items() if bits & bit]
    unknown = bits & ~sum(HARDWARE_ERROR_BITS)
    if unknown:
        names.append(f"unknown bits 0x{unknown:02x}")
    return ", ".join(names)


def _signed(data, start: int, size: int) -> int:
    return int.from_bytes(bytes(data[start:start + size]), "little", signed=True)


def _unsigned(data, start: int, size: int) -> int:
    return int.from_bytes(bytes(data[start:start + size]), "little", signed=False)


class _Arm:
    """One follower's bus: everything said to its nine servos goes through here."""

    def __init__(self, sdk, side: str, config: AlohaSettings):
        self.sdk = sdk
        self.side = side
        self.config = config
        self.path = getattr(config, f"{side}_port")
        self.ids = dict(zip(MOTORS, getattr(config, f"{side}_ids")))
        self.names = {dxl_id: name for name, dxl_id in self.ids.items()}
        self.offsets = np.array(getattr(config, f"{side}_offsets"))
        self.packets = sdk.PacketHandler(2.0)
        self.port = None
        self.latency_ms = config.latency_timer_ms
        self.latency_source = "setting"
        self.motors: dict[str, _Motor] = {}
        self.goal_writer = None
        self.explicit_shadows: tuple[str, ...] = ()  # shadows whose Secondary ID does not follow the primary
        self.faults: dict[int, int] = {}  # id -> Hardware Error Status bits, seen in a state read
        self.rebooted: dict[int, int] = {}  # id -> the hardware error a reboot cleared while configuring
        self.gripper_sent: int | None = None  # the gripper goal last written, ticks
        self.gripper_current: int | None = None  # the gripper's Goal Current last written, 2.69 mA units
        self.raw: dict[int, tuple[int, int, int]] = {}  # id -> (current, velocity, position) units

    @property
    def label(self) -> str:
        return f"{self.side} arm ({self.path})"

    def servo(self, dxl_id: int) -> str:
        return f"{self.label} id {dxl_id} ({self.names[dxl_id]})"

    @contextlib.contextmanager
    def port_errors(self, what: str) -> Iterator[None]:
        """The port itself failing (the U2D2 unplugged, the device gone) is a lost link."""
        try:
            yield
        except _PORT_ERRORS as exc:
            kind = type(exc).__name__
            kind = f"{type(exc).__module__}.{kind}" if kind == "error" else kind  # termios.error
            raise LinkLost(f"aloha: {self.label}: {what} failed, the serial port is gone ({kind}: {exc})") from exc

    # -- opening and configuring ------------------------------------------------------------------
    def open(self) -> None:
        latency = _latency_from_sysfs(self.path)
        if latency is not None:
            self.latency_ms, self.latency_source = latency, "sysfs"
        window = _read_window_ms(self.config.baud, self.latency_ms)
        if window > 1000.0 * self.config.link_timeout_s:
            raise HardwareError(f"aloha: {self.label}: the adapter's latency timer is {self.latency_ms:g} ms, so a "
                                f"state read may wait {window:.0f} ms, more than aloha.link_timeout_s "
                                f"({1000 * self.config.link_timeout_s:.0f} ms): set it to 1 ms "
                                "(docs/hardware/aloha.md, U2D2 latency timer)")
        port = _port_class(self.sdk.PortHandler)(self.path)
        port.latency_ms = self.latency_ms
        try:
            port.openPort()
        except _PORT_ERRORS as exc:
            raise LinkLost(f"aloha: cannot open {self.path} for the {self.side} arm ({exc}); is its U2D2 plugged in "
                           "and the udev rule installed (docs/hardware/aloha.md)?") from exc
        self.port = port
        with self.port_errors("setting the baud rate"):
            if not port.setBaudRate(self.config.baud):
                raise HardwareError(f"aloha: {self.label}: the SDK cannot set {self.config.baud} baud")
        self.goal_writer = self.sdk.GroupSyncWrite(port, self.packets, ADDR_GOAL_POSITION, 4)

    def close(self) -> None:
        port, self.port = self.port, None
        if port is not None:
            with contextlib.suppress(*_PORT_ERRORS):
                port.closePort()

    def configure(self) -> None:
        """Identify the servos, clear latched hardware errors, set modes, profiles and the gripper's
        current; EEPROM is written only where it differs and only with that servo's torque off."""
        with self.port_errors("configuring the servos"):
            self._probe()
            torque = self._clear_hardware_errors()
            self.motors = {name: self._read_eeprom(name) for name in MOTORS}
            for motor in self.motors.values():
                self._check_drive_direction(motor)
                self._set_eeprom(motor, torque[motor.id])
            self._set_ram()
            self.explicit_shadows = tuple(shadow for shadow, primary in SHADOW_OF.items()
                                          if self.motors[shadow].secondary_id != self.ids[primary])
            self.faults.clear()
            self.gripper_sent = None

    def _probe(self) -> None:
        missing, wrong = [], []
        for name, dxl_id in self.ids.items():
            for _ in range(PING_ATTEMPTS):  # one lost packet is noise, not a missing servo
                model, result, _ = self.packets.ping(self.port, dxl_id)
                if result == self.sdk.COMM_SUCCESS:
                    break
            if result != self.sdk.COMM_SUCCESS:
                missing.append(f"id {dxl_id} ({name}): {self.packets.getTxRxResult(result)}")
            elif model != EXPECTED_MODEL[name]:
                wrong.append(f"id {dxl_id} ({name}) is a {MODEL_NAMES.get(model, 'unknown model')} (model number "
                             f"{model}), expected a {MODEL_NAMES[EXPECTED_MODEL[name]]} ({EXPECTED_MODEL[name]})")
        if len(missing) == len(MOTORS):
            raise LinkLost(f"aloha: no servo answers on {self.path} ({self.side} arm) at {self.config.baud} baud: "
                           "check the arm's 12 V supply, the cable from the U2D2 and the servos' baud rate")
        if missing:
            raise HardwareError(f"aloha: {self.label}: no answer from {'; '.join(missing)}; the others answer: check "
                                f"aloha.{self.side}_ids (expected ids in the order {', '.join(MOTORS)}) and the "
                                "servo cables")
        if wrong:
            raise HardwareError(f"aloha: {self.label}: {'; '.join(wrong)}; ALOHA's follower is a ViperX 300 6DOF "
                                "(XM540-W270 for waist to wrist_angle, XM430-W350 for wrist_rotate and gripper)")

    def _clear_hardware_errors(self) -> dict[int, bool]:
        """Reboot servos with a latched hardware error (a reboot is the only way to clear one);
        returns each id's torque state."""
        torque_at, error_at = ADDR_TORQUE_ENABLE - RAM_STATUS_BLOCK[0], ADDR_HARDWARE_ERROR - RAM_STATUS_BLOCK[0]
        status = {dxl_id: self._read(dxl_id, *RAM_STATUS_BLOCK) for dxl_id in self.ids.values()}
        latched = {dxl_id: data[error_at] for dxl_id, data in status.items() if data[error_at]}
        for dxl_id in latched:
            self._check(self.packets.reboot(self.port, dxl_id), dxl_id, "reboot")
        for dxl_id in latched:
            self._wait_for(dxl_id)
            still = self._read(dxl_id, ADDR_HARDWARE_ERROR, 1)[0]
            if still:
                raise HardwareError(f"aloha: {self.servo(dxl_id)} reports a hardware error "
                                    f"({_hardware_error_text(still)}) even after a reboot: check its supply voltage, "
                                    "temperature and load")
            status[dxl_id] = self._read(dxl_id, *RAM_STATUS_BLOCK)
        self.rebooted.update(latched)
        return {dxl_id: bool(data[torque_at]) for dxl_id, data in status.items()}

    def _wait_for(self, dxl_id: int) -> None:
        deadline = time.monotonic() + REBOOT_TIMEOUT_S
        while self.packets.ping(self.port, dxl_id)[1] != self.sdk.COMM_SUCCESS:
            if time.monotonic() > deadline:
                raise LinkLost(f"aloha: {self.servo(dxl_id)} did not answer within {REBOOT_TIMEOUT_S:g} s of a reboot")
            time.sleep(0.01)

    def _read_eeprom(self, name: str) -> _Motor:
        dxl_id = self.ids[name]
        start, length = EEPROM_BLOCK
        data = self._read(dxl_id, start, length)
        return _Motor(name=name, id=dxl_id, firmware=data[ADDR_FIRMWARE - start],
                      drive_mode=data[ADDR_DRIVE_MODE - start], operating_mode=data[ADDR_OPERATING_MODE - start],
                      secondary_id=data[ADDR_SECONDARY_ID - start],
                      current_limit=_unsigned(data, ADDR_CURRENT_LIMIT - start, 2),
                      min_ticks=_signed(data, ADDR_MIN_POSITION_LIMIT - start, 4),
                      max_ticks=_signed(data, ADDR_MAX_POSITION_LIMIT - start, 4))

    def _check_drive_direction(self, motor: _Motor) -> None:
        reversed_ = bool(motor.drive_mode & DRIVE_REVERSE)
        if reversed_ != (motor.name in REVERSED):
            raise HardwareError(
                f"aloha: {self.servo(motor.id)} has Drive Mode 0x{motor.drive_mode:02x}: its reverse bit should be "
                f"{int(motor.name in REVERSED)}, as in Interbotix's vx300s motor config, or the joint turns the wrong "
                "way; write that config (Interbotix's driver with load_configs, or Dynamixel Wizard)")

    def _set_eeprom(self, motor: _Motor, torque_on: bool) -> None:
        mode = MODE_CURRENT_BASED_POSITION if motor.name == GRIPPER else MODE_POSITION
        changes = []
        if motor.operating_mode != mode:
            changes.append((ADDR_OPERATING_MODE, mode, f"Operating Mode {motor.operating_mode} -> {mode}"))
        if motor.drive_mode & DRIVE_TIME_BASED_PROFILE:  # ALOHA runs velocity-based profiles
            drive = motor.drive_mode & ~DRIVE_TIME_BASED_PROFILE
            changes.append((ADDR_DRIVE_MODE, drive, f"Drive Mode 0x{motor.drive_mode:02x} -> 0x{drive:02x}"))
        if changes and torque_on:
            raise HardwareError(f"aloha: {self.servo(motor.id)} needs {', '.join(c[2] for c in changes)}, which "
                                "needs its torque off and would drop the arm; support the arm, turn the torque off "
                                "(or power-cycle it) and connect again")
        for address, value, what in changes:
            self._check(self.packets.write1ByteTxRx(self.port, motor.id, address, value), motor.id, what)

    def _set_ram(self) -> None:
        gripper = self.motors[GRIPPER]
        if self.config.gripper_goal_current > gripper.current_limit:
            raise HardwareError(f"aloha.gripper_goal_current ({self.config.gripper_goal_current}) exceeds the Current "
                                f"Limit (38) of {self.servo(gripper.id)}, {gripper.current_limit}: lower the setting "
                                "or raise the limit with Dynamixel Wizard")
        for dxl_id in self.ids.values():
            for address, value, what in ((ADDR_PROFILE_ACCELERATION, self.config.profile_acceleration,
                                          "Profile Acceleration"),
                                         (ADDR_PROFILE_VELOCITY, self.config.profile_velocity, "Profile Velocity")):
                self._check(self.packets.write4ByteTxRx(self.port, dxl_id, address, value), dxl_id, what)
        self._check(self.packets.write2ByteTxRx(self.port, gripper.id, ADDR_GOAL_CURRENT,
                                                self.config.gripper_goal_current), gripper.id, "Goal Current")
        self.gripper_current = self.config.gripper_goal_current

    def torque_on(self) -> None:
        with self.port_errors("turning the torque on"):
            for dxl_id in self.ids.values():
                self._check(self.packets.write1ByteTxRx(self.port, dxl_id, ADDR_TORQUE_ENABLE, 1), dxl_id,
                            "Torque Enable = 1")

    def _read(self, dxl_id: int, address: int, length: int) -> list[int]:
        data, result, error = self.packets.readTxRx(self.port, dxl_id, address, length)
        self._check((result, error), dxl_id, f"reading {length} bytes at {address}")
        return data

    def _check(self, outcome: tuple[int, int], dxl_id: int, what: str) -> None:
        result, error = outcome
        if result != self.sdk.COMM_SUCCESS:
            raise LinkLost(f"aloha: {self.servo(dxl_id)}: {what}: {self.packets.getTxRxResult(result)}")
        if error & ~ERRBIT_ALERT:  # the Alert bit alone only says a hardware error is latched
            raise HardwareError(f"aloha: {self.servo(dxl_id)}: {what} refused: "
                                f"{self.packets.getRxPacketError(error & ~ERRBIT_ALERT)}")

    # -- the control cycle -------------------------------------------------------------------------
    def request_state(self) -> None:
        with self.port_errors("the state read"):
            ids = list(self.ids.values())
            result = self.packets.syncReadTx(self.port, *STATE_BLOCK, ids, len(ids), False)
        if result != self.sdk.COMM_SUCCESS:
            raise LinkLost(f"aloha: {self.label}: sending the state read failed: {self.packets.getTxRxResult(result)}")

    def receive_state(self) -> list[int]:
        """Collect the status packets of request_state(); returns ids whose Alert bit is newly set."""
        alerts = []
        with self.port_errors("the state read"):
            for dxl_id in self.ids.values():
                data, result, error = self.packets.readRx(self.port, dxl_id, STATE_BLOCK[1])
                if result != self.sdk.COMM_SUCCESS:
                    raise LinkLost(f"aloha: {self.servo(dxl_id)} did not answer the state read: "
                                   f"{self.packets.getTxRxResult(result)}")
                self.raw[dxl_id] = (_signed(data, 0, 2), _signed(data, 2, 4), _signed(data, 6, 4))
                if error & ERRBIT_ALERT and dxl_id not in self.faults:
                    alerts.append(dxl_id)
        return alerts

    def read_hardware_error(self, dxl_id: int) -> None:
        with self.port_errors("reading Hardware Error Status"):
            self.faults[dxl_id] = self._read(dxl_id, ADDR_HARDWARE_ERROR, 1)[0]

    def joint_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Arm joints in ARM_JOINTS order: (rad, rad/s, N m estimated from current)."""
        position, velocity, effort = np.empty(6), np.empty(6), np.zeros(6)
        for i, joint in enumerate(ARM_JOINTS):
            _, units, ticks = self.raw[self.ids[joint]]
            position[i] = (ticks - CENTER_TICKS) * RAD_PER_TICK + self.offsets[i]
            velocity[i] = units * RAD_S_PER_VELOCITY_UNIT
            for motor in JOINT_MOTORS[joint]:
                current = self.raw[self.ids[motor]][0] * AMPERE_PER_CURRENT_UNIT
                effort[i] += current * NM_PER_AMPERE[EXPECTED_MODEL[motor]]
        return position, velocity, effort

    def gripper_state(self) -> tuple[float, float]:
        """The gripper servo's (angle, angular velocity): rad, rad/s."""
        _, units, ticks = self.raw[self.ids[GRIPPER]]
        return (ticks - CENTER_TICKS) * RAD_PER_TICK, units * RAD_S_PER_VELOCITY_UNIT

    def send_goals(self, joints: np.ndarray, gripper_angle: float | None, gripper_current: int | None = None) -> None:
        """Goal Position for the arm (ARM_JOINTS order, rad) and, when given and changed, the
        gripper's Goal Current (its grip) and Goal Position."""
        if gripper_current is not None and gripper_current != self.gripper_current:
            gripper = self.motors[GRIPPER].id
            with self.port_errors("the gripper's Goal Current write"):
                self._check(self.packets.write2ByteTxRx(self.port, gripper, ADDR_GOAL_CURRENT, gripper_current),
                            gripper, "Goal Current")
            self.gripper_current = gripper_current
        writer = self.goal_writer
        writer.clearParam()
        ticks = {joint: CENTER_TICKS + (q - offset) / RAD_PER_TICK
                 for joint, q, offset in zip(ARM_JOINTS, joints, self.offsets)}
        ticks.update({shadow: ticks[SHADOW_OF[shadow]] for shadow in self.explicit_shadows})
        for name, goal in ticks.items():
            motor = self.motors[name]
            # Position mode refuses goals beyond the EEPROM limits; a sync write would drop them silently.
            goal = int(np.clip(np.rint(goal), motor.min_ticks, motor.max_ticks))
            writer.addParam(motor.id, list(goal.to_bytes(4, "little", signed=True)))
        gripper = None
        if gripper_angle is not None:
            gripper = round(CENTER_TICKS + gripper_angle / RAD_PER_TICK)
            if gripper != self.gripper_sent:
                writer.addParam(self.ids[GRIPPER], list(gripper.to_bytes(4, "little", signed=True)))
        with self.port_errors("the goal write"):
            result = writer.txPacket()
        if result != self.sdk.COMM_SUCCESS:
            raise LinkLost(f"aloha: {self.label}: the goal write failed: {self.packets.getTxRxResult(result)}")
        if gripper is not None:
            self.gripper_sent = gripper

    def facts(self) -> dict[str, Any]:
        prefix = self.side
        facts = {f"{prefix}_port": self.path,
                 f"{prefix}_latency_timer_ms": f"{self.latency_ms:g} ({self.latency_source})"}
        if self.motors:
            facts[f"{prefix}_firmware"] = ",".join(sorted({str(m.firmware) for m in self.motors.values()}))
            facts[f"{prefix}_shadows"] = ("written with their primaries: " + ", ".join(self.explicit_shadows)
                                          if self.explicit_shadows else "follow their primaries (Secondary ID)")
        if self.gripper_current is not None:
            facts[f"{prefix}_gripper_goal_current"] = self.gripper_current
        return facts


class AlohaHardware(Hardware):
    backend = "aloha"

    def __init__(self, robot: RobotSpec, settings: Mapping[str, Any] | None = None):
        super().__init__(robot, settings)
        self.config = AlohaSettings.parse(self.settings)
        self.link_timeout_s = self.config.link_timeout_s
        self._names = robot.joint_names + robot.gripper_joint_names
        self._joint_index, self._finger_index, self._gripper_slot, self._grippers = self._map_robot(robot)
        self._arms: tuple[_Arm, ...] = ()
        self._lock = threading.RLock()  # the driver's services call reset() beside the control loop
        self._link_lost = ""
        self._wants_active = False

    @staticmethod
    def _map_robot(robot: RobotSpec):
        """Per arm: where its joints and fingers sit in the sample, its gripper's place in
        robot.grippers, and the gripper."""
        names = robot.joint_names + robot.gripper_joint_names
        joint_index, finger_index, slot, grippers = {}, {}, {}, {}
        try:
            for side in SIDES:
                expected = tuple(f"{side}_{j}" for j in ARM_JOINTS)
                if sorted(robot.group(f"{side}_arm").joints) != sorted(expected):
                    raise KeyError(f"group {side}_arm")
                joint_index[side] = np.array([names.index(j) for j in expected])
                grippers[side] = robot.gripper(f"{side}_gripper")
                finger_index[side] = np.array([names.index(j) for j in grippers[side].joints])
                slot[side] = [g.name for g in robot.grippers].index(grippers[side].name)
        except KeyError:
            raise HardwareError(
                f"backend aloha drives ALOHA's two ViperX followers: groups left_arm and right_arm with joints "
                f"<side>_{', <side>_'.join(ARM_JOINTS)}, grippers left_gripper and right_gripper; robot {robot.name} "
                f"has groups {', '.join(robot.group_names)} and grippers "
                f"{', '.join(g.name for g in robot.grippers) or 'none'}") from None
        return joint_index, finger_index, slot, grippers

    # -- the lifecycle ---------------------------------------------------------------------------
    def on_configure(self) -> None:
        sdk = _import_sdk()
        with self._lock:
            self._close()
            self.state = Lifecycle.UNCONFIGURED
            self._link_lost = ""
            arms = tuple(_Arm(sdk, side, self.config) for side in SIDES)
            try:
                for arm in arms:
                    arm.open()
                    arm.configure()
                self._arms = arms
                self._read_state()
            except BaseException:
                for arm in arms:
                    arm.close()
                self._arms, self._link_lost, self.state = (), "", Lifecycle.UNCONFIGURED
                raise
            self.state = Lifecycle.INACTIVE

    def on_activate(self) -> None:
        with self._lock:
            if self.state is Lifecycle.ACTIVE:
                return
            self._require_usable("on_activate()")
            for arm in self._arms:
                self._on_link(arm.torque_on)
            self._wants_active = True
            self.state = Lifecycle.ACTIVE

    def on_deactivate(self) -> None:
        """Stop taking setpoints; the torque stays on and the arms hold their last goal."""
        with self._lock:
            if self.state is Lifecycle.ACTIVE:
                self._wants_active = False
                self.state = Lifecycle.INACTIVE

    def on_cleanup(self) -> None:
        """Close both ports; the servos keep their torque and hold their last goal."""
        with self._lock:
            self._close()
            self._wants_active = False
            self.state = Lifecycle.FINALIZED

    def reset(self) -> None:
        """Reboot the servos that reported a hardware error (the only way to clear one), set them
        up again and, if the arms were active, turn their torque back on. Nothing moves: a
        rebooted servo holds where it is once its torque is on, and the driver streams the way home."""
        with self._lock:
            self._require_link("reset()")
            faulted = [arm for arm in self._arms if arm.faults]
            if not faulted:
                return
            for arm in faulted:
                self._on_link(arm.configure)
                if self._wants_active:
                    self._on_link(arm.torque_on)
            self.state = Lifecycle.ACTIVE if self._wants_active else Lifecycle.INACTIVE

    # -- the control cycle -------------------------------------------------------------------------
    def read(self) -> JointSample:
        with self._lock:
            self._require_link("read()")
            return self._read_state()

    def write(self, command: JointCommand, gripper_openings: np.ndarray,
              gripper_forces: np.ndarray | None = None) -> None:
        with self._lock:
            self._require_link("write()")
            fault = self._fault()
            if fault:
                raise HardwareError(f"aloha: {fault}; reset() reboots the servo")
            if self.state is not Lifecycle.ACTIVE:
                raise HardwareError(f"aloha: write() while {self.state.value}; activate it first (on_activate)")
            if command.names != self.robot.joint_names:
                raise HardwareError(f"aloha: setpoints for {', '.join(command.names)}; expected "
                                    f"{', '.join(self.robot.joint_names)}")
            for arm in self._arms:
                angle = current = None
                if len(gripper_openings):
                    slot = self._gripper_slot[arm.side]
                    angle = self._opening_to_angle(arm.side, float(gripper_openings[slot]))
                    share = grip_share(gripper_forces, slot, self._grippers[arm.side].max_force)
                    current = self._grip_current(share)
                self._on_link(arm.send_goals, command.position[self._joint_index[arm.side]], angle, current)

    def _grip_current(self, share: float) -> int:
        """The Goal Current for a grip at `share` of the gripper's max_force: a servo's torque
        follows its current, so the configured Goal Current stands for max_force (no calibrated
        finger force: an approximation, docs/hardware/aloha.md)."""
        return max(1, round(self.config.gripper_goal_current * share))

    def describe(self) -> dict[str, Any]:
        with self._lock:
            facts = {**super().describe(), "baud": self.config.baud, "link_timeout_s": self.link_timeout_s,
                     "control": "arm: position control (3), Goal Position sync-written each cycle; gripper: "
                                f"current-based position (5), Goal Current {self.config.gripper_goal_current} "
                                f"({self.config.gripper_goal_current * AMPERE_PER_CURRENT_UNIT * 1000:.0f} mA) "
                                "for the gripper's max_force, scaled down for a smaller max_effort",
                     "effort": "N m estimated from Present Current (stall torque / stall current)"}
            if not self._arms:
                facts.update({f"{side}_port": getattr(self.config, f"{side}_port") for side in SIDES})
            for arm in self._arms:
                facts.update(arm.facts())
            rebooted = [f"{arm.servo(i)}: {_hardware_error_text(bits)}" for arm in self._arms
                        for i, bits in arm.rebooted.items()]
            if rebooted:
                facts["hardware_errors_cleared"] = "; ".join(rebooted) + " (cleared by a reboot)"
            fault = self._fault()
            if fault:
                facts["fault"] = fault
            if self._link_lost:
                facts["link_lost"] = self._link_lost
            return facts

    # -- helpers -----------------------------------------------------------------------------------
    def _read_state(self) -> JointSample:
        stamp = self.now  # the servos sample when the read instruction reaches them
        for arm in self._arms:  # both buses answer at once: the read costs one bus's time
            self._on_link(arm.request_state)
        alerts = [(arm, dxl_id) for arm in self._arms for dxl_id in self._on_link(arm.receive_state)]
        for arm, dxl_id in alerts:
            self._on_link(arm.read_hardware_error, dxl_id)
        if alerts:
            self.state = Lifecycle.ERROR
        n = len(self._names)
        position, velocity, effort = np.empty(n), np.empty(n), np.full(n, math.nan)
        for arm in self._arms:
            index = self._joint_index[arm.side]
            position[index], velocity[index], effort[index] = arm.joint_state()
            opening, rate = self._angle_to_opening(arm.side, *arm.gripper_state())
            fingers = self._finger_index[arm.side]
            position[fingers], velocity[fingers] = opening / len(fingers), rate / len(fingers)
        return JointSample(stamp, self._names, position, velocity, effort)

    def _opening_to_angle(self, side: str, opening: float) -> float:
        lo, hi = self._grippers[side].opening_range
        share = float(np.clip((opening - lo) / (hi - lo), 0.0, 1.0))
        closed, opened = self.config.gripper_closed_rad, self.config.gripper_open_rad
        return closed + share * (opened - closed)

    def _angle_to_opening(self, side: str, angle: float, rate: float) -> tuple[float, float]:
        """(opening m, opening rate m/s); the opening is clipped to the gripper's range."""
        lo, hi = self._grippers[side].opening_range
        closed, opened = self.config.gripper_closed_rad, self.config.gripper_open_rad
        slope = (hi - lo) / (opened - closed)
        return float(np.clip(lo + (angle - closed) * slope, lo, hi)), rate * slope

    def _on_link(self, call, *args):
        """Run one bus operation; a lost link is remembered until on_configure()."""
        try:
            return call(*args)
        except LinkLost as error:
            self._link_lost = str(error)
            self.state = Lifecycle.ERROR
            raise

    def _fault(self) -> str:
        return "; ".join(f"{arm.servo(i)} reports a hardware error: {_hardware_error_text(bits)}"
                         for arm in self._arms for i, bits in arm.faults.items())

    def _require_link(self, what: str) -> None:
        if self._link_lost:
            raise LinkLost(f"aloha: {what}: the link is lost ({self._link_lost}); connect again (on_configure)")
        if not self._arms:
            raise HardwareError(f"aloha: {what} before connecting; connect first (on_configure)")

    def _require_usable(self, what: str) -> None:
        self._require_link(what)
        fault = self._fault()
        if fault:
            raise HardwareError(f"aloha: {what}: {fault}; reset() reboots the servo first")

    def _close(self) -> None:
        arms, self._arms = self._arms, ()
        for arm in arms:
            arm.close()
