"""The ALOHA backend (r2s2r.hardware.aloha) against two emulated ViperX follower buses.

Everything below the backend is real: the unmodified dynamixel-sdk (PacketHandler 2.0,
GroupSyncWrite, and PortHandler, which the backend subclasses only for its reply timeout and its
wait for bytes) talks Protocol 2.0 over pseudo-terminals to tests/emulators/dynamixel_emulator.py,
one bus of nine servos per arm, reached through symlinks named as the udev rule names the U2D2s. The backend is driven the way the driver drives it, through
ControlLoop, paced by the host clock. Settings and SDK-missing checks need neither.
"""

import math
import sys
import time

import numpy as np
import pytest

from r2s2r.hardware.aloha import AlohaHardware, AlohaSettings
from r2s2r.hardware.backends import load_backend
from r2s2r.hardware.base import HardwareError, Lifecycle, LinkLost
from r2s2r.robots import get_robot
from tests.backend_helpers import PeerLog, active_loop, arrived, check_imports_without, hostile_session, stream

# A hardware protocol in real time (link timeouts of tens of ms): run alone, never beside another
# test file (make test runs these after the others, one at a time).
pytestmark = pytest.mark.realtime

ROBOT = get_robot("aloha")
HOME = ROBOT.home_positions  # ALOHA's start pose, both arms
LEFT, RIGHT = slice(0, 6), slice(6, 12)
ARM = len(ROBOT.joint_names)
RAD_PER_TICK = 2 * math.pi / 4096
VELOCITY_UNIT = 0.229 * 2 * math.pi / 60  # rad/s per Present Velocity unit
OPEN, CLOSED = ROBOT.gripper("left_gripper").opening_range[::-1]
# The emulator answers from threads of this process, on a machine shared with other work, so a
# reply can come later than a U2D2's would. Most tests give replies a wide window (2 x 45 + 4 ms);
# the test that times an unplugged bus uses the backend's defaults (2 x 16 + 4 ms).
WIDE_WINDOW = {"latency_timer_ms": 45, "link_timeout_s": 0.1}
DEFAULT_WINDOW = {"latency_timer_ms": 16, "link_timeout_s": 0.05}


def ticks(rad):
    return 2048 + round(rad / RAD_PER_TICK)


def start_pose_ticks():
    """Servo positions of ALOHA's start pose (the shadows where their primaries are)."""
    shoulder, elbow = ticks(HOME[1]), ticks(HOME[2])
    return {1: ticks(HOME[0]), 2: shoulder, 3: shoulder, 4: elbow, 5: elbow, 6: ticks(HOME[3]),
            7: ticks(HOME[4]), 8: ticks(HOME[5])}


@pytest.fixture
def emulator():
    from tests.emulators import dynamixel_emulator  # Linux ptys; dynamixel-sdk is the real client
    return dynamixel_emulator


@pytest.fixture
def make_bus(tmp_path, emulator):
    """Factory: an emulated follower bus at tmp_path/<name>, stopped (and checked) after the test."""
    made = []

    def make(name, servos=None):
        bus = emulator.DynamixelBus(tmp_path / name, servos if servos is not None else emulator.viperx_follower())
        made.append(bus.start())
        return bus
    yield make
    for bus in made:
        bus.stop()
        assert not bus.internal_errors, bus.internal_errors[0]


@pytest.fixture
def buses(make_bus, emulator):
    """The left follower at ALOHA's start pose, the right one at zero."""
    return (make_bus("ttyDXL_follower_left", emulator.viperx_follower(positions=start_pose_ticks())),
            make_bus("ttyDXL_follower_right"))


@pytest.fixture
def backend():
    """Factory: AlohaHardware on two buses; each one is disconnected after the test."""
    made = []

    def make(left, right, **settings):
        hw = AlohaHardware(ROBOT, {"left_port": left.link_path, "right_port": right.link_path, **WIDE_WINDOW,
                                   **settings})
        made.append(hw)
        return hw
    yield make
    for hw in made:
        hw.on_cleanup()


def arms_of(sample):
    return sample.position[:ARM]


