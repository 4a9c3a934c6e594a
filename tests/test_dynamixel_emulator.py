"""The Dynamixel emulator against the real ``dynamixel_sdk`` (Protocol 2.0) client."""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dynamixel_sdk as sdk  # the real client under test
import serial

# A hardware protocol in real time (link timeouts of tens of ms): run alone, never beside another
# test file (make test runs these after the others, one at a time).
pytestmark = pytest.mark.realtime

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `tests` is imported as a package from the repo root
    sys.path.insert(0, str(REPO_ROOT))

from dynamixel_sdk.protocol2_packet_handler import (  # noqa: E402
    ERRNUM_ACCESS, ERRNUM_CRC, ERRNUM_DATA_LENGTH, ERRNUM_DATA_LIMIT, ERRNUM_DATA_RANGE,
    Protocol2PacketHandler)

from r2s2r.waiting import wait_for  # noqa: E402
from tests.emulators.dynamixel_emulator import (  # noqa: E402
    ALOHA_JOINTS, BROADCAST_ID, INST_READ, INST_WRITE, DynamixelBus, build_packet,
    build_status, crc16, stuff, unstuff, viperx_follower)

COMM_SUCCESS = sdk.COMM_SUCCESS
COMM_RX_TIMEOUT = sdk.COMM_RX_TIMEOUT
PACKET = sdk.PacketHandler(2.0)
BAUD = 1_000_000
IDS = list(range(1, 10))
VIPERX_MODELS = {1: 1120, 2: 1120, 3: 1120, 4: 1120, 5: 1120, 6: 1120, 7: 1120,
                 8: 1020, 9: 1020}
# Velocity Limit 131 (as ALOHA configures it) x 0.229 rev/min = 30 rev/min = 2048 ticks/s.
ALOHA_SPEED_TICKS_S = 131 * 0.229 * 4096 / 60

ADDR_TORQUE_ENABLE, ADDR_LED, ADDR_OPERATING_MODE = 64, 65, 11
ADDR_GOAL_POSITION, ADDR_PRESENT_POSITION = 116, 132


def signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


def comm_fails(call) -> bool:
    """True when an SDK call does not succeed: an error result, or the port raising
    (pyserial/termios report a vanished pty as exceptions, like an unplugged U2D2)."""
    try:
        result = call()
    except (serial.SerialException, OSError, Exception):  # noqa: B014 - any failure counts
        return True
    comm = result[1] if isinstance(result, tuple) and len(result) == 3 else (
        result[0] if isinstance(result, tuple) else result)
    return comm != COMM_SUCCESS


def open_port(path: str) -> "sdk.PortHandler":
    port = sdk.PortHandler(path)
    assert port.openPort()
    assert port.setBaudRate(BAUD)
    return port


@pytest.fixture(autouse=True)
def wider_reply_window(monkeypatch):
    """The in-process emulator shares the GIL with the SDK, which busy-waits for replies;
    on a loaded CI machine a reply can miss the SDK's 34 ms window (LATENCY_TIMER=16 ms,
    the FTDI default). A ~200 ms window keeps scheduler stalls from looking like lost
    packets; tests that expect a timeout pay that window each time."""
    monkeypatch.setattr(sdk.port_handler, "LATENCY_TIMER", 100)


@pytest.fixture
def bus(tmp_path):
    with DynamixelBus(tmp_path / "dev" / "ttyDXL0", viperx_follower()) as emulated:
        yield emulated
    assert not emulated.internal_errors, emulated.internal_errors[0]


@pytest.fixture
def port(bus):
    handler = open_port(bus.link_path)
    yield handler
    try:
        handler.closePort()
    except Exception:  # the test may have pulled the pty from under it
        pass


def sync_write(port, address: int, size: int, values: dict[int, int]) -> None:
    group = sdk.GroupSyncWrite(port, PACKET, address, size)
    for dxl_id, value in values.items():
        raw = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        assert group.addParam(dxl_id, list(raw))
    assert group.txPacket() == COMM_SUCCESS


def sync_read_positions(port, ids) -> dict[int, int]:
    return {dxl_id: position for dxl_id, (_, position) in sync_read_motion(port, ids).items()}


