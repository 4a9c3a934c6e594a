"""Dynamixel Protocol 2.0 servo emulator on a pseudo-terminal.

The emulator lets the real ``dynamixel_sdk`` (``PortHandler`` + ``PacketHandler(2.0)``)
talk to simulated X-series servos without hardware, so the ALOHA hardware backend can be
tested end to end: packets, CRC, byte stuffing, control-table rules, motion, and faults
(port vanishing, cable pulled, CRC noise).

Layout of this module:

* packet layer: CRC-16 (polynomial 0x8005), byte stuffing, packet builders;
* control tables of XM430-W350 (1020), XM540-W270 (1120) and XL430-W250 (1060);
* :class:`EmulatedServo`: control table + access rules + a light motion model;
* :func:`viperx_follower` / :func:`widowx_leader`: ALOHA arms as Interbotix configures them;
* :class:`DynamixelBus`: the servos behind a pty, served by a background thread, reached
  through a stable symlink chosen by the caller.

Usage (from the repository root)::

    from tests.emulators.dynamixel_emulator import DynamixelBus, viperx_follower

    with DynamixelBus("/tmp/dxl/ttyDXL0", viperx_follower()) as bus:
        port = dynamixel_sdk.PortHandler("/tmp/dxl/ttyDXL0")  # the SDK, unmodified
        ...
        bus.servo(9).present_position, bus.servo(9).set_obstacle(2300), bus.unplug()

    $ python -m tests.emulators.dynamixel_emulator --link /tmp/dxl/ttyDXL0 --arm viperx

Behaviour that is a deliberate choice (the e-manual does not pin it down, or fidelity
would cost more than it buys in tests):

* Status packets are sent as soon as the instruction is parsed; Return Delay Time (9) is
  stored but not waited for. Broadcast ping answers come back in id order.
* Sync/bulk read answers come in the order the ids are listed; listed ids that are absent
  are skipped (the SDK then times out for exactly those ids).
* A read that fails (range past the end of the table) answers with its error byte *and*
  zero-filled data of the requested length, so ``read4ByteTxRx`` does not crash on it.
* Reserved addresses read as 0; writing to them is an Access Error. Writing part of a
  multi-byte item is a Data Length Error. A value outside an item's fixed range is a Data
  Range Error; a goal outside a limit held in another register (position/velocity/
  current/PWM limit) is a Data Limit Error. A packet with any bad item changes nothing.
* Secondary (shadow) id is implemented as the e-manual describes: a servo also executes
  write, reg write, action, sync write and bulk write addressed to its secondary id, only
  in the RAM area, and never answers them. The ViperX/WidowX factories configure ids 3
  and 5 with secondary ids 2 and 4 exactly like Interbotix's ALOHA configs, so writing
  the primary id moves both motors; writing ids 3/5 directly works too. There is no
  shared mechanism between the two motors: each tracks its own goal, and the Drive Mode
  reverse bit is stored but does not mirror positions (only the relation to a physical
  joint would change, and that is not modelled).
* Motion: when torque is on in position modes (3, 4, 5) the position moves toward the
  goal with a speed bound (Profile Velocity, or the Velocity Limit when the profile is 0,
  or ``DEFAULT_SPEED_RAD_S`` when both are 0) and an acceleration bound (Profile
  Acceleration, 0 = unbounded); the time-based profile (Drive Mode bit 2) is honoured.
  Velocity mode (1) follows Goal Velocity; current (0) and PWM (16) modes spin at a speed
  proportional to the goal (no-load motor). An optional obstacle blocks motion; while the
  servo pushes on it, Present Current rises toward Goal Current (mode 5) or the Current
  Limit. Time comes from ``time.monotonic()`` and the state is advanced lazily whenever a
  packet or an inspection needs it, which is exact for this model and costs nothing idle.
* On torque-on, Goal Position is set to Present Position (the servo holds where it is).
  Rebooting drops the multi-turn count (position folds into 0..4095), resets RAM to its
  defaults (torque off) and keeps EEPROM.
* Status Return Level (68) applies from the write that changes it: lowering it to 0 or 1
  means that very write is not answered.
* Bus Watchdog (98) counts from the last valid instruction packet heard on the bus.
* The servos only hear the client when its serial speed (read from the pty's termios)
  equals their Baud Rate (8) register; pass ``check_baud=False`` to disable.
* Fast sync/bulk read (0x8A/0x9A) answer with one combined packet, without byte stuffing
  (the SDK does not un-stuff fast packets).
"""

from __future__ import annotations

import argparse
import collections
import errno
import fcntl
import math
import os
import select
import signal
import struct
import sys
import termios
import threading
import time
import traceback
import tty
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence

# --------------------------------------------------------------------------------------
# Protocol constants
# --------------------------------------------------------------------------------------

HEADER = b"\xff\xff\xfd\x00"
BROADCAST_ID = 0xFE
MAX_ID = 0xFC
MAX_PACKET_LENGTH = 1024  # the LEN field; longer packets are treated as line noise

INST_PING = 0x01
INST_READ = 0x02
INST_WRITE = 0x03
INST_REG_WRITE = 0x04
INST_ACTION = 0x05
INST_FACTORY_RESET = 0x06
INST_REBOOT = 0x08
INST_CLEAR = 0x10
INST_STATUS = 0x55
INST_SYNC_READ = 0x82
INST_SYNC_WRITE = 0x83
INST_FAST_SYNC_READ = 0x8A
INST_BULK_READ = 0x92
INST_BULK_WRITE = 0x93
INST_FAST_BULK_READ = 0x9A

ERR_NONE = 0x00
ERR_RESULT_FAIL = 0x01
ERR_INSTRUCTION = 0x02
ERR_CRC = 0x03
ERR_DATA_RANGE = 0x04
ERR_DATA_LENGTH = 0x05
ERR_DATA_LIMIT = 0x06
ERR_ACCESS = 0x07
ERRBIT_ALERT = 0x80

# Baud Rate (8) register values of the X series.
BAUD_RATES = {0: 9_600, 1: 57_600, 2: 115_200, 3: 1_000_000, 4: 2_000_000,
              5: 3_000_000, 6: 4_000_000, 7: 4_500_000}
BAUD_CODES = {rate: code for code, rate in BAUD_RATES.items()}

# Hardware Error Status (70) bits.
HW_INPUT_VOLTAGE = 0x01
HW_OVERHEATING = 0x04
HW_MOTOR_ENCODER = 0x08
HW_ELECTRICAL_SHOCK = 0x10
HW_OVERLOAD = 0x20

GOAL_LOG_LENGTH = 100_000  # goals kept per servo for inspection: over half an hour at ALOHA's 50 Hz

# Operating Mode (11) values.
MODE_CURRENT = 0
MODE_VELOCITY = 1
MODE_POSITION = 3
MODE_EXTENDED_POSITION = 4
MODE_CURRENT_BASED_POSITION = 5
MODE_PWM = 16
POSITION_MODES = frozenset({MODE_POSITION, MODE_EXTENDED_POSITION, MODE_CURRENT_BASED_POSITION})

# Drive Mode (10) bits.
DRIVE_REVERSE = 0x01
DRIVE_DUAL_SLAVE = 0x02
DRIVE_TIME_BASED_PROFILE = 0x04
DRIVE_TORQUE_ON_BY_GOAL = 0x08

# --------------------------------------------------------------------------------------
# Units
# --------------------------------------------------------------------------------------

TICKS_PER_REV = 4096
CENTER_TICKS = 2048  # 0 rad
RAD_PER_TICK = 2.0 * math.pi / TICKS_PER_REV
VELOCITY_UNIT_TICKS_S = 0.229 * TICKS_PER_REV / 60.0   # 0.229 rev/min per unit
ACCEL_UNIT_TICKS_S2 = 214.577 * TICKS_PER_REV / 3600.0  # 214.577 rev/min^2 per unit
EXTENDED_POSITION_RANGE = 1_048_575
DEFAULT_SPEED_RAD_S = 3.0     # used when neither a profile nor a velocity limit bounds a move
CURRENT_TIME_CONSTANT_S = 0.03  # how fast present current follows its target
SPIN_TIME_CONSTANT_S = 0.05     # how fast the unloaded motor reaches speed in current/PWM mode
BUS_WATCHDOG_UNIT_S = 0.020
STALE_PARTIAL_PACKET_S = 0.1    # a partial packet older than this is noise (inter-byte timeout)

# --------------------------------------------------------------------------------------
# Packet layer
# --------------------------------------------------------------------------------------


def _make_crc_table(poly: int = 0x8005) -> tuple[int, ...]:
    """Table for the MSB-first CRC-16 with polynomial 0x8005 and initial value 0."""
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ poly) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC_TABLE = _make_crc_table()


def crc16(data: bytes | bytearray | Sequence[int], crc: int = 0) -> int:
    """Dynamixel Protocol 2.0 CRC over ``data`` (everything before the CRC field)."""
    table = _CRC_TABLE
    for byte in data:
        crc = ((crc << 8) ^ table[((crc >> 8) ^ byte) & 0xFF]) & 0xFFFF
    return crc