def fingers_of(sample):
    return sample.position[ARM:]


def until_at(target):
    """Arrived: every arm joint within a tick and a half of `target`."""
    return arrived(target, 1.5 * RAD_PER_TICK)


def emulated_arm(bus):
    """The arm joints' positions as the emulated servos hold them (primaries), rad."""
    return np.array([bus.servo(i).present_position_rad for i in (1, 2, 4, 6, 7, 8)])


# ----- settings, registry, SDK missing: no SDK needed ---------------------------------------------

@pytest.mark.parametrize("settings, key, expected", [
    ({"port": "/dev/ttyUSB0"}, "aloha.port", "unknown key"),
    ({"left_port": ""}, "aloha.left_port", "a non-empty string"),
    ({"right_port": "/dev/ttyDXL_follower_left"}, "aloha.right_port", "a different serial port"),
    ({"baud": 1_500_000}, "aloha.baud", "one of 9600"),
    ({"left_ids": [1, 2, 3]}, "aloha.left_ids", "9 distinct servo ids"),
    ({"right_ids": [1, 2, 3, 4, 5, 6, 7, 8, 8]}, "aloha.right_ids", "9 distinct servo ids"),
    ({"left_ids": [1, 2, 3, 4, 5, 6, 7, 8, 300]}, "aloha.left_ids", "from 0 to 252"),
    ({"left_offsets": [0.0] * 5}, "aloha.left_offsets", "a list of 6 finite numbers"),
    ({"right_offsets": [4.0, 0, 0, 0, 0, 0]}, "aloha.right_offsets", "within [-pi, pi]"),
    ({"gripper_open_rad": -0.6}, "aloha.gripper_open_rad", "at least 0.1 rad away"),
    ({"gripper_goal_current": 2000}, "aloha.gripper_goal_current", "1 to 1193"),
    ({"profile_velocity": -1}, "aloha.profile_velocity", ">= 0"),
    ({"latency_timer_ms": 0}, "aloha.latency_timer_ms", ">= 1.0"),
    ({"latency_timer_ms": 30}, "aloha.latency_timer_ms", "fits in aloha.link_timeout_s (50 ms)"),
    ({"link_timeout_s": 0.5}, "aloha.link_timeout_s", "<= 0.1"),
])
def test_bad_settings_name_the_key_and_what_was_expected(settings, key, expected):
    with pytest.raises(HardwareError) as caught:
        AlohaHardware(ROBOT, settings)
    assert key in str(caught.value) and expected in str(caught.value)


def test_settings_defaults_ros_arrays_and_the_registry():
    import array
    assert load_backend("aloha") is AlohaHardware
    hw = AlohaHardware(ROBOT, {})
    assert hw.config == AlohaSettings()
    assert (hw.config.left_port, hw.config.baud) == ("/dev/ttyDXL_follower_left", 1_000_000)
    assert hw.link_timeout_s == 0.05 and hw.state is Lifecycle.UNCONFIGURED
    # Driver parameters hand integer lists over as array.array.
    ids = AlohaHardware(ROBOT, {"right_ids": array.array("q", range(11, 20))}).config.right_ids
    assert ids == tuple(range(11, 20))
    with pytest.raises(HardwareError, match="connect"):
        hw.read()
    hw.on_cleanup()  # safe before connect, and twice
    hw.on_cleanup()
    assert hw.state is Lifecycle.FINALIZED


def test_robot_must_be_aloha():
    with pytest.raises(HardwareError, match="left_arm and right_arm.*robot franka_fr3 has groups arm"):
        AlohaHardware(get_robot("franka_fr3"), {})


def test_missing_sdk_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "dynamixel_sdk", None)  # import fails as if not installed
    hw = AlohaHardware(ROBOT, {})
    with pytest.raises(HardwareError) as caught:
        hw.on_configure()
    assert "pip install dynamixel-sdk" in str(caught.value) and "pip install .[drivers]" in str(caught.value)
    assert hw.state is Lifecycle.UNCONFIGURED