def sync_read_motion(port, ids) -> dict[int, tuple[int, int]]:
    """{id: (present velocity, present position)} from one sync read of 128..135."""
    group = sdk.GroupSyncRead(port, PACKET, 128, 8)
    for dxl_id in ids:
        group.addParam(dxl_id)
    assert group.txRxPacket() == COMM_SUCCESS
    return {dxl_id: (signed(group.getData(dxl_id, 128, 4), 32),
                     signed(group.getData(dxl_id, ADDR_PRESENT_POSITION, 4), 32))
            for dxl_id in ids}


# -- packet layer ----------------------------------------------------------------------


def test_crc_matches_sdk_and_manual_examples():
    reference = Protocol2PacketHandler()
    rng = random.Random(7)
    for length in (0, 1, 7, 64, 300):
        data = bytes(rng.randrange(256) for _ in range(length))
        assert crc16(data) == reference.updateCRC(0, list(data), len(data))
    # Ping of id 1 and its answer (XM430-W210: model 1030, firmware 38), from the manual.
    assert build_packet(1, 0x01) == bytes.fromhex("fffffd0001030001194e")
    assert build_status(1, 0, bytes([0x06, 0x04, 0x26])) == bytes.fromhex(
        "fffffd000107005500060426655d")


def test_stuffing_helpers_agree_with_sdk():
    body = bytes([0x03, 0x74, 0x00, 0xFF, 0xFF, 0xFD, 0xFF, 0xFF, 0xFF, 0xFD, 0xFD])
    stuffed = stuff(body)
    assert stuffed == bytes([0x03, 0x74, 0x00, 0xFF, 0xFF, 0xFD, 0xFD, 0xFF, 0xFF, 0xFF, 0xFD,
                             0xFD, 0xFD])
    assert unstuff(stuffed) == body
    # The SDK stuffs its own transmit buffers: same length and bytes as ours.
    sdk_packet = [0, 0, 0, 0, 1, len(body) + 2, 0] + list(body) + [0, 0]
    sdk_stuffed = Protocol2PacketHandler().addStuffing(sdk_packet)
    assert bytes(sdk_stuffed[7:-2]) == stuffed


# -- discovery, read and write ---------------------------------------------------------


def test_ping_and_broadcast_ping_find_all_servos(port):
    for dxl_id in IDS:
        model, comm, error = PACKET.ping(port, dxl_id)
        assert (comm, error, model) == (COMM_SUCCESS, 0, VIPERX_MODELS[dxl_id])
    model, comm, _ = PACKET.ping(port, 42)
    assert comm == COMM_RX_TIMEOUT and model == 0

    found, comm = PACKET.broadcastPing(port)
    assert comm == COMM_SUCCESS
    assert {dxl_id: info[0] for dxl_id, info in found.items()} == VIPERX_MODELS
    assert all(info[1] >= 45 for info in found.values())  # firmware version


def test_read_write_items_of_each_size(port, bus):
    servo = bus.servo(4)
    assert PACKET.write1ByteTxRx(port, 4, ADDR_LED, 1) == (COMM_SUCCESS, 0)
    assert PACKET.read1ByteTxRx(port, 4, ADDR_LED) == (1, COMM_SUCCESS, 0)
    assert PACKET.write2ByteTxRx(port, 4, 84, 1234) == (COMM_SUCCESS, 0)  # Position P Gain
    assert PACKET.read2ByteTxRx(port, 4, 84) == (1234, COMM_SUCCESS, 0)
    assert PACKET.write4ByteTxRx(port, 4, 112, 70000 % 32768) == (COMM_SUCCESS, 0)
    assert PACKET.read4ByteTxRx(port, 4, 112) == (70000 % 32768, COMM_SUCCESS, 0)
    # Signed values are little-endian two's complement (Homing Offset, EEPROM, torque off).
    assert PACKET.write4ByteTxRx(port, 4, 20, -1234 & 0xFFFFFFFF) == (COMM_SUCCESS, 0)
    value, comm, _ = PACKET.read4ByteTxRx(port, 4, 20)
    assert comm == COMM_SUCCESS and signed(value, 32) == -1234
    assert servo.read_item("homing_offset") == -1234
    assert signed(PACKET.read4ByteTxRx(port, 4, ADDR_PRESENT_POSITION)[0], 32) == 2048 - 1234
    # A 2-byte read of the model number and a 1-byte read of the id.
    assert PACKET.read2ByteTxRx(port, 4, 0) == (1120, COMM_SUCCESS, 0)
    assert PACKET.read1ByteTxRx(port, 4, 7) == (4, COMM_SUCCESS, 0)