def stuff(body: bytes) -> bytes:
    """Insert an extra 0xFD after every FF FF FD in instruction+parameters, so that the
    header pattern can never appear inside a packet."""
    out = bytearray()
    for index, byte in enumerate(body):
        out.append(byte)
        if byte == 0xFD and index >= 2 and body[index - 1] == 0xFF and body[index - 2] == 0xFF:
            out.append(0xFD)
    return bytes(out)


def unstuff(body: bytes) -> bytes:
    """Undo :func:`stuff`: drop the 0xFD that follows each FF FF FD in the raw bytes."""
    out = bytearray()
    for index, byte in enumerate(body):
        if (byte == 0xFD and index >= 3 and body[index - 1] == 0xFD
                and body[index - 2] == 0xFF and body[index - 3] == 0xFF):
            continue
        out.append(byte)
    return bytes(out)


def build_packet(dxl_id: int, instruction: int, params: bytes = b"") -> bytes:
    """A complete packet (instruction or status): header, id, length, stuffed body, CRC.
    The length and the CRC both cover the stuffed body, as the protocol requires."""
    body = stuff(bytes([instruction]) + bytes(params))
    head = HEADER + bytes([dxl_id]) + struct.pack("<H", len(body) + 2)
    frame = head + body
    return frame + struct.pack("<H", crc16(frame))


def build_status(dxl_id: int, error: int, params: bytes = b"") -> bytes:
    return build_packet(dxl_id, INST_STATUS, bytes([error & 0xFF]) + bytes(params))


@dataclass(frozen=True)
class Packet:
    dxl_id: int
    instruction: int
    params: bytes


# --------------------------------------------------------------------------------------
# Control tables
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    name: str
    address: int
    size: int
    writable: bool
    eeprom: bool
    default: int = 0
    minimum: Optional[int] = None
    maximum: Optional[int] = None
    signed: bool = False


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_number: int
    firmware_version: int
    items: tuple[Item, ...]
    operating_modes: frozenset
    drive_mode_bits: int
    no_load_speed_rpm: float      # at 12 V, from the spec sheet
    has_current_sensor: bool      # XL430 reports Present Load (0.1 %) instead of current
    table_size: int = 662


INDIRECT_BLOCKS = ((168, 224, 28), (578, 634, 28))  # (first address slot, first data byte, count)


def _x_series_items(*, model_number: int, firmware: int, temperature_limit: int,
                    max_voltage: int, min_voltage: int, voltage_range: tuple[int, int],
                    current_limit: Optional[int], velocity_limit: int,
                    velocity_i: int, velocity_p: int, position_d: int, position_i: int,
                    position_p: int, external_ports: bool = False,
                    xl_extras: bool = False) -> tuple[Item, ...]:
    """Control table shared by the X-series models; per-model defaults are parameters."""
    e, r = True, False  # eeprom / ram
    items = [
        Item("model_number", 0, 2, False, e, model_number),
        Item("model_information", 2, 4, False, e, 0),
        Item("firmware_version", 6, 1, False, e, firmware),
        Item("id", 7, 1, True, e, 1, 0, 252),
        Item("baud_rate", 8, 1, True, e, 1, 0, 7),
        Item("return_delay_time", 9, 1, True, e, 250, 0, 254),
        Item("drive_mode", 10, 1, True, e, 0, 0, 255),
        Item("operating_mode", 11, 1, True, e, MODE_POSITION, 0, 255),
        Item("secondary_id", 12, 1, True, e, 255, 0, 255),
        Item("protocol_type", 13, 1, True, e, 2, 1, 2),
        Item("homing_offset", 20, 4, True, e, 0, -1_044_479, 1_044_479, signed=True),
        Item("moving_threshold", 24, 4, True, e, 10, 0, 1023),
        Item("temperature_limit", 31, 1, True, e, temperature_limit, 0, 100),
        Item("max_voltage_limit", 32, 2, True, e, max_voltage, *voltage_range),
        Item("min_voltage_limit", 34, 2, True, e, min_voltage, *voltage_range),
        Item("pwm_limit", 36, 2, True, e, 885, 0, 885),
    ]
    if current_limit is not None:
        items.append(Item("current_limit", 38, 2, True, e, current_limit, 0, current_limit))
    items += [
        Item("velocity_limit", 44, 4, True, e, velocity_limit, 0, 1023),
        Item("max_position_limit", 48, 4, True, e, 4095, 0, 4095),
        Item("min_position_limit", 52, 4, True, e, 0, 0, 4095),
    ]
    if external_ports:
        items += [Item(f"external_port_mode_{n}", 55 + n, 1, True, e, 3, 0, 3) for n in (1, 2, 3)]
    if xl_extras:
        items.append(Item("startup_configuration", 60, 1, True, e, 0, 0, 3))
    items += [
        Item("shutdown", 63, 1, True, e, 52, 0, 255),
        Item("torque_enable", 64, 1, True, r, 0, 0, 1),
        Item("led", 65, 1, True, r, 0, 0, 1),
        Item("status_return_level", 68, 1, True, r, 2, 0, 2),
        Item("registered_instruction", 69, 1, False, r, 0),
        Item("hardware_error_status", 70, 1, False, r, 0),
        Item("velocity_i_gain", 76, 2, True, r, velocity_i, 0, 16383),
        Item("velocity_p_gain", 78, 2, True, r, velocity_p, 0, 16383),
        Item("position_d_gain", 80, 2, True, r, position_d, 0, 16383),
        Item("position_i_gain", 82, 2, True, r, position_i, 0, 16383),
        Item("position_p_gain", 84, 2, True, r, position_p, 0, 16383),
        Item("feedforward_2nd_gain", 88, 2, True, r, 0, 0, 16383),
        Item("feedforward_1st_gain", 90, 2, True, r, 0, 0, 16383),
        # -1 (0xFF) is the watchdog-error state; clients may only write 0..127.
        Item("bus_watchdog", 98, 1, True, r, 0, 0, 127, signed=True),
        Item("goal_pwm", 100, 2, True, r, 0, -885, 885, signed=True),
    ]
    if current_limit is not None:
        items.append(Item("goal_current", 102, 2, True, r, 0, -current_limit, current_limit,
                          signed=True))
    items += [
        Item("goal_velocity", 104, 4, True, r, 0, -1023, 1023, signed=True),
        Item("profile_acceleration", 108, 4, True, r, 0, 0, 32767),
        Item("profile_velocity", 112, 4, True, r, 0, 0, 32767),
        Item("goal_position", 116, 4, True, r, 0, -EXTENDED_POSITION_RANGE,
             EXTENDED_POSITION_RANGE, signed=True),
        Item("realtime_tick", 120, 2, False, r),
        Item("moving", 122, 1, False, r),
        Item("moving_status", 123, 1, False, r),
        Item("present_pwm", 124, 2, False, r, signed=True),
        # XL430 has no current sensor: address 126 is Present Load (0.1 % units).
        Item("present_current" if current_limit is not None else "present_load",
             126, 2, False, r, signed=True),
        Item("present_velocity", 128, 4, False, r, signed=True),
        Item("present_position", 132, 4, False, r, signed=True),
        Item("velocity_trajectory", 136, 4, False, r, signed=True),
        Item("position_trajectory", 140, 4, False, r, signed=True),
        Item("present_input_voltage", 144, 2, False, r),
        Item("present_temperature", 146, 1, False, r),
    ]
    if xl_extras:
        items.append(Item("backup_ready", 147, 1, False, r))
    if external_ports:
        items += [Item(f"external_port_data_{n}", 150 + 2 * n, 2, True, r, 0, 0, 65535)
                  for n in (1, 2, 3)]
    for slot_base, data_base, count in INDIRECT_BLOCKS:
        first = 1 if slot_base == 168 else 29
        for k in range(count):
            items.append(Item(f"indirect_address_{first + k}", slot_base + 2 * k, 2, True, r,
                              data_base + k, 64, 661))
    return tuple(items)


FIRMWARE_VERSION = 46  # any value >= 45 has time-based profiles and torque-on-by-goal

XM430_W350 = ModelSpec(
    name="XM430-W350", model_number=1020, firmware_version=FIRMWARE_VERSION,
    items=_x_series_items(model_number=1020, firmware=FIRMWARE_VERSION, temperature_limit=80,
                          max_voltage=160, min_voltage=95, voltage_range=(95, 160),
                          current_limit=1193, velocity_limit=200, velocity_i=1920,
                          velocity_p=100, position_d=0, position_i=0, position_p=800),
    operating_modes=frozenset({0, 1, 3, 4, 5, 16}),
    drive_mode_bits=DRIVE_REVERSE | DRIVE_TIME_BASED_PROFILE | DRIVE_TORQUE_ON_BY_GOAL,
    no_load_speed_rpm=46.0, has_current_sensor=True)