def test_the_backend_imports_without_loading_the_sdk():
    check_imports_without("r2s2r.hardware.aloha", "dynamixel_sdk", "serial")


# ----- through the real SDK against the emulated buses --------------------------------------------

def test_connect_checks_sets_up_and_reads_both_arms(buses, backend):
    left, right = buses
    left.servo(1).write_item("drive_mode", 0x04)  # a time-based profile left over from before
    hw = backend(left, right, profile_velocity=120, profile_acceleration=40)
    hw.on_configure()
    assert hw.state is Lifecycle.INACTIVE
    for bus in buses:
        servos = [bus.servo(i) for i in range(1, 10)]
        assert [s.operating_mode for s in servos] == [3] * 8 + [5]  # position; current-based position
        assert [s.read_item("profile_velocity") for s in servos] == [120] * 9
        assert [s.read_item("profile_acceleration") for s in servos] == [40] * 9
        assert bus.servo(9).read_item("goal_current") == 200
        assert not any(s.torque_enabled for s in servos)  # connect() leaves the torque alone
    assert left.servo(1).read_item("drive_mode") == 0  # velocity-based profile, as ALOHA runs

    sample = hw.read()
    assert sample.names == ROBOT.joint_names + ROBOT.gripper_joint_names
    assert arms_of(sample)[LEFT] == pytest.approx(HOME[LEFT], abs=RAD_PER_TICK)
    assert arms_of(sample)[RIGHT] == pytest.approx(np.zeros(6))
    # The gripper servos at 0 rad: 0.6213 rad above ALOHA's closed angle on a 2.1123 rad span.
    opening = CLOSED + (OPEN - CLOSED) * 0.6213 / 2.1123
    assert fingers_of(sample) == pytest.approx([opening / 2] * 4, abs=1e-4)
    assert sample.velocity == pytest.approx(np.zeros(ARM + 4))
    assert sample.effort[:ARM] == pytest.approx(np.zeros(ARM)) and np.all(np.isnan(sample.effort[ARM:]))
    assert sample.stamp <= hw.now

    facts = hw.describe()
    assert facts["left_port"] == left.link_path and facts["right_port"] == right.link_path
    assert facts["left_firmware"] == "46" and facts["left_latency_timer_ms"] == "45 (setting)"
    assert facts["right_shadows"] == "follow their primaries (Secondary ID)"
    assert "hardware_errors_cleared" not in facts and "fault" not in facts

    hw.on_activate()
    for bus in buses:
        assert all(bus.servo(i).torque_enabled for i in range(1, 10))
    assert emulated_arm(left) == pytest.approx(HOME[LEFT], abs=RAD_PER_TICK)  # holding where it was


def test_streamed_setpoints_reach_the_target_at_bounded_speed(buses, backend):
    left, right = buses
    # Profile Velocity 100 (2.4 rad/s) bounds every servo below the setpoints' speed limit, so the
    # servos trail their goals and move at that bound through the middle of the move.
    hw = backend(left, right, profile_velocity=100)
    profile_speed = 100 * VELOCITY_UNIT
    loop = active_loop(hw)
    start = arms_of(loop.last_sample).copy()
    target = start + np.array([0.6, 0.3, -0.2, 0.0, 0.4, -0.5, -0.5, 0.0, 0.3, 1.6, 0.0, 0.2])
    read_by = []  # per sample, a time by which its read had certainly finished (its stamp is when the read began)
    samples = stream(loop, 3.0, target, until=until_at(target), each_cycle=lambda: read_by.append(hw.now))

    assert until_at(target)(samples[-1]), f"stopped at {arms_of(samples[-1])}, target {target}"
    assert emulated_arm(left) == pytest.approx(target[LEFT], abs=RAD_PER_TICK)
    assert emulated_arm(right) == pytest.approx(target[RIGHT], abs=RAD_PER_TICK)
    for bus in buses:  # the shadows took their primaries' goals through their Secondary IDs
        assert bus.servo(3).present_position == bus.servo(2).present_position
        assert bus.servo(5).present_position == bus.servo(4).present_position
    # Between any two samples no joint covered more than the profile allows (+ a tick each way);
    # the servos sampled somewhere between a read's stamp and its end.
    stamps, read_by = np.array([s.stamp for s in samples]), np.array(read_by)
    positions = np.array([arms_of(s) for s in samples])
    for i in range(len(samples)):
        span = np.abs(positions[i + 1:] - positions[i])
        assert np.all(span <= profile_speed * (read_by[i + 1:] - stamps[i])[:, None] + 2 * RAD_PER_TICK)
    midway = [s for s in samples if 0.6 < s.position[9] - start[9] < 1.0]  # right forearm_roll, +1.6
    assert len(midway) >= 3, "too few samples caught right_forearm_roll mid-way"
    for sample in midway:
        assert sample.velocity[9] == pytest.approx(profile_speed, abs=VELOCITY_UNIT)
        assert sample.effort[9] > 0  # current spent against friction, along the motion

    hw.on_deactivate()
    assert all(left.servo(i).torque_enabled for i in range(1, 10))  # still holding
    with pytest.raises(HardwareError, match="activate"):
        loop.cycle()
    time.sleep(0.1)
    assert emulated_arm(left) == pytest.approx(target[LEFT], abs=RAD_PER_TICK)