def test_write_errors_change_nothing(port, bus):
    servo = bus.servo(2)  # shoulder: position limits 841..2867
    # Read-only item.
    assert PACKET.write4ByteTxRx(port, 2, ADDR_PRESENT_POSITION, 5) == (COMM_SUCCESS, ERRNUM_ACCESS)
    # Half of a 4-byte item.
    assert PACKET.write2ByteTxRx(port, 2, ADDR_GOAL_POSITION, 100) == (COMM_SUCCESS,
                                                                       ERRNUM_DATA_LENGTH)
    # Beyond Max Position Limit in position mode.
    assert PACKET.write4ByteTxRx(port, 2, ADDR_GOAL_POSITION, 3000) == (COMM_SUCCESS,
                                                                        ERRNUM_DATA_LIMIT)
    # An operating mode the servo does not have.
    assert PACKET.write1ByteTxRx(port, 2, ADDR_OPERATING_MODE, 2) == (COMM_SUCCESS,
                                                                      ERRNUM_DATA_RANGE)
    assert servo.goal_position == 2048 and servo.operating_mode == 3


def test_eeprom_write_refused_while_torque_on(port, bus):
    assert PACKET.write1ByteTxRx(port, 6, ADDR_TORQUE_ENABLE, 1) == (COMM_SUCCESS, 0)
    assert PACKET.write1ByteTxRx(port, 6, ADDR_OPERATING_MODE, 4) == (COMM_SUCCESS, ERRNUM_ACCESS)
    assert PACKET.write4ByteTxRx(port, 6, 44, 50) == (COMM_SUCCESS, ERRNUM_ACCESS)  # Velocity Limit
    assert bus.servo(6).operating_mode == 3 and bus.servo(6).read_item("velocity_limit") == 131
    assert PACKET.write1ByteTxRx(port, 6, ADDR_TORQUE_ENABLE, 0) == (COMM_SUCCESS, 0)
    assert PACKET.write1ByteTxRx(port, 6, ADDR_OPERATING_MODE, 4) == (COMM_SUCCESS, 0)
    assert bus.servo(6).operating_mode == 4


def test_write_to_primary_id_also_drives_its_shadow(port, bus):
    assert PACKET.write1ByteTxRx(port, 2, ADDR_LED, 1) == (COMM_SUCCESS, 0)
    assert bus.servo(3).read_item("led") == 1      # secondary id 2
    assert bus.servo(5).read_item("led") == 0      # shadow of 4, untouched
    # EEPROM cannot be changed through a secondary id.
    assert PACKET.write4ByteTxRx(port, 2, 44, 100) == (COMM_SUCCESS, 0)
    assert bus.servo(2).read_item("velocity_limit") == 100
    assert bus.servo(3).read_item("velocity_limit") == 131


# -- motion ------------------------------------------------------------------------------


def test_sync_write_moves_all_joints_at_bounded_speed(port, bus):
    primaries = [1, 2, 4, 6, 7, 8, 9]  # the shadows 3 and 5 follow through secondary ids
    sync_write(port, ADDR_TORQUE_ENABLE, 1, {dxl_id: 1 for dxl_id in primaries})
    # A sync write gets no answer: wait until the servos have taken it.
    assert wait_for(lambda: all(bus.servo(dxl_id).torque_enabled for dxl_id in IDS), timeout=2.0)
    goals = {dxl_id: 2048 + 800 for dxl_id in primaries}
    goals[1] = 2048 - 800  # one joint the other way
    sent = time.monotonic()  # the move cannot have started before this
    sync_write(port, ADDR_GOAL_POSITION, 4, goals)
    goals[3], goals[5] = goals[2], goals[4]
    assert wait_for(lambda: bus.servo(3).goal_position == goals[3], timeout=2.0)

    time.sleep(0.15)
    motion = sync_read_motion(port, IDS)
    elapsed = time.monotonic() - sent
    for dxl_id, (velocity, position) in motion.items():
        direction = 1 if goals[dxl_id] > 2048 else -1
        assert 0 < direction * (position - 2048) < 800, (dxl_id, position)  # under way
        assert abs(position - 2048) <= ALOHA_SPEED_TICKS_S * elapsed + 5, (dxl_id, elapsed)
        assert abs(velocity - direction * 131) <= 1, (dxl_id, velocity)     # at the bound

    assert wait_for(lambda: sync_read_positions(port, IDS) == goals, timeout=2.0)
    assert time.monotonic() - sent >= 800 / ALOHA_SPEED_TICKS_S - 0.01
    moving, comm, _ = PACKET.read1ByteTxRx(port, 1, 122)
    assert comm == COMM_SUCCESS and moving == 0