XM540_W270 = ModelSpec(
    name="XM540-W270", model_number=1120, firmware_version=FIRMWARE_VERSION,
    items=_x_series_items(model_number=1120, firmware=FIRMWARE_VERSION, temperature_limit=80,
                          max_voltage=160, min_voltage=95, voltage_range=(95, 160),
                          current_limit=2047, velocity_limit=128, velocity_i=1920,
                          velocity_p=100, position_d=0, position_i=0, position_p=800,
                          external_ports=True),
    operating_modes=frozenset({0, 1, 3, 4, 5, 16}),
    drive_mode_bits=(DRIVE_REVERSE | DRIVE_DUAL_SLAVE | DRIVE_TIME_BASED_PROFILE
                     | DRIVE_TORQUE_ON_BY_GOAL),
    no_load_speed_rpm=30.0, has_current_sensor=True)

XL430_W250 = ModelSpec(
    name="XL430-W250", model_number=1060, firmware_version=FIRMWARE_VERSION,
    items=_x_series_items(model_number=1060, firmware=FIRMWARE_VERSION, temperature_limit=72,
                          max_voltage=140, min_voltage=60, voltage_range=(60, 140),
                          current_limit=None, velocity_limit=265, velocity_i=1000,
                          velocity_p=100, position_d=4000, position_i=0, position_p=640,
                          xl_extras=True),
    operating_modes=frozenset({1, 3, 4, 16}),
    drive_mode_bits=DRIVE_REVERSE | DRIVE_TIME_BASED_PROFILE | DRIVE_TORQUE_ON_BY_GOAL,
    no_load_speed_rpm=61.0, has_current_sensor=False)

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (XM430_W350, XM540_W270, XL430_W250)}
MODELS_BY_NUMBER: dict[int, ModelSpec] = {spec.model_number: spec for spec in MODELS.values()}

# Present Load of the XL430 is expressed against this nominal "full load".
_XL_FULL_LOAD = 1000

# --------------------------------------------------------------------------------------
# Servo
# --------------------------------------------------------------------------------------