def test_gripper_moves_squeezes_and_gets_each_goal_once(buses, backend):
    left, right = buses
    hw = backend(left, right)
    loop = active_loop(hw)
    gripper = left.servo(9)

    def move(opening, seconds=2.0, until=None, max_effort=0.0):
        loop.controller.command_gripper("left_gripper", [opening], hw.now, max_effort)
        return stream(loop, seconds, arms_of(loop.last_sample), until=until)

    move(OPEN, until=lambda s: abs(fingers_of(s)[:2].sum() - OPEN) < 1e-4)
    assert gripper.goal_position == ticks(1.4910)  # ALOHA's open angle
    assert fingers_of(loop.last_sample)[:2] == pytest.approx([OPEN / 2] * 2, abs=1e-4)
    # The right gripper was never commanded: it stays where it was when the driver connected.
    assert abs(right.servo(9).goal_position - right.servo(9).present_position) <= 2

    gripper.write_item("goal_position", 2500)  # someone else moves it: the same goal is not sent again
    move(OPEN, seconds=0.3)
    assert gripper.goal_position == 2500

    # An object between the fingers: closing stops on it and squeezes at the Goal Current.
    gripper.set_obstacle(ticks(0.2))
    samples = move(CLOSED, seconds=1.5, until=lambda s: gripper.present_current < -180)
    assert gripper.goal_position == ticks(-0.6213) and gripper.blocked
    assert -200 <= gripper.present_current < -180  # closing, bounded by Goal Current, not the 1193 limit
    held = CLOSED + (OPEN - CLOSED) * (0.2 + 0.6213) / 2.1123
    assert fingers_of(samples[-1])[:2].sum() == pytest.approx(held, abs=1e-4)
    assert gripper.hardware_error_status == 0 and "fault" not in hw.describe()
    # A GripperCommand's max_effort of 4 N, 40 % of the gripper's 10 N, asks for 40 % of the Goal
    # Current, and the servo squeezes with that ...
    move(CLOSED, seconds=1.5, max_effort=4.0, until=lambda s: -82 <= gripper.present_current < -70)
    assert gripper.read_item("goal_current") == 80 and -82 <= gripper.present_current < -70
    assert hw.describe()["left_gripper_goal_current"] == 80
    assert right.servo(9).read_item("goal_current") == 200  # the other gripper keeps its own
    # ... until a command without one goes back to the configured current.
    move(CLOSED, seconds=1.5, until=lambda s: gripper.present_current < -180)
    assert gripper.read_item("goal_current") == 200 and gripper.present_current < -180