def test_sync_read_of_current_velocity_position_block_is_consistent(port, bus):
    assert PACKET.write1ByteTxRx(port, 7, ADDR_TORQUE_ENABLE, 1) == (COMM_SUCCESS, 0)
    assert PACKET.write4ByteTxRx(port, 7, ADDR_GOAL_POSITION, 3400) == (COMM_SUCCESS, 0)
    time.sleep(0.1)
    group = sdk.GroupSyncRead(port, PACKET, 126, 10)
    for dxl_id in IDS:
        assert group.addParam(dxl_id)
    assert group.txRxPacket() == COMM_SUCCESS
    for dxl_id in IDS:
        assert group.isAvailable(dxl_id, 126, 10)
        current = signed(group.getData(dxl_id, 126, 2), 16)
        velocity = signed(group.getData(dxl_id, 128, 4), 32)
        position = signed(group.getData(dxl_id, 132, 4), 32)
        if dxl_id == 7:
            assert abs(velocity - 131) <= 1        # at its Velocity Limit
            assert current > 0                     # friction while moving
            assert 2048 < position < 3400
            assert abs(bus.servo(7).present_position - position) <= ALOHA_SPEED_TICKS_S * 0.05
        else:
            assert (current, velocity, position) == (0, 0, 2048)


def test_bulk_read_mixes_addresses_and_lengths(port, bus):
    bus.servo(9).temperature = 41
    group = sdk.GroupBulkRead(port, PACKET)
    assert group.addParam(1, ADDR_PRESENT_POSITION, 4)
    assert group.addParam(9, 146, 1)   # Present Temperature
    assert group.addParam(8, 0, 2)     # Model Number
    assert group.addParam(2, 144, 2)   # Present Input Voltage
    assert group.txRxPacket() == COMM_SUCCESS
    assert group.getData(1, ADDR_PRESENT_POSITION, 4) == 2048
    assert group.getData(9, 146, 1) == 41
    assert group.getData(8, 0, 2) == 1020
    assert group.getData(2, 144, 2) == 120


def test_time_based_profile_reaches_goal_on_time(port, bus):
    # ALOHA's Interbotix config drives the arm with time-based profiles (Drive Mode bit 2).
    assert PACKET.write1ByteTxRx(port, 1, 10, 0x04) == (COMM_SUCCESS, 0)
    assert PACKET.write4ByteTxRx(port, 1, 108, 100) == (COMM_SUCCESS, 0)  # ramp 100 ms
    assert PACKET.write4ByteTxRx(port, 1, 112, 400) == (COMM_SUCCESS, 0)  # move in 400 ms
    assert PACKET.write1ByteTxRx(port, 1, ADDR_TORQUE_ENABLE, 1) == (COMM_SUCCESS, 0)

    def progress(t: float) -> float:  # trapezoid: 100 ms ramps, 500 ticks in 400 ms
        cruise, ramp = 500 / 0.3, 0.1
        t = min(max(t, 0.0), 0.4)
        if t < ramp:
            return 0.5 * cruise / ramp * t * t
        if t < 0.4 - ramp:
            return 0.5 * cruise * ramp + cruise * (t - ramp)
        return 500 - 0.5 * cruise / ramp * (0.4 - t) ** 2

    sent = time.monotonic()
    assert PACKET.write4ByteTxRx(port, 1, ADDR_GOAL_POSITION, 2548) == (COMM_SUCCESS, 0)
    answered = time.monotonic()  # the servo took the goal between `sent` and `answered`
    time.sleep(0.2)
    before = time.monotonic()
    middle = bus.servo(1).present_position - 2048
    after = time.monotonic()
    assert progress(before - answered) - 1 <= middle <= progress(after - sent) + 1
    assert 0 < middle < 500
    assert wait_for(lambda: bus.servo(1).present_position == 2548, timeout=1.0)
    assert time.monotonic() - sent > 0.36  # the default speed would take only 0.24 s