def _encode(value: int, size: int) -> bytes:
    return (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def _decode(raw: bytes, signed: bool) -> int:
    return int.from_bytes(raw, "little", signed=signed)


class EmulatedServo:
    """One X-series servo: its control table, access rules and a light motion model.

    ``registers`` overrides control-table values at construction (for example
    ``drive_mode=1, secondary_id=2, velocity_limit=131``); EEPROM overrides survive a
    reboot like a configured servo's EEPROM does. ``position`` is the initial Present
    Position in ticks (2048 = 0 rad).

    Public properties and methods lock against the bus thread and bring the simulation up
    to the current time first, so tests can read them at any moment.
    """

    def __init__(self, dxl_id: int, model: str | ModelSpec = "XM430-W350", *,
                 name: Optional[str] = None, position: int = CENTER_TICKS,
                 input_voltage: float = 12.0, temperature: int = 30,
                 **registers: int) -> None:
        self.spec = MODELS[model] if isinstance(model, str) else model
        self.name = name or f"{self.spec.name}#{dxl_id}"
        self.online = True  # False: this servo neither hears nor answers (its cable is out)
        self.input_voltage = input_voltage
        self.temperature = temperature
        self._lock: threading.RLock = threading.RLock()

        self._items = {item.name: item for item in self.spec.items}
        self._owner: list[Optional[Item]] = [None] * self.spec.table_size
        for item in self.spec.items:
            for address in range(item.address, item.address + item.size):
                self._owner[address] = item
        self._indirect_data: dict[int, int] = {}  # data byte address -> its address slot
        for slot_base, data_base, count in INDIRECT_BLOCKS:
            for k in range(count):
                self._indirect_data[data_base + k] = slot_base + 2 * k

        self._mem = bytearray(self.spec.table_size)
        for item in self.spec.items:
            self._put(item, item.default)
        self._put_name("id", dxl_id)
        for key in registers:
            if key not in self._items:
                raise KeyError(f"{self.spec.name} has no control-table item {key!r}")
        for key, value in registers.items():
            if self._items[key].eeprom:
                self._put_name(key, value)

        now = time.monotonic()
        self._raw_position = float(position - self._get("homing_offset"))
        self._velocity = 0.0      # ticks/s, signed
        self._current = 0.0       # current units (2.69 mA) or load units (0.1 %) on the XL430
        self._t_last = now
        self._last_bus_activity = now
        self._obstacle: Optional[float] = None
        self._obstacle_side = 1
        self._blocked = False
        self._registered: Optional[tuple[int, bytes]] = None
        self._plan_speed = 0.0    # ticks/s bound of the current move
        self._plan_accel = math.inf
        self._profile_bits = 0x00
        # Every Goal Position written, with the host's monotonic time: what reached the servo.
        self._goal_log: collections.deque = collections.deque(maxlen=GOAL_LOG_LENGTH)
        self._power_on(now, fold_multi_turn=False)
        for key, value in registers.items():
            if not self._items[key].eeprom:
                self._apply(self._items[key], value, now)

    # -- raw control-table access (caller holds the lock) -----------------------------

    def _put(self, item: Item, value: int) -> None:
        self._mem[item.address:item.address + item.size] = _encode(value, item.size)

    def _put_name(self, name: str, value: int) -> None:
        self._put(self._items[name], value)

    def _get(self, name: str) -> int:
        item = self._items[name]
        return _decode(bytes(self._mem[item.address:item.address + item.size]), item.signed)

    def _has(self, name: str) -> bool:
        return name in self._items

    # -- derived settings ---------------------------------------------------------------

    @property
    def id(self) -> int:
        with self._lock:
            return self._get("id")

    @property
    def secondary_id(self) -> Optional[int]:
        """The shadow id, or None when the function is off (values 253..255)."""
        with self._lock:
            value = self._get("secondary_id")
            return value if value <= MAX_ID else None

    @property
    def baud_rate(self) -> Optional[int]:
        with self._lock:
            return BAUD_RATES.get(self._get("baud_rate"))

    @property
    def status_return_level(self) -> int:
        with self._lock:
            return self._get("status_return_level")

    def _current_limit(self) -> int:
        return self._get("current_limit") if self._has("current_limit") else _XL_FULL_LOAD

    def _effort_target_limit(self) -> float:
        """How hard the servo pushes when blocked: Goal Current in mode 5, else the limit."""
        limit = self._current_limit()
        if self._get("operating_mode") == MODE_CURRENT_BASED_POSITION and self._has("goal_current"):
            return float(min(abs(self._get("goal_current")), limit))
        return float(limit)

    def _no_load_speed(self) -> float:
        return self.spec.no_load_speed_rpm * TICKS_PER_REV / 60.0

    def _speed_cap(self) -> float:
        """Ticks/s bound from Velocity Limit (44); 0 means no bound besides the motor."""
        limit = self._get("velocity_limit")
        return limit * VELOCITY_UNIT_TICKS_S if limit > 0 else math.inf

    # -- boot / reboot ------------------------------------------------------------------

    def _power_on(self, now: float, *, fold_multi_turn: bool = True) -> None:
        """RAM back to defaults, EEPROM kept, goals initialised from the present state."""
        self.advance(now)
        for item in self.spec.items:
            if not item.eeprom:
                self._put(item, item.default)
        if fold_multi_turn:  # the absolute encoder only knows the angle within one turn
            self._raw_position %= TICKS_PER_REV
        self._velocity = 0.0
        self._current = 0.0
        self._registered = None
        self._blocked = False
        self._put_name("goal_pwm", self._get("pwm_limit"))
        if self._has("goal_current"):
            self._put_name("goal_current", self._get("current_limit"))
        self._put_name("goal_position", self._present_position_value())
        self._plan_motion()
        self._t_boot = now
        self._last_bus_activity = now

    def reboot(self) -> None:
        with self._lock:
            self._power_on(time.monotonic())

    def factory_reset(self, option: int) -> None:
        """0xFF: everything; 0x01: all but ID; 0x02: all but ID and baud rate."""
        with self._lock:
            keep = {}
            if option in (0x01, 0x02):
                keep["id"] = self._get("id")
            if option == 0x02:
                keep["baud_rate"] = self._get("baud_rate")
            for item in self.spec.items:
                self._put(item, item.default)
            for key, value in keep.items():
                self._put_name(key, value)
            self._power_on(time.monotonic())

    # -- motion model -------------------------------------------------------------------

    def _present_position_value(self) -> int:
        return int(round(self._raw_position)) + self._get("homing_offset")

    def _goal_raw(self) -> float:
        return float(self._get("goal_position") - self._get("homing_offset"))

    def _plan_motion(self) -> None:
        """Speed/acceleration bounds of the move toward the goal, fixed when it is set."""
        drive_mode = self._get("drive_mode")
        profile_velocity = self._get("profile_velocity")
        profile_accel = self._get("profile_acceleration")
        cap = self._speed_cap()
        default = min(cap, DEFAULT_SPEED_RAD_S / RAD_PER_TICK) if math.isinf(cap) else cap
        if drive_mode & DRIVE_TIME_BASED_PROFILE:
            # Profile Velocity is the move's duration and Profile Acceleration its ramp time.
            distance = abs(self._goal_raw() - self._raw_position)
            span = profile_velocity / 1000.0
            ramp = min(profile_accel, profile_velocity // 2) / 1000.0
            if span <= 0.0:
                speed, accel = default, math.inf
            elif distance == 0.0:
                speed, accel = 0.0, math.inf  # already there: nothing to plan
            elif ramp <= 0.0:
                speed, accel = distance / span, math.inf
            else:
                speed = distance / (span - ramp)
                accel = speed / ramp
            speed = min(speed, cap)
        else:
            speed = profile_velocity * VELOCITY_UNIT_TICKS_S if profile_velocity else default
            speed = min(speed, cap)
            accel = profile_accel * ACCEL_UNIT_TICKS_S2 if profile_accel else math.inf
        self._plan_speed = speed
        self._plan_accel = accel
        if profile_velocity == 0:
            self._profile_bits = 0x00          # step, no profile
        elif profile_accel == 0:
            self._profile_bits = 0x10          # rectangular
        else:
            # Ramping up and down takes speed^2/accel; a shorter move never reaches cruise.
            distance = abs(self._goal_raw() - self._raw_position)
            reaches_cruise = math.isinf(accel) or distance >= speed * speed / accel
            self._profile_bits = 0x30 if reaches_cruise else 0x20  # trapezoidal / triangular

    def _clamp_to_obstacle(self, position: float) -> tuple[float, bool]:
        """Keep the position on the servo's side of the obstacle; True when it touched."""
        if self._obstacle is None:
            return position, False
        if self._obstacle_side * (position - self._obstacle) < 0:
            return self._obstacle, True
        return position, False

    def _step_position_mode(self, dt: float) -> None:
        target = self._goal_raw()
        speed, accel = self._plan_speed, self._plan_accel
        if math.isinf(accel):
            # Constant speed: exact for any dt, so there is no stepping cost.
            delta = target - self._raw_position
            travel = min(abs(delta), speed * dt)
            new_position = self._raw_position + math.copysign(travel, delta)
            self._velocity = 0.0 if travel >= abs(delta) else math.copysign(speed, delta)
        else:
            # Accelerate, cruise, then brake so as to stop on the goal; 1 ms steps.
            steps = max(1, min(2000, int(math.ceil(dt / 0.001))))
            h = dt / steps
            position, velocity = self._raw_position, self._velocity
            for _ in range(steps):
                delta = target - position
                if abs(delta) < 0.5 and abs(velocity) < accel * h:
                    position, velocity = target, 0.0
                    break
                brake_speed = math.sqrt(2.0 * accel * abs(delta))
                wanted = math.copysign(min(speed, brake_speed, abs(delta) / h), delta)
                change = max(-accel * h, min(accel * h, wanted - velocity))
                velocity += change
                position += velocity * h
            new_position, self._velocity = position, velocity
        clamped, touched = self._clamp_to_obstacle(new_position)
        if touched:
            self._velocity = 0.0
        self._raw_position = clamped
        # Blocked = resting on the obstacle while the goal lies beyond it.
        self._blocked = (self._obstacle is not None
                         and abs(self._raw_position - self._obstacle) < 1e-6
                         and self._obstacle_side * (target - self._obstacle) < 0)

    def _step_spin_mode(self, mode: int, dt: float) -> None:
        """Velocity, current and PWM modes: follow a target speed, blocked by the obstacle."""
        no_load = self._no_load_speed()
        if self._get("bus_watchdog") == -1:
            wanted = 0.0
        elif mode == MODE_VELOCITY:
            wanted = self._get("goal_velocity") * VELOCITY_UNIT_TICKS_S
            wanted = max(-self._speed_cap(), min(self._speed_cap(), wanted))
        elif mode == MODE_PWM:
            wanted = no_load * self._get("goal_pwm") / 885.0
        else:  # current mode: an unloaded motor spins in proportion to the torque asked
            wanted = no_load * self._get("goal_current") / max(1, self._current_limit())
        # Exact travel over dt, however long: the state is only advanced when looked at.
        old = self._velocity
        accel_units = self._get("profile_acceleration") if mode == MODE_VELOCITY else 0
        if mode == MODE_VELOCITY and not accel_units:
            self._velocity, travel = wanted, wanted * dt  # step change
        elif mode == MODE_VELOCITY:
            accel = accel_units * ACCEL_UNIT_TICKS_S2  # constant acceleration, then cruise
            ramp_time = min(dt, abs(wanted - old) / accel)
            self._velocity = old + math.copysign(accel * ramp_time, wanted - old)
            travel = 0.5 * (old + self._velocity) * ramp_time + self._velocity * (dt - ramp_time)
        else:  # first-order approach of the unloaded motor
            decay = math.exp(-dt / SPIN_TIME_CONSTANT_S)
            self._velocity = wanted + (old - wanted) * decay
            travel = wanted * dt + (old - wanted) * SPIN_TIME_CONSTANT_S * (1.0 - decay)
        new_position = self._raw_position + travel
        clamped, touched = self._clamp_to_obstacle(new_position)
        self._blocked = touched or (self._obstacle is not None
                                    and abs(self._raw_position - self._obstacle) < 1e-6
                                    and self._obstacle_side * wanted < 0)
        if touched:
            self._velocity = 0.0
        self._raw_position = clamped

    def _update_current(self, dt: float, torque_on: bool) -> None:
        if not torque_on:
            target = 0.0
        elif self._blocked:
            direction = 1.0 if self._obstacle_side < 0 else -1.0  # pushing toward the obstacle
            target = direction * self._effort_target_limit()
        elif self._velocity != 0.0:
            # Friction while moving: a few percent of the limit, plus a speed-proportional part.
            share = 0.03 + 0.05 * min(1.0, abs(self._velocity) / self._no_load_speed())
            target = math.copysign(share * self._current_limit(), self._velocity)
        else:
            target = 0.0
        if self._get("operating_mode") == MODE_CURRENT and torque_on and not self._blocked:
            target = float(self._get("goal_current")) if self._has("goal_current") else target
        self._current = target + (self._current - target) * math.exp(-dt / CURRENT_TIME_CONSTANT_S)

    def _trip_watchdog(self) -> None:
        self._put_name("bus_watchdog", -1)
        if self._get("operating_mode") in POSITION_MODES:
            self._put_name("goal_position", self._present_position_value())
        self._velocity = 0.0

    def advance(self, now: float) -> None:
        """Bring the simulation forward to ``now`` (monotonic seconds)."""
        with self._lock:
            dt = now - self._t_last
            if dt <= 0.0:
                return
            watchdog = self._get("bus_watchdog")
            torque_on = self._get("torque_enable") == 1
            if torque_on and watchdog > 0:
                deadline = self._last_bus_activity + watchdog * BUS_WATCHDOG_UNIT_S
                if deadline < now:
                    if deadline > self._t_last:
                        self._integrate(deadline - self._t_last, torque_on)
                        self._t_last = deadline
                    self._trip_watchdog()
                    dt = now - self._t_last
            self._integrate(dt, torque_on)
            self._t_last = now

    def _integrate(self, dt: float, torque_on: bool) -> None:
        if dt <= 0.0:
            return
        mode = self._get("operating_mode")
        if not torque_on:
            self._velocity = 0.0  # free-running: stays where it was left
            self._blocked = False
        elif mode in POSITION_MODES:
            self._step_position_mode(dt)
        else:
            self._step_spin_mode(mode, dt)
        self._update_current(dt, torque_on)

    def note_bus_activity(self, now: float) -> None:
        with self._lock:
            self._last_bus_activity = now

    def _refresh_live_items(self, now: float) -> None:
        """Write the simulated state into the read-only RAM items before a read."""
        self.advance(now)
        present = self._present_position_value()
        goal = self._get("goal_position")
        torque_on = self._get("torque_enable") == 1
        velocity_units = int(round(self._velocity / VELOCITY_UNIT_TICKS_S))
        threshold = self._get("moving_threshold")
        moving = torque_on and (abs(velocity_units) > threshold
                                or (abs(self._velocity) > 0 and abs(goal - present) > 1))
        in_position_modes = self._get("operating_mode") in POSITION_MODES
        status = 0
        if torque_on and in_position_modes:
            if abs(goal - present) <= 1 and not self._blocked:
                status |= 0x01  # in position
            elif not self._blocked:
                status |= 0x02  # profile ongoing
            if self._blocked:
                status |= 0x08  # following error: the obstacle holds it back
            status |= self._profile_bits
        limit = self._current_limit()
        pwm = 885.0 * (self._velocity / self._no_load_speed() + 0.5 * self._current / limit)
        pwm_limit = self._get("pwm_limit")
        self._put_name("realtime_tick", int((now - self._t_boot) * 1000.0) % 32768)
        self._put_name("moving", 1 if moving else 0)
        self._put_name("moving_status", status)
        self._put_name("present_pwm", int(max(-pwm_limit, min(pwm_limit, round(pwm)))))
        self._put_name("present_current" if self.spec.has_current_sensor else "present_load",
                       int(round(self._current)))
        self._put_name("present_velocity", velocity_units)
        self._put_name("present_position", present)
        self._put_name("velocity_trajectory", velocity_units)
        trajectory = goal if self._blocked else present
        self._put_name("position_trajectory", trajectory)
        self._put_name("present_input_voltage", int(round(self.input_voltage * 10)))
        self._put_name("present_temperature", int(self.temperature))

    # -- protocol-level access ------------------------------------------------------------

    def read_bytes(self, address: int, length: int) -> tuple[int, bytes]:
        """(error, data) for a Read of ``length`` bytes from ``address``."""
        with self._lock:
            if length <= 0 or address < 0 or address + length > self.spec.table_size:
                return ERR_ACCESS, bytes(max(0, length))
            self._refresh_live_items(time.monotonic())
            out = bytearray()
            for addr in range(address, address + length):
                slot = self._indirect_data.get(addr)
                if slot is not None:
                    target = _decode(bytes(self._mem[slot:slot + 2]), False)
                    out.append(self._mem[target] if 0 <= target < self.spec.table_size else 0)
                else:
                    out.append(self._mem[addr])
            return ERR_NONE, bytes(out)

    def _collect_changes(self, address: int, data: bytes,
                         depth: int = 0) -> tuple[int, list[tuple[Item, int]]]:
        """Split a write into whole items; (error, [(item, value)])."""
        end = address + len(data)
        if not data or address < 0 or end > self.spec.table_size:
            return ERR_ACCESS, []
        changes: list[tuple[Item, int]] = []
        redirected: dict[int, int] = {}
        addr = address
        while addr < end:
            slot = self._indirect_data.get(addr)
            if slot is not None:
                if depth:
                    return ERR_ACCESS, []
                redirected[_decode(bytes(self._mem[slot:slot + 2]), False)] = data[addr - address]
                addr += 1
                continue
            item = self._owner[addr]
            if item is None:
                return ERR_ACCESS, []
            if item.address != addr or item.address + item.size > end:
                return ERR_DATA_LENGTH, []
            offset = addr - address
            changes.append((item, _decode(data[offset:offset + item.size], item.signed)))
            addr += item.size
        # Indirect data bytes land on their target addresses, grouped into contiguous runs.
        run_start, run = None, bytearray()
        for target in sorted(redirected) + [None]:
            if run_start is not None and (target is None or target != run_start + len(run)):
                error, more = self._collect_changes(run_start, bytes(run), depth + 1)
                if error:
                    return error, []
                changes.extend(more)
                run_start, run = None, bytearray()
            if target is not None:
                if run_start is None:
                    run_start = target
                run.append(redirected[target])
        return ERR_NONE, changes

    def _check_value(self, item: Item, value: int, via_secondary: bool) -> int:
        if not item.writable:
            return ERR_ACCESS
        if item.eeprom and (via_secondary or self._get("torque_enable") == 1):
            return ERR_ACCESS  # EEPROM is locked while torque is on
        name = item.name
        goal_items = ("goal_pwm", "goal_current", "goal_velocity", "goal_position")
        if name in goal_items and self._get("bus_watchdog") == -1:
            return ERR_DATA_RANGE  # goals are read-only until the watchdog error is cleared
        if item.minimum is not None and not item.minimum <= value <= item.maximum:
            return ERR_DATA_RANGE
        if name == "operating_mode" and value not in self.spec.operating_modes:
            return ERR_DATA_RANGE
        if name == "drive_mode" and value & ~self.spec.drive_mode_bits:
            return ERR_DATA_RANGE
        if name == "goal_pwm" and abs(value) > self._get("pwm_limit"):
            return ERR_DATA_LIMIT
        if name == "goal_current" and abs(value) > self._get("current_limit"):
            return ERR_DATA_LIMIT
        if name == "goal_velocity" and abs(value) > self._get("velocity_limit"):
            return ERR_DATA_LIMIT
        if name == "goal_position" and self._get("operating_mode") == MODE_POSITION:
            if not self._get("min_position_limit") <= value <= self._get("max_position_limit"):
                return ERR_DATA_LIMIT
        return ERR_NONE

    def write_bytes(self, address: int, data: bytes, *, via_secondary: bool = False) -> int:
        """Apply a Write; returns the status error (nothing changes when it is not 0)."""
        with self._lock:
            now = time.monotonic()
            self.advance(now)
            error, changes = self._collect_changes(address, bytes(data))
            if error:
                return error
            if (self._get("hardware_error_status") and
                    any(item.name == "torque_enable" and value == 1 for item, value in changes)):
                return ERR_RESULT_FAIL  # a servo in hardware error refuses torque until reboot
            for item, value in changes:
                error = self._check_value(item, value, via_secondary)
                if error:
                    return error
            for item, value in changes:
                self._apply(item, value, now)
            return ERR_NONE

    def _apply(self, item: Item, value: int, now: float) -> None:
        name = item.name
        if name == "torque_enable":
            was_on = self._get("torque_enable") == 1
            self._put(item, value)
            if value == 1 and not was_on:
                self._on_torque_enabled()
            elif value == 0:
                self._velocity = 0.0
            return
        if name == "operating_mode":
            self._put(item, value)
            if value == MODE_POSITION:
                self._raw_position %= TICKS_PER_REV  # joint mode lives within one turn
                self._put_name("goal_position", self._present_position_value())
            return
        self._put(item, value)
        if name in ("goal_pwm", "goal_current", "goal_velocity", "goal_position"):
            if (self._get("torque_enable") == 0
                    and self._get("drive_mode") & DRIVE_TORQUE_ON_BY_GOAL):
                # Torque comes on by itself; the goal just written is kept, not overwritten.
                self._put_name("torque_enable", 1)
            if name == "goal_position":
                self._goal_log.append((now, value))
                self._plan_motion()

    def _on_torque_enabled(self) -> None:
        # Hold where it is: Goal Position takes Present Position on torque-on.
        if self._get("operating_mode") in POSITION_MODES:
            self._put_name("goal_position", self._present_position_value())
        self._plan_motion()

    def register_write(self, address: int, data: bytes, *, via_secondary: bool = False) -> int:
        """Reg Write: validate now, apply on Action."""
        with self._lock:
            error, changes = self._collect_changes(address, bytes(data))
            if error:
                return error
            for item, value in changes:
                error = self._check_value(item, value, via_secondary)
                if error:
                    return error
            self._registered = (address, bytes(data))
            self._put_name("registered_instruction", 1)
            return ERR_NONE

    @property
    def has_registered_write(self) -> bool:
        with self._lock:
            return self._registered is not None

    def action(self) -> int:
        with self._lock:
            if self._registered is None:
                return ERR_INSTRUCTION  # Action without a preceding Reg Write
            address, data = self._registered
            self._registered = None
            self._put_name("registered_instruction", 0)
            return self.write_bytes(address, data)

    def clear_multi_turn(self) -> int:
        with self._lock:
            self.advance(time.monotonic())
            if abs(self._velocity) > 0.0:
                return ERR_RESULT_FAIL  # only allowed while stopped
            self._raw_position %= TICKS_PER_REV
            if self._get("torque_enable") and self._get("operating_mode") in POSITION_MODES:
                self._put_name("goal_position", self._present_position_value())
                self._plan_motion()
            return ERR_NONE

    def alert_bit(self) -> int:
        with self._lock:
            return ERRBIT_ALERT if self._get("hardware_error_status") else 0

    def ping_params(self) -> bytes:
        with self._lock:
            return struct.pack("<HB", self.spec.model_number, self.spec.firmware_version)

    # -- inspection and manipulation helpers for tests ------------------------------------

    def read_item(self, name: str) -> int:
        """Current value of a control-table item by name (signed items decoded)."""
        with self._lock:
            self._refresh_live_items(time.monotonic())
            return self._get(name)

    def write_item(self, name: str, value: int) -> int:
        """Write an item as a client would (same checks); returns the status error."""
        item = self._items[name]
        return self.write_bytes(item.address, _encode(value, item.size))

    @property
    def model_number(self) -> int:
        return self.spec.model_number

    @property
    def goal_position(self) -> int:
        return self.read_item("goal_position")

    def goal_history(self) -> list[tuple[float, int]]:
        """The Goal Positions written to this servo (the newest GOAL_LOG_LENGTH), as (host
        monotonic time, ticks): every goal a bus master sent, repeated ones included."""
        with self._lock:
            return list(self._goal_log)

    @property
    def present_position(self) -> int:
        return self.read_item("present_position")

    @property
    def present_position_rad(self) -> float:
        return (self.present_position - CENTER_TICKS) * RAD_PER_TICK

    @property
    def present_velocity(self) -> int:
        return self.read_item("present_velocity")

    @property
    def present_current(self) -> int:
        """Present Current in 2.69 mA units (Present Load in 0.1 % on the XL430)."""
        return self.read_item("present_current" if self.spec.has_current_sensor else "present_load")

    @property
    def torque_enabled(self) -> bool:
        return self.read_item("torque_enable") == 1

    @property
    def operating_mode(self) -> int:
        return self.read_item("operating_mode")

    @property
    def moving(self) -> bool:
        return self.read_item("moving") == 1

    @property
    def blocked(self) -> bool:
        with self._lock:
            self.advance(time.monotonic())
            return self._blocked

    @property
    def hardware_error_status(self) -> int:
        return self.read_item("hardware_error_status")

    def set_present_position(self, ticks: int) -> None:
        """Move the shaft from outside (a hand on a torque-off leader arm, a collision)."""
        with self._lock:
            self.advance(time.monotonic())
            self._raw_position = float(ticks - self._get("homing_offset"))
            self._velocity = 0.0
            if self._obstacle is not None:
                self._obstacle_side = 1 if self._raw_position >= self._obstacle else -1

    def set_obstacle(self, ticks: Optional[int]) -> None:
        """Put an obstacle at Present Position ``ticks`` (None removes it). The servo cannot
        move past it from the side it is on now; pushing on it raises Present Current."""
        with self._lock:
            self.advance(time.monotonic())
            if ticks is None:
                self._obstacle = None
                self._blocked = False
                return
            self._obstacle = float(ticks - self._get("homing_offset"))
            self._obstacle_side = 1 if self._raw_position >= self._obstacle else -1

    def inject_hardware_error(self, bits: int) -> None:
        """Raise Hardware Error Status bits; shutdown bits turn the torque off, like the
        firmware does. Only a reboot clears them."""
        with self._lock:
            self.advance(time.monotonic())
            self._put_name("hardware_error_status", self._get("hardware_error_status") | bits)
            if bits & self._get("shutdown"):
                self._put_name("torque_enable", 0)
                self._velocity = 0.0

    def __repr__(self) -> str:
        return f"EmulatedServo(id={self.id}, model={self.spec.name!r}, name={self.name!r})"


# --------------------------------------------------------------------------------------
# ALOHA arms
# --------------------------------------------------------------------------------------

ALOHA_JOINTS = ("waist", "shoulder", "shoulder_shadow", "elbow", "elbow_shadow",
                "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")

# Per-motor EEPROM as in Interbotix' aloha_vx300s.yaml / aloha_wx250s.yaml:
# (name, drive_mode, min_position_limit, max_position_limit, secondary_id)
_VIPERX_CONFIG = (
    ("waist", 0, 0, 4095, 255),
    ("shoulder", 1, 841, 2867, 255),
    ("shoulder_shadow", 0, 841, 2867, 2),
    ("elbow", 1, 898, 3094, 255),
    ("elbow_shadow", 0, 898, 3094, 4),
    ("forearm_roll", 0, 0, 4095, 255),
    ("wrist_angle", 1, 830, 3504, 255),
    ("wrist_rotate", 0, 0, 4095, 255),
    ("gripper", 0, 0, 4095, 255),
)
_WIDOWX_CONFIG = (
    ("waist", 0, 0, 4095, 255),
    ("shoulder", 0, 819, 3345, 255),
    ("shoulder_shadow", 1, 819, 3345, 2),
    ("elbow", 0, 648, 3094, 255),
    ("elbow_shadow", 1, 648, 3094, 4),
    ("forearm_roll", 0, 0, 4095, 255),
    ("wrist_angle", 1, 910, 3447, 255),
    ("wrist_rotate", 0, 0, 4095, 255),
    ("gripper", 0, 0, 4095, 255),
)
VIPERX_MODELS = ("XM540-W270",) * 7 + ("XM430-W350",) * 2  # ViperX 300 6DOF (follower)
WIDOWX_MODELS = ("XM430-W350",) * 7 + ("XL430-W250",) * 2  # WidowX 250 6DOF (leader)


def _aloha_arm(config, models, *, secondary_ids: bool,
               positions: Optional[Mapping[int, int]]) -> list[EmulatedServo]:
    servos = []
    for dxl_id, ((name, drive_mode, low, high, secondary), model) in enumerate(
            zip(config, models, strict=True), start=1):
        servos.append(EmulatedServo(
            dxl_id, model, name=name,
            position=(positions or {}).get(dxl_id, CENTER_TICKS),
            baud_rate=BAUD_CODES[1_000_000], return_delay_time=0, drive_mode=drive_mode,
            velocity_limit=131, min_position_limit=low, max_position_limit=high,
            secondary_id=secondary if secondary_ids else 255))
    return servos


def viperx_follower(*, secondary_ids: bool = True,
                    positions: Optional[Mapping[int, int]] = None) -> list[EmulatedServo]:
    """ALOHA follower arm, ids 1..9 in :data:`ALOHA_JOINTS` order: XM540-W270 for ids 1-7,
    XM430-W350 for wrist_rotate and gripper, at 1 Mbps. With ``secondary_ids`` (default,
    as Interbotix configures it) the shadows 3 and 5 listen to ids 2 and 4."""
    return _aloha_arm(_VIPERX_CONFIG, VIPERX_MODELS, secondary_ids=secondary_ids,
                      positions=positions)


def widowx_leader(*, secondary_ids: bool = True,
                  positions: Optional[Mapping[int, int]] = None) -> list[EmulatedServo]:
    """ALOHA leader arm: XM430-W350 for ids 1-7, XL430-W250 for wrist_rotate and gripper."""
    return _aloha_arm(_WIDOWX_CONFIG, WIDOWX_MODELS, secondary_ids=secondary_ids,
                      positions=positions)


ARM_FACTORIES: dict[str, Callable[..., list[EmulatedServo]]] = {
    "viperx": viperx_follower,
    "widowx": widowx_leader,
}

# --------------------------------------------------------------------------------------
# Bus on a pty
# --------------------------------------------------------------------------------------

_TERMIOS_SPEEDS = {getattr(termios, f"B{rate}"): rate
                   for rate in (9600, 19200, 38400, 57600, 115200, 230400, 460800, 500000,
                                576000, 921600, 1000000, 1152000, 2000000, 2500000, 3000000,
                                3500000, 4000000)
                   if hasattr(termios, f"B{rate}")}
_BOTHER = 0o010000
_TCGETS2 = 0x802C542A  # Linux, asm-generic layout; used only for non-standard speeds

READ_INSTRUCTIONS = frozenset({INST_READ, INST_SYNC_READ, INST_BULK_READ,
                               INST_FAST_SYNC_READ, INST_FAST_BULK_READ})


def _should_answer(servo: EmulatedServo, instruction: int) -> bool:
    """Status Return Level: 0 = ping only, 1 = ping and reads, 2 = everything."""
    if instruction == INST_PING:
        return True
    level = servo.status_return_level
    return level >= 2 or (level >= 1 and instruction in READ_INSTRUCTIONS)


class DynamixelBus:
    """Emulated servos behind a pty, reachable at ``link_path`` (a symlink to the slave).

    ``baud``, when given, is written into every servo's Baud Rate register. The bus thread
    starts with :meth:`start` (or ``with DynamixelBus(...) as bus``).

    Fault injection: :meth:`stop` closes the pty and removes the link (the USB adapter
    vanished: the client's port raises I/O errors); :meth:`restart` brings it back on the
    same link with a new pty; :meth:`unplug` keeps the pty but makes every servo deaf and
    mute (the servo cable was pulled: reads time out); :meth:`replug` undoes it.
    """

    def __init__(self, link_path: str | os.PathLike,
                 servos: Optional[Iterable[EmulatedServo]] = None, *,
                 baud: Optional[int] = 1_000_000, check_baud: bool = True) -> None:
        self.link_path = os.fspath(link_path)
        self.check_baud = check_baud
        self._lock = threading.RLock()
        self._servos: list[EmulatedServo] = (list(servos) if servos is not None
                                             else viperx_follower())
        for servo in self._servos:
            servo._lock = self._lock  # one lock for the bus thread and all inspections
            if baud is not None:
                if baud not in BAUD_CODES:
                    raise ValueError(f"unsupported baud rate {baud}")
                servo._put_name("baud_rate", BAUD_CODES[baud])
        self._master_fd: Optional[int] = None
        self._slave_fd: Optional[int] = None
        self._slave_path: Optional[str] = None
        self._wake_r: Optional[int] = None
        self._wake_w: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self._running = False
        self._plugged = True
        self._rx = bytearray()
        self._rx_since = 0.0
        # Counters, for tests.
        self.packets_received = 0           # frames whose CRC matched
        self.crc_errors = 0                 # frames rejected for a bad CRC
        self.bytes_discarded = 0            # bytes that were not part of any frame
        self.bytes_ignored_unplugged = 0    # bytes that arrived while unplugged
        self.status_packets_sent = 0
        self.bytes_dropped_tx = 0           # replies the pty could not take
        self.instruction_counts: dict[int, int] = {}
        self.internal_errors: list[str] = []  # tracebacks of emulator bugs; tests assert empty

    # -- lifecycle --------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    @property
    def slave_path(self) -> Optional[str]:
        return self._slave_path

    @property
    def servos(self) -> list[EmulatedServo]:
        return list(self._servos)

    def servo(self, dxl_id: int) -> EmulatedServo:
        for servo in self._servos:
            if servo.id == dxl_id:
                return servo
        raise KeyError(f"no servo with id {dxl_id}")

    def add_servo(self, servo: EmulatedServo) -> None:
        with self._lock:
            servo._lock = self._lock
            self._servos.append(servo)

    def start(self) -> "DynamixelBus":
        if self._running:
            return self
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no line discipline: bytes pass through untouched
        os.set_blocking(master, False)
        self._master_fd, self._slave_fd = master, slave
        self._slave_path = os.ttyname(slave)
        self._wake_r, self._wake_w = os.pipe()
        self._publish_link()
        self._rx.clear()
        self._running = True
        self._thread = threading.Thread(target=self._serve, name=f"dxl-emulator:{self.link_path}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the pty (the client sees I/O errors) and remove the link."""
        if not self._running:
            return
        self._running = False
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._thread = None
        self._remove_link()
        for fd in (self._master_fd, self._slave_fd, self._wake_r, self._wake_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._master_fd = self._slave_fd = self._wake_r = self._wake_w = None
        self._slave_path = None

    def restart(self, *, power_cycle: bool = False) -> "DynamixelBus":
        """Stop and start again on the same link (a new pty behind it). The servos keep
        their state unless ``power_cycle`` reboots them too."""
        self.stop()
        if power_cycle:
            for servo in self._servos:
                servo.reboot()
        return self.start()

    def unplug(self) -> None:
        self._plugged = False

    def replug(self) -> None:
        with self._lock:
            self._rx.clear()
            self._plugged = True

    @property
    def plugged(self) -> bool:
        return self._plugged

    def __enter__(self) -> "DynamixelBus":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _publish_link(self) -> None:
        # Atomic replace, so a client never sees the link missing or half-made.
        directory = os.path.dirname(os.path.abspath(self.link_path))
        os.makedirs(directory, exist_ok=True)
        temporary = f"{self.link_path}.tmp{os.getpid()}"
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        os.symlink(self._slave_path, temporary)
        os.replace(temporary, self.link_path)

    def _remove_link(self) -> None:
        try:
            if os.readlink(self.link_path) == self._slave_path:
                os.unlink(self.link_path)
        except OSError:
            pass

    # -- serving ------------------------------------------------------------------------

    def _serve(self) -> None:
        master, wake = self._master_fd, self._wake_r
        while self._running:
            try:
                ready, _, _ = select.select([master, wake], [], [], 0.5)
            except (OSError, ValueError):
                break
            if wake in ready or not self._running:
                break
            if master not in ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:  # no slave open anywhere; wait for a client
                    time.sleep(0.01)
                    continue
                break
            if not chunk:
                continue
            try:
                replies = self.feed(chunk)
            except Exception:  # an emulator bug must not silently kill the bus thread
                self.internal_errors.append(traceback.format_exc())
                print(self.internal_errors[-1], file=sys.stderr)
                with self._lock:
                    self._rx.clear()
                continue
            if replies:
                self._send(replies)

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._master_fd, view)
            except BlockingIOError:
                self.bytes_dropped_tx += len(view)  # client is not reading; a real bus drops too
                return
            except OSError:
                return
            view = view[written:]

    def _client_baud(self) -> Optional[int]:
        """The serial speed the client set on the pty, or None when unknown."""
        if self._slave_fd is None:
            return None
        try:
            speed = termios.tcgetattr(self._slave_fd)[5]
        except termios.error:
            return None
        if speed in _TERMIOS_SPEEDS:
            return _TERMIOS_SPEEDS[speed]
        if speed == _BOTHER:
            try:
                raw = fcntl.ioctl(self._slave_fd, _TCGETS2, bytes(44))
                return struct.unpack("<I", raw[40:44])[0]  # c_ospeed
            except OSError:
                return None
        return None

    def feed(self, chunk: bytes) -> bytes:
        """Parse bytes from the client; returns the bytes to send back. (The bus thread
        calls this; tests may call it directly to drive the servos without a pty.)"""
        now = time.monotonic()
        with self._lock:
            if not self._plugged:
                self.bytes_ignored_unplugged += len(chunk)
                return b""
            if not self._rx:
                self._rx_since = now
            self._rx += chunk
            replies = bytearray()
            for item in self._extract_packets(now):
                replies += item if isinstance(item, bytes) else self._dispatch(item, now)
            return bytes(replies)

    def _extract_packets(self, now: float) -> Iterator[Packet | bytes]:
        """Frames from the receive buffer: a Packet per good frame, or the ready-made
        answer (bytes) to a frame that failed its CRC."""
        buf = self._rx
        while True:
            start = buf.find(HEADER)
            if start < 0:
                keep = 3 if buf.endswith(b"\xff\xff\xfd") else 2 if buf.endswith(b"\xff\xff") \
                    else 1 if buf.endswith(b"\xff") else 0
                self.bytes_discarded += len(buf) - keep
                del buf[:len(buf) - keep]
                return
            if start:
                self.bytes_discarded += start
                del buf[:start]
                self._rx_since = now
            if len(buf) < 7:
                return
            length = buf[5] | (buf[6] << 8)
            if length < 3 or length > MAX_PACKET_LENGTH:
                self.bytes_discarded += 1
                del buf[:1]
                continue
            total = 7 + length
            if len(buf) < total:
                if now - self._rx_since > STALE_PARTIAL_PACKET_S:
                    self.bytes_discarded += 1  # a truncated packet; resynchronise
                    del buf[:1]
                    continue
                return
            frame = bytes(buf[:total])
            received_crc = frame[-2] | (frame[-1] << 8)
            if crc16(frame[:-2]) != received_crc:
                self.crc_errors += 1
                # Drop only the header byte: the stuffed body cannot hide a real header,
                # and a corrupted length must not swallow the next packet.
                del buf[:1]
                reply = self._crc_error_reply(frame, now)
                if reply:
                    yield reply
                continue
            del buf[:total]
            self._rx_since = now
            self.packets_received += 1
            body = unstuff(frame[7:-2])
            yield Packet(frame[4], body[0], body[1:])

    def _crc_error_reply(self, frame: bytes, now: float) -> bytes:
        """A servo whose id the damaged packet carries answers with a CRC error."""
        dxl_id = frame[4]
        instruction = frame[7] if len(frame) > 9 else INST_PING
        if dxl_id == BROADCAST_ID:
            return b""
        out = bytearray()
        for servo in self._listening(now, note_activity=False):
            if servo.id == dxl_id and _should_answer(servo, instruction):
                out += self._status(servo, ERR_CRC)
        return bytes(out)

    def _listening(self, now: float, *, note_activity: bool = True) -> list[EmulatedServo]:
        client_baud = self._client_baud() if self.check_baud else None
        servos = []
        for servo in self._servos:
            if not servo.online:
                continue
            if client_baud is not None and servo.baud_rate != client_baud:
                continue  # at another speed the bytes are garbage to this servo
            servo.advance(now)
            if note_activity:
                servo.note_bus_activity(now)
            servos.append(servo)
        return servos

    def _status(self, servo: EmulatedServo, error: int, params: bytes = b"") -> bytes:
        self.status_packets_sent += 1
        return build_status(servo.id, error | servo.alert_bit(), params)

    def _dispatch(self, packet: Packet, now: float) -> bytes:
        self.instruction_counts[packet.instruction] = \
            self.instruction_counts.get(packet.instruction, 0) + 1
        servos = self._listening(now)
        if not servos:
            return b""
        handler = self._HANDLERS.get(packet.instruction)
        if handler is None:
            return b"".join(self._status(s, ERR_INSTRUCTION) for s in servos
                            if s.id == packet.dxl_id and _should_answer(s, packet.instruction))
        return handler(self, packet, servos)

    # Addressing helpers: (servo, addressed_by_primary_id) for the servos that execute.
    @staticmethod
    def _addressed(packet: Packet, servos: list[EmulatedServo], *, allow_secondary: bool
                   ) -> list[tuple[EmulatedServo, bool]]:
        if packet.dxl_id == BROADCAST_ID:
            return [(servo, False) for servo in servos]
        hits = []
        for servo in servos:
            if servo.id == packet.dxl_id:
                hits.append((servo, True))
            elif allow_secondary and servo.secondary_id == packet.dxl_id:
                hits.append((servo, False))
        return hits

    def _answer(self, servo: EmulatedServo, primary: bool, instruction: int,
                error: int, params: bytes = b"") -> bytes:
        if primary and _should_answer(servo, instruction):
            return self._status(servo, error, params)
        return b""

    def _on_ping(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        if packet.dxl_id == BROADCAST_ID:
            return b"".join(self._status(s, ERR_NONE, s.ping_params())
                            for s in sorted(servos, key=lambda s: s.id))
        return b"".join(self._status(s, ERR_NONE, s.ping_params())
                        for s in servos if s.id == packet.dxl_id)

    def _on_read(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        out = bytearray()
        for servo, primary in self._addressed(packet, servos, allow_secondary=False):
            if not primary:
                continue  # a broadcast read gets no answer
            if len(packet.params) != 4:
                out += self._answer(servo, True, INST_READ, ERR_INSTRUCTION)
                continue
            address, length = struct.unpack("<HH", packet.params)
            error, data = servo.read_bytes(address, length)
            out += self._answer(servo, True, INST_READ, error, data)
        return bytes(out)

    def _on_write(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        out = bytearray()
        register = packet.instruction == INST_REG_WRITE
        for servo, primary in self._addressed(packet, servos, allow_secondary=True):
            if len(packet.params) < 3:
                out += self._answer(servo, primary, packet.instruction, ERR_INSTRUCTION)
                continue
            address = packet.params[0] | (packet.params[1] << 8)
            data = packet.params[2:]
            via_secondary = not primary and packet.dxl_id != BROADCAST_ID
            write = servo.register_write if register else servo.write_bytes
            error = write(address, data, via_secondary=via_secondary)
            out += self._answer(servo, primary, packet.instruction, error)
        return bytes(out)

    def _on_action(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        out = bytearray()
        for servo, primary in self._addressed(packet, servos, allow_secondary=True):
            if not primary and not servo.has_registered_write:
                continue  # broadcast action: only servos holding a registered write act
            out += self._answer(servo, primary, INST_ACTION, servo.action())
        return bytes(out)

    def _on_reboot(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        out = bytearray()
        for servo, primary in self._addressed(packet, servos, allow_secondary=False):
            out += self._answer(servo, primary, INST_REBOOT, ERR_NONE)  # answer, then reboot
            servo.reboot()
        return bytes(out)

    def _on_factory_reset(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        option = packet.params[0] if packet.params else 0xFF
        if packet.dxl_id == BROADCAST_ID and option == 0xFF:
            return b""  # refused by the firmware: it would give every servo id 1
        out = bytearray()
        for servo, primary in self._addressed(packet, servos, allow_secondary=False):
            if option not in (0x01, 0x02, 0xFF):
                out += self._answer(servo, primary, INST_FACTORY_RESET, ERR_DATA_RANGE)
                continue
            out += self._answer(servo, primary, INST_FACTORY_RESET, ERR_NONE)
            servo.factory_reset(option)
        return bytes(out)

    def _on_clear(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        out = bytearray()
        valid = packet.params == bytes([0x01, 0x44, 0x58, 0x4C, 0x22])
        for servo, primary in self._addressed(packet, servos, allow_secondary=False):
            error = servo.clear_multi_turn() if valid else ERR_DATA_RANGE
            out += self._answer(servo, primary, INST_CLEAR, error)
        return bytes(out)

    @staticmethod
    def _find(servos: list[EmulatedServo], dxl_id: int) -> Optional[EmulatedServo]:
        for servo in servos:
            if servo.id == dxl_id:
                return servo
        return None

    def _read_requests(self, packet: Packet) -> Optional[list[tuple[int, int, int]]]:
        """[(id, address, length)] of a sync or bulk read, in the order listed."""
        params = packet.params
        if packet.instruction in (INST_SYNC_READ, INST_FAST_SYNC_READ):
            if len(params) < 5:
                return None
            address, length = struct.unpack("<HH", params[:4])
            return [(dxl_id, address, length) for dxl_id in params[4:]]
        if len(params) % 5 or not params:
            return None
        return [(params[i], *struct.unpack("<HH", params[i + 1:i + 5]))
                for i in range(0, len(params), 5)]

    def _on_group_read(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        if packet.dxl_id != BROADCAST_ID:
            return b""
        requests = self._read_requests(packet)
        if requests is None:
            return b""
        answers = []
        for dxl_id, address, length in requests:
            servo = self._find(servos, dxl_id)
            if servo is None or not _should_answer(servo, packet.instruction):
                continue
            error, data = servo.read_bytes(address, length)
            answers.append((servo, error, data))
        if packet.instruction in (INST_FAST_SYNC_READ, INST_FAST_BULK_READ):
            return self._fast_read_packet(answers)
        return b"".join(self._status(servo, error, data) for servo, error, data in answers)

    def _fast_read_packet(self, answers) -> bytes:
        """One status packet for all servos: [error, id, data, crc16] per servo, where each
        CRC covers the packet up to its own data (the last one is the packet CRC)."""
        if not answers:
            return b""
        length = 1 + sum(4 + len(data) for _, _, data in answers)
        frame = bytearray(HEADER + bytes([BROADCAST_ID]) + struct.pack("<H", length)
                          + bytes([INST_STATUS]))
        for servo, error, data in answers:
            frame += bytes([error | servo.alert_bit(), servo.id]) + data
            frame += struct.pack("<H", crc16(frame))
        self.status_packets_sent += 1
        return bytes(frame)

    def _on_sync_write(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        params = packet.params
        if packet.dxl_id != BROADCAST_ID or len(params) < 4:
            return b""
        address, length = struct.unpack("<HH", params[:4])
        blocks: dict[int, bytes] = {}
        stride = 1 + length
        for i in range(4, len(params) - stride + 1, stride):
            blocks.setdefault(params[i], params[i + 1:i + stride])
        self._group_write(servos, {k: (address, v) for k, v in blocks.items()})
        return b""

    def _on_bulk_write(self, packet: Packet, servos: list[EmulatedServo]) -> bytes:
        params = packet.params
        if packet.dxl_id != BROADCAST_ID:
            return b""
        blocks: dict[int, tuple[int, bytes]] = {}
        i = 0
        while i + 5 <= len(params):
            dxl_id = params[i]
            address = params[i + 1] | (params[i + 2] << 8)
            length = params[i + 3] | (params[i + 4] << 8)
            blocks.setdefault(dxl_id, (address, params[i + 5:i + 5 + length]))
            i += 5 + length
        self._group_write(servos, blocks)
        return b""

    @staticmethod
    def _group_write(servos: list[EmulatedServo], blocks: Mapping[int, tuple[int, bytes]]) -> None:
        # A servo takes the block for its own id; failing that, the one for its shadow id.
        for servo in servos:
            if servo.id in blocks:
                address, data = blocks[servo.id]
                servo.write_bytes(address, data)
            elif servo.secondary_id is not None and servo.secondary_id in blocks:
                address, data = blocks[servo.secondary_id]
                servo.write_bytes(address, data, via_secondary=True)

    _HANDLERS = {
        INST_PING: _on_ping,
        INST_READ: _on_read,
        INST_WRITE: _on_write,
        INST_REG_WRITE: _on_write,
        INST_ACTION: _on_action,
        INST_FACTORY_RESET: _on_factory_reset,
        INST_REBOOT: _on_reboot,
        INST_CLEAR: _on_clear,
        INST_SYNC_READ: _on_group_read,
        INST_FAST_SYNC_READ: _on_group_read,
        INST_BULK_READ: _on_group_read,
        INST_FAST_BULK_READ: _on_group_read,
        INST_SYNC_WRITE: _on_sync_write,
        INST_BULK_WRITE: _on_bulk_write,
    }


# --------------------------------------------------------------------------------------
# Standalone use
# --------------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Emulate an ALOHA arm's Dynamixel bus on a pty reachable at --link.")
    parser.add_argument("--link", required=True, help="symlink to create, e.g. /tmp/dxl/ttyDXL0")
    parser.add_argument("--arm", choices=sorted(ARM_FACTORIES), default="viperx")
    parser.add_argument("--baud", type=int, default=1_000_000, choices=sorted(BAUD_CODES))
    parser.add_argument("--independent-shadows", action="store_true",
                        help="do not configure secondary ids on the shadow motors")
    parser.add_argument("--no-baud-check", action="store_true",
                        help="answer whatever serial speed the client sets")
    args = parser.parse_args(argv)

    servos = ARM_FACTORIES[args.arm](secondary_ids=not args.independent_shadows)
    bus = DynamixelBus(args.link, servos, baud=args.baud, check_baud=not args.no_baud_check)
    # The handler only flips a flag: taking a lock there (Event.set) can deadlock if the
    # signal lands while the main thread holds that same lock.
    stop_requested = []
    signal.signal(signal.SIGINT, lambda *_: stop_requested.append(True))
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.append(True))
    with bus:
        print(f"{args.arm}: ids {[s.id for s in servos]} on {args.link} -> {bus.slave_path}",
              flush=True)
        while not stop_requested:
            time.sleep(0.2)
    print(f"stopped: {bus.packets_received} packets, {bus.crc_errors} CRC errors", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