def test_link_loss_on_stop_is_reported_within_100ms_and_restart_reconnects(buses, backend):
    left, right = buses
    hw = backend(left, right)
    loop = active_loop(hw)
    target = HOME + np.array([1.2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    stream(loop, 0.25, target)
    left.stop()  # the left U2D2 vanishes
    lost_at = time.monotonic()
    with pytest.raises(LinkLost, match="left arm.*serial port is gone"):
        stream(loop, 1.0, target)
    assert time.monotonic() - lost_at < 0.1
    assert hw.state is Lifecycle.ERROR and "link_lost" in hw.describe()
    with pytest.raises(LinkLost, match="connect"):  # stays lost until connect()
        hw.read()
    with pytest.raises(LinkLost, match="cannot open"):
        hw.on_configure()

    left.restart()  # a new pty behind the same link; the servos kept their state (and torque)
    hw.on_configure()
    assert hw.state is Lifecycle.INACTIVE
    assert arms_of(hw.read())[LEFT] == pytest.approx(emulated_arm(left), abs=RAD_PER_TICK)
    hw.on_activate()
    loop.hold_here()  # as the driver does after a reconnect
    assert until_at(target)(stream(loop, 3.0, target, until=until_at(target))[-1]), loop.controller.stats


def test_link_loss_on_unplug_is_reported_within_100ms_and_replug_reconnects(buses, backend):
    left, right = buses
    hw = backend(left, right, **DEFAULT_WINDOW)
    loop = active_loop(hw)
    target = HOME + np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.2])
    stream(loop, 0.25, target)
    right.unplug()  # the cable between the right U2D2 and its servos is pulled
    lost_at = time.monotonic()
    with pytest.raises(LinkLost, match="right arm.*did not answer the state read"):
        stream(loop, 1.0, target)
    elapsed = time.monotonic() - lost_at
    assert elapsed < 1.0, f"LinkLost after {elapsed * 1000:.0f} ms"  # detected promptly; the time is a figure
    with pytest.raises(LinkLost, match="no servo answers on .*ttyDXL_follower_right"):
        hw.on_configure()

    right.replug()
    hw.on_configure()
    assert arms_of(hw.read())[RIGHT] == pytest.approx(emulated_arm(right), abs=RAD_PER_TICK)
    hw.on_activate()
    loop.hold_here()
    assert until_at(target)(stream(loop, 3.0, target, until=until_at(target))[-1]), loop.controller.stats


def _replace(servos, new):
    return [new if s.id == new.id else s for s in servos]


@pytest.mark.parametrize("change, expected", [
    (lambda e, s: _replace(s, e.EmulatedServo(8, "XL430-W250", name="wrist_rotate")),
     r"ttyDXL_follower_left.*id 8 \(wrist_rotate\) is a XL430-W250 \(model number 1060\), expected a XM430-W350"),
    (lambda e, s: [x for x in s if x.id != 5],
     r"ttyDXL_follower_left.*no answer from id 5 \(elbow_shadow\)"),
    (lambda e, s: s[6].write_item("drive_mode", 0) or s,
     r"ttyDXL_follower_left.*id 7 \(wrist_angle\) has Drive Mode 0x00: its reverse bit should be 1"),
    (lambda e, s: s[8].write_item("torque_enable", 1) or s,  # the gripper torqued in position mode
     r"id 9 \(gripper\) needs Operating Mode 3 -> 5, which needs its torque off"),
    (lambda e, s: _replace(s, e.EmulatedServo(9, "XM430-W350", name="gripper", current_limit=150)),
     r"gripper_goal_current \(200\) exceeds the Current Limit \(38\) of left arm .* id 9 \(gripper\), 150"),
])
def test_connect_refuses_an_arm_that_is_not_set_up_as_expected(make_bus, backend, emulator, change, expected):
    left = make_bus("ttyDXL_follower_left", change(emulator, emulator.viperx_follower()))
    right = make_bus("ttyDXL_follower_right")
    hw = backend(left, right)
    with pytest.raises(HardwareError, match=expected) as caught:
        hw.on_configure()
    assert not isinstance(caught.value, LinkLost)
    assert hw.state is Lifecycle.UNCONFIGURED
    with pytest.raises(HardwareError, match="connect"):
        hw.read()