def test_gripper_closing_on_an_object_stops_and_current_rises(port, bus):
    gripper = bus.servo(9)
    gripper.set_obstacle(2300)  # an object between the fingers
    assert PACKET.write1ByteTxRx(port, 9, ADDR_OPERATING_MODE, 5) == (COMM_SUCCESS, 0)
    assert PACKET.write2ByteTxRx(port, 9, 102, 300) == (COMM_SUCCESS, 0)  # Goal Current
    assert PACKET.write1ByteTxRx(port, 9, ADDR_TORQUE_ENABLE, 1) == (COMM_SUCCESS, 0)
    assert PACKET.write4ByteTxRx(port, 9, ADDR_GOAL_POSITION, 2900) == (COMM_SUCCESS, 0)
    assert wait_for(lambda: gripper.present_position == 2300, timeout=1.0)
    assert wait_for(lambda: gripper.present_current > 250, timeout=1.0)
    current, comm, _ = PACKET.read2ByteTxRx(port, 9, 126)
    assert comm == COMM_SUCCESS and 250 < signed(current, 16) <= 300
    status, comm, _ = PACKET.read1ByteTxRx(port, 9, 123)
    assert comm == COMM_SUCCESS
    assert status & 0x08 and not status & 0x01, status  # following error, not in position
    assert gripper.present_position == 2300
    # Opening again moves away from the object and the squeeze goes away.
    assert PACKET.write4ByteTxRx(port, 9, ADDR_GOAL_POSITION, 2048) == (COMM_SUCCESS, 0)
    assert wait_for(lambda: gripper.present_position == 2048, timeout=1.0)
    assert wait_for(lambda: abs(gripper.present_current) < 20, timeout=1.0)


def test_velocity_mode_spins_at_goal_velocity(port, bus):
    assert PACKET.write1ByteTxRx(port, 6, ADDR_OPERATING_MODE, 1) == (COMM_SUCCESS, 0)
    assert PACKET.write1ByteTxRx(port, 6, ADDR_TORQUE_ENABLE, 1) == (COMM_SUCCESS, 0)
    ticks_per_s = 50 * 0.229 * 4096 / 60
    sent = time.monotonic()
    assert PACKET.write4ByteTxRx(port, 6, 104, 50) == (COMM_SUCCESS, 0)  # Goal Velocity
    answered = time.monotonic()
    time.sleep(0.2)
    before = time.monotonic()
    moved = bus.servo(6).present_position - 2048
    after = time.monotonic()
    assert ticks_per_s * (before - answered) - 2 <= moved <= ticks_per_s * (after - sent) + 2
    assert PACKET.read4ByteTxRx(port, 6, 128) == (50, COMM_SUCCESS, 0)
    assert PACKET.write4ByteTxRx(port, 6, 104, 500) == (COMM_SUCCESS, ERRNUM_DATA_LIMIT)


def test_hardware_error_sets_alert_and_needs_a_reboot(port, bus):
    bus.servo(8).inject_hardware_error(0x20)  # overload: a shutdown bit by default
    value, comm, error = PACKET.read1ByteTxRx(port, 8, 70)
    assert (value, comm, error) == (0x20, COMM_SUCCESS, 0x80)  # alert bit on every status
    assert PACKET.write1ByteTxRx(port, 8, ADDR_TORQUE_ENABLE, 1) == (COMM_SUCCESS, 0x80 | 0x01)
    assert PACKET.reboot(port, 8) == (COMM_SUCCESS, 0x80)  # answered before rebooting
    assert PACKET.read1ByteTxRx(port, 8, 70) == (0, COMM_SUCCESS, 0)
    assert PACKET.write1ByteTxRx(port, 8, ADDR_TORQUE_ENABLE, 1) == (COMM_SUCCESS, 0)


# -- robustness --------------------------------------------------------------------------


def test_corrupted_crc_gets_crc_error_and_no_action(port, bus):
    packet = bytearray(build_packet(3, INST_WRITE, struct.pack("<HI", ADDR_GOAL_POSITION, 2500)))
    packet[-1] ^= 0x5A
    before = bus.crc_errors
    port.clearPort()
    port.writePort(bytes(packet))
    port.setPacketTimeout(11)
    reply, comm = PACKET.rxPacket(port, False)
    assert comm == COMM_SUCCESS and reply[4] == 3 and reply[8] == ERRNUM_CRC
    assert bus.crc_errors == before + 1
    assert bus.servo(3).goal_position == 2048
    # Broadcast garbage is counted but never answered, and the bus still works after it.
    noisy = bytearray(build_packet(BROADCAST_ID, INST_WRITE, bytes([ADDR_LED, 0, 1])))
    noisy[-2] ^= 0xFF
    port.writePort(b"\x00\x13" + bytes(noisy))
    assert wait_for(lambda: bus.crc_errors == before + 2, timeout=1.0)
    assert PACKET.read1ByteTxRx(port, 3, ADDR_LED) == (0, COMM_SUCCESS, 0)