def test_hardware_error_stops_writes_and_reset_reboots_the_servo(buses, backend):
    left, right = buses
    hw = backend(left, right)
    loop = active_loop(hw)
    stream(loop, 0.1, HOME)
    left.servo(9).inject_hardware_error(0x20)  # the gripper overloaded: the firmware cuts its torque
    with pytest.raises(HardwareError, match=r"left arm .*ttyDXL_follower_left\) id 9 \(gripper\) reports a "
                                            r"hardware error: overload; reset\(\)") as caught:
        stream(loop, 1.0, HOME)
    assert not isinstance(caught.value, LinkLost)
    assert hw.state is Lifecycle.ERROR and "overload" in hw.describe()["fault"]
    assert fingers_of(hw.read()).shape == (4,)  # the link is fine: the state still reads
    with pytest.raises(HardwareError, match="reset"):
        hw.on_activate()

    hw.reset()
    gripper = left.servo(9)
    assert hw.state is Lifecycle.ACTIVE and "fault" not in hw.describe()
    assert gripper.hardware_error_status == 0 and gripper.torque_enabled
    assert gripper.operating_mode == 5 and gripper.read_item("goal_current") == 200  # set up again
    loop.hold_here()
    loop.controller.command_gripper("left_gripper", [OPEN], hw.now)
    stream(loop, 2.0, HOME, until=lambda s: abs(fingers_of(s)[:2].sum() - OPEN) < 1e-4)
    assert gripper.goal_position == ticks(1.4910)


def test_a_latched_hardware_error_is_cleared_at_connect(buses, backend):
    left, right = buses
    right.servo(4).inject_hardware_error(0x04)  # the right elbow overheated before we came
    hw = backend(left, right)
    hw.on_configure()
    assert right.servo(4).hardware_error_status == 0
    assert "right arm" in hw.describe()["hardware_errors_cleared"]
    assert "id 4 (elbow): overheating" in hw.describe()["hardware_errors_cleared"]
    hw.on_activate()
    assert right.servo(4).torque_enabled


def test_shadows_without_a_secondary_id_get_their_primaries_goals(make_bus, backend, emulator):
    left = make_bus("ttyDXL_follower_left", emulator.viperx_follower(secondary_ids=False))
    right = make_bus("ttyDXL_follower_right", emulator.viperx_follower(secondary_ids=False))
    hw = backend(left, right)
    loop = active_loop(hw)
    assert hw.describe()["left_shadows"] == "written with their primaries: shoulder_shadow, elbow_shadow"
    target = np.zeros(12)
    target[[1, 2, 7, 8]] = [-0.4, 0.3, -0.4, 0.3]  # both arms' shoulders and elbows, leaning apart
    assert until_at(target)(stream(loop, 3.0, target, until=until_at(target))[-1]), loop.controller.stats
    for bus in (left, right):
        assert bus.servo(3).goal_position == bus.servo(2).goal_position != 2048
        assert bus.servo(5).goal_position == bus.servo(4).goal_position != 2048


def test_a_hostile_stream_leaves_the_arms_at_rest_and_an_estop_stops_them(buses, backend):
    """The shared hostile session (tests/backend_helpers.hostile_session), checked on the Goal
    Positions the emulated servos received: they come to rest after the stream, stop within the
    stopping distance after an estop and stay put until enable()."""
    left, right = buses
    # 200 Hz, a control_rate_hz the driver allows: the filter's limit cycle after a hostile stream
    # showed there and not at ALOHA's default 50 Hz, and the checks hold at any rate.
    loop = active_loop(backend(left, right), control_rate_hz=200.0)
    primaries = (1, 2, 4, 6, 7, 8)  # the servo of each arm joint, in the robot's joint order

    def sent():
        series = []
        for bus in (left, right):
            for dxl_id in primaries:
                goals = np.array(bus.servo(dxl_id).goal_history(), float).reshape(-1, 2)  # (time, ticks)
                series.append((goals[:, 0], (goals[:, 1] - 2048) * RAD_PER_TICK))
        return series
    hostile_session(loop, PeerLog(sent, resolution=RAD_PER_TICK), seed=11)