def test_byte_stuffing_round_trips_a_value_containing_the_header(port, bus):
    value = -131073  # little-endian bytes FF FF FD FF
    assert (value & 0xFFFFFFFF).to_bytes(4, "little") == b"\xff\xff\xfd\xff"
    assert PACKET.write1ByteTxRx(port, 6, ADDR_OPERATING_MODE, 4) == (COMM_SUCCESS, 0)
    assert PACKET.write4ByteTxRx(port, 6, ADDR_GOAL_POSITION, value & 0xFFFFFFFF) == (
        COMM_SUCCESS, 0)
    assert bus.servo(6).goal_position == value
    data, comm, error = PACKET.read4ByteTxRx(port, 6, ADDR_GOAL_POSITION)
    assert (comm, error) == (COMM_SUCCESS, 0) and signed(data, 32) == value
    # On the wire the answer really is stuffed.
    port.clearPort()
    port.writePort(build_packet(6, INST_READ, struct.pack("<HH", ADDR_GOAL_POSITION, 4)))
    raw = b""
    deadline = time.monotonic() + 1.0
    while len(raw) < 16 and time.monotonic() < deadline:
        raw += port.readPort(16 - len(raw))
    assert raw == build_status(6, 0, b"\xff\xff\xfd\xff") and b"\xff\xff\xfd\xfd\xff" in raw


def test_stop_breaks_the_port_and_restart_serves_the_same_link(bus, port):
    assert PACKET.write1ByteTxRx(port, 8, ADDR_LED, 1) == (COMM_SUCCESS, 0)
    old_slave = bus.slave_path
    bus.stop()
    assert not os.path.lexists(bus.link_path)
    assert comm_fails(lambda: PACKET.read1ByteTxRx(port, 8, ADDR_LED))
    with pytest.raises(serial.SerialException):
        sdk.PortHandler(bus.link_path).openPort()

    bus.restart()
    assert os.path.realpath(bus.link_path) == bus.slave_path
    assert bus.slave_path != old_slave or os.path.exists(bus.slave_path)
    fresh = open_port(bus.link_path)
    try:
        assert PACKET.read1ByteTxRx(fresh, 8, ADDR_LED) == (1, COMM_SUCCESS, 0)  # state kept
        assert PACKET.ping(fresh, 1)[1] == COMM_SUCCESS
    finally:
        fresh.closePort()


def test_unplug_times_out_and_replug_recovers(bus, port):
    assert PACKET.ping(port, 2)[1] == COMM_SUCCESS
    bus.unplug()
    assert PACKET.read4ByteTxRx(port, 2, ADDR_PRESENT_POSITION)[1] == COMM_RX_TIMEOUT
    assert PACKET.write1ByteTxRx(port, 2, ADDR_LED, 1)[0] == COMM_RX_TIMEOUT
    assert bus.servo(2).read_item("led") == 0  # the write never arrived
    assert bus.bytes_ignored_unplugged > 0
    bus.replug()
    assert PACKET.read4ByteTxRx(port, 2, ADDR_PRESENT_POSITION) == (2048, COMM_SUCCESS, 0)


def test_wrong_baud_rate_gets_no_answer(port):
    assert port.setBaudRate(57600)
    assert PACKET.ping(port, 1)[1] == COMM_RX_TIMEOUT
    assert port.setBaudRate(BAUD)
    assert PACKET.ping(port, 1)[1] == COMM_SUCCESS


def test_bus_watchdog_stops_the_servo_and_locks_goals(port, bus):
    assert PACKET.write1ByteTxRx(port, 4, ADDR_TORQUE_ENABLE, 1) == (COMM_SUCCESS, 0)
    assert PACKET.write1ByteTxRx(port, 4, 98, 5) == (COMM_SUCCESS, 0)  # 100 ms
    assert PACKET.write4ByteTxRx(port, 4, ADDR_GOAL_POSITION, 3000) == (COMM_SUCCESS, 0)
    time.sleep(0.3)  # silence on the bus
    assert PACKET.read1ByteTxRx(port, 4, 98) == (0xFF, COMM_SUCCESS, 0)  # -1: watchdog error
    stopped_at = bus.servo(4).present_position
    assert 2048 < stopped_at < 3000 and bus.servo(4).goal_position == stopped_at
    assert PACKET.write4ByteTxRx(port, 4, ADDR_GOAL_POSITION, 2100) == (COMM_SUCCESS,
                                                                        ERRNUM_DATA_RANGE)
    assert PACKET.write1ByteTxRx(port, 4, 98, 0) == (COMM_SUCCESS, 0)  # clear the error
    assert PACKET.write4ByteTxRx(port, 4, ADDR_GOAL_POSITION, 2100) == (COMM_SUCCESS, 0)


def test_reg_write_action_reboot_and_status_return_level(port, bus):
    assert PACKET.regWriteTxRx(port, 1, ADDR_LED, 1, [1]) == (COMM_SUCCESS, 0)
    assert bus.servo(1).read_item("led") == 0
    assert PACKET.read1ByteTxRx(port, 1, 69) == (1, COMM_SUCCESS, 0)  # Registered Instruction
    assert PACKET.action(port, BROADCAST_ID) == COMM_SUCCESS
    assert wait_for(lambda: bus.servo(1).read_item("led") == 1, timeout=2.0)
    assert bus.servo(1).read_item("registered_instruction") == 0

    assert PACKET.write1ByteTxRx(port, 1, ADDR_TORQUE_ENABLE, 1) == (COMM_SUCCESS, 0)
    assert PACKET.reboot(port, 1) == (COMM_SUCCESS, 0)
    assert not bus.servo(1).torque_enabled and bus.servo(1).read_item("led") == 0
    assert bus.servo(1).read_item("velocity_limit") == 131  # EEPROM survives

    # Level 1: reads answer, writes do not (the write still happens). The level applies
    # from the write that sets it, so that write already goes unanswered.
    assert PACKET.write1ByteTxRx(port, 1, 68, 1)[0] == COMM_RX_TIMEOUT
    assert bus.servo(1).status_return_level == 1
    assert PACKET.write1ByteTxRx(port, 1, ADDR_LED, 1)[0] == COMM_RX_TIMEOUT
    assert PACKET.read1ByteTxRx(port, 1, ADDR_LED) == (1, COMM_SUCCESS, 0)


def test_indirect_address_maps_present_position(port, bus):
    for k in range(4):  # Indirect Address 1..4 -> Present Position bytes
        assert PACKET.write2ByteTxRx(port, 5, 168 + 2 * k, ADDR_PRESENT_POSITION + k) == (
            COMM_SUCCESS, 0)
    bus.servo(5).set_present_position(1500)
    assert PACKET.read4ByteTxRx(port, 5, 224) == (1500, COMM_SUCCESS, 0)


def test_factory_names_models_and_interbotix_eeprom():
    servos = viperx_follower()
    assert [s.id for s in servos] == IDS
    assert [s.name for s in servos] == list(ALOHA_JOINTS)
    assert [s.model_number for s in servos] == [VIPERX_MODELS[i] for i in IDS]
    assert [s.secondary_id for s in servos] == [None, None, 2, None, 4, None, None, None, None]
    shoulder = servos[1]
    assert shoulder.read_item("drive_mode") == 1
    assert shoulder.read_item("min_position_limit") == 841
    assert all(s.baud_rate == BAUD and s.read_item("return_delay_time") == 0 for s in servos)
    assert all(s.secondary_id is None for s in viperx_follower(secondary_ids=False))


def test_standalone_command_serves_an_arm(tmp_path):
    link = tmp_path / "ttyDXL_cli"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.emulators.dynamixel_emulator", "--link", str(link),
         "--arm", "viperx"], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        assert process.stdout.readline().startswith("viperx:")  # printed once it serves
        cli_port = open_port(str(link))
        try:
            assert PACKET.ping(cli_port, 9)[:2] == (1020, COMM_SUCCESS)
        finally:
            cli_port.closePort()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            pytest.fail(f"the emulator ignored SIGTERM: {err}")
    assert process.returncode == 0, err
    assert "stopped:" in out and not link.exists()
