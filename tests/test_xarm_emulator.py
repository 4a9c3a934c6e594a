"""The xArm 7 controller emulator, driven by the real xarm-python-sdk client (XArmAPI).

The SDK always uses the controller's fixed ports (502, 30001-30003), so each emulator here
binds its own loopback address; binding port 502 needs root (as in CI): without it the tests
fail, saying so.
"""

import math
import os
import time

import pytest

from xarm.core.config.x_config import XCONF  # noqa: E402
from xarm.wrapper import XArmAPI  # noqa: E402

from r2s2r.waiting import wait_for
from tests.emulators.xarm_emulator import (  # noqa: E402
    ERROR_END_EFFECTOR_COMM, ERROR_JOINT_LIMIT, MAX_JOINT_SPEED, XARM7_JOINT_LIMITS,
    Reg, State, XArmControllerModel, XArmEmulator)

# A hardware protocol in real time (link timeouts of tens of ms): run alone, never beside another
# test file (make test runs these after the others, one at a time).
pytestmark = pytest.mark.realtime

HOST = os.environ.get("R2S2R_XARM_EMULATOR_HOST", "127.0.0.21")
SECOND_HOST = "127.0.0.22"

API_STATE_HAS_ERROR = 1  # xarm.x3.code.APIState.HAS_ERROR
API_STATE_OUT_OF_RANGE = -8  # xarm.x3.code.APIState.OUT_OF_RANGE
API_STATE_TIMEOUT = 3  # xarm.x3.code.APIState.RES_TIMEOUT


def start_emulator(host, **options):
    emulator = XArmEmulator(host, **options)
    try:
        emulator.start()
    except OSError as exc:
        pytest.fail(f"cannot bind the xArm controller ports on {host} (port 502 needs root): {exc}")
    return emulator


@pytest.fixture
def emulator():
    emu = start_emulator(HOST)
    yield emu
    emu.stop()


@pytest.fixture
def connect():
    """Factory for SDK clients; every client is disconnected after the test."""
    clients = []

    def _connect(host=HOST, **kwargs):
        api = XArmAPI(host, is_radian=True, forbid_uds=True, **kwargs)
        clients.append(api)
        return api

    yield _connect
    for api in clients:
        api.disconnect()


def enter_mode(api, mode):
    """The usual start-up sequence of an xArm program."""
    assert api.motion_enable(True) == 0
    assert api.set_mode(mode) == 0
    assert api.set_state(0) == 0
    assert api.get_state() == (0, State.SLEEPING)
    assert wait_for(lambda: api.mode == mode, 1.0), "the report stream never showed the new mode"


def joints(api):
    code, angles = api.get_servo_angle()
    assert code == 0
    return angles


# ----- model-only checks (no sockets) --------------------------------------------------------


def test_joint_limits_match_the_sdk_table_for_xarm7():
    sdk_limits = XCONF.Robot.JOINT_LIMITS[7][XCONF.Robot.Type.XARM7_X4]
    assert [tuple(limit) for limit in sdk_limits] == list(XARM7_JOINT_LIMITS)
    model = XArmControllerModel()
    assert model.first_joint_out_of_limits([0.0, 0.0, 0.0, 3.9, 0.0, -1.6, 0.0]) is None
    assert model.first_joint_out_of_limits([0.0, -2.2, 0.0, 0.0, 0.0, 0.0, 0.0]) == 1
    assert model.first_joint_out_of_limits([0.0, 0.0, 0.0, -0.3, 0.0, 0.0, 0.0]) == 3
    assert model.first_joint_out_of_limits([0.0, 0.0, 0.0, 0.0, 0.0, 3.3, 0.0]) == 5


# ----- through the real SDK --------------------------------------------------------------------


def test_connect_reads_version_serial_and_state(emulator, connect):
    api = connect()
    assert api.connected
    assert api.version_number == (2, 6, 0)
    assert api.axis == 7 and api.device_type == 7
    assert api.get_robot_sn() == (0, "XI1303A0000000")
    assert api.get_state() == (0, State.STOPPED)  # powered up, motors not enabled
    assert api.get_err_warn_code() == (0, [0, 0])
    assert api.get_cmdnum() == (0, 0)
    assert emulator.client_counts() == {"command": 1, "rich": 1}


def test_servo_j_stream_approaches_target_at_bounded_speed(emulator, connect):
    api = connect()
    enter_mode(api, 1)
    target = [1.2, 0.3, 0.0, 1.0, 0.0, 0.5, 0.0]
    samples = []  # (time after the reply, J1 position, J1 velocity)
    start = time.monotonic()  # before the first command, so the speed bound below is strict
    while time.monotonic() - start < 1.5:
        assert api.set_servo_angle_j(target) == 0
        code, (position, velocity, _effort) = api.get_joint_states()
        assert code == 0
        samples.append((time.monotonic(), position[0], velocity[0]))
        if abs(position[0] - target[0]) < 1e-6:
            break
        time.sleep(0.005)
    arrival = samples[-1][0] - start
    assert abs(samples[-1][1] - target[0]) < 1e-6, "J1 never reached the streamed target"
    # Covering 1.2 rad at no more than 180 deg/s takes at least 0.38 s.
    assert target[0] / MAX_JOINT_SPEED * 0.9 < arrival < 1.0
    midway = [s for s in samples if 0.3 < s[1] < 0.9]
    assert midway, "no sample caught the arm mid-way"
    assert all(abs(v - MAX_JOINT_SPEED) < 0.05 for _, _, v in midway)
    # No sample is further along than 180 deg/s allows since the stream began.
    assert all(q <= MAX_JOINT_SPEED * (t - start) + 1e-6 for t, q, _ in samples)
    assert joints(api) == pytest.approx(target, abs=1e-6)
    assert emulator.register_count(Reg.MOVE_SERVOJ) >= 10


def test_position_mode_move_runs_at_requested_speed(emulator, connect):
    api = connect()
    enter_mode(api, 0)
    target = [0.6, 0.0, 0.0, 0.9, 0.0, 0.0, 0.0]
    speed = 1.0  # rad/s for the joint that moves furthest: 0.9 s
    start = time.monotonic()
    assert api.set_servo_angle(angle=target, speed=speed, wait=False) == 0
    sent = time.monotonic()
    assert api.get_state() == (0, State.MOVING)
    assert api.get_cmdnum() == (0, 1)
    time.sleep(0.3)
    before_read = time.monotonic()
    midway = joints(api)
    after_read = time.monotonic()
    assert 0.0 < midway[3] < 0.9
    assert speed * (before_read - sent) - 1e-3 <= midway[3] <= speed * (after_read - start) + 1e-3
    assert midway[0] == pytest.approx(midway[3] * 0.6 / 0.9, abs=1e-3)  # joints move in sync
    assert wait_for(lambda: api.get_state() == (0, State.SLEEPING), 2.0)
    assert time.monotonic() - start > 0.85
    assert joints(api) == pytest.approx(target, abs=1e-6)
    # wait=True returns once the controller has finished the move.
    assert api.set_servo_angle(angle=[0.0] * 7, speed=math.pi, wait=True) == 0
    assert joints(api) == pytest.approx([0.0] * 7, abs=1e-6)


def test_out_of_limit_target_is_refused_with_controller_error(emulator, connect):
    api = connect(check_joint_limit=False)  # let the target reach the controller
    enter_mode(api, 0)
    before = joints(api)
    assert api.set_servo_angle(angle=[0.0, 0.0, 0.0, -0.5, 0.0, 0.0, 0.0], speed=1.0) == API_STATE_HAS_ERROR
    assert api.get_err_warn_code() == (0, [ERROR_JOINT_LIMIT, 0])
    assert api.get_state() == (0, State.STOPPED)
    time.sleep(0.2)
    assert joints(api) == before
    assert wait_for(lambda: api.error_code == ERROR_JOINT_LIMIT, 1.0), "error not in the report stream"

    # Recovery is clean_error, then start again; servo_j is checked the same way.
    assert api.clean_error() == 0
    assert api.get_err_warn_code() == (0, [0, 0])
    enter_mode(api, 1)
    assert api.set_servo_angle_j([0.0, 2.5, 0.0, 0.0, 0.0, 0.0, 0.0]) == API_STATE_HAS_ERROR
    assert api.get_err_warn_code() == (0, [ERROR_JOINT_LIMIT, 0])
    assert emulator.snapshot().joints == tuple(before)

    # With its default client-side check the SDK refuses the same target without sending it.
    assert api.clean_error() == 0
    checked = connect()
    sent = emulator.register_count(Reg.MOVE_JOINT)
    enter_mode(checked, 0)
    assert checked.set_servo_angle(angle=[0.0, 0.0, 0.0, -0.5, 0.0, 0.0, 0.0]) == API_STATE_OUT_OF_RANGE
    assert emulator.register_count(Reg.MOVE_JOINT) == sent


def test_emergency_stop_halts_motion_and_drops_queue(emulator, connect):
    api = connect()
    enter_mode(api, 0)
    assert api.set_servo_angle(angle=[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], speed=0.5) == 0
    time.sleep(0.4)
    api.emergency_stop()
    stopped_at = joints(api)
    assert 0.1 < stopped_at[0] < 0.6
    assert api.get_state() == (0, State.STOPPED)
    time.sleep(0.3)
    assert joints(api) == stopped_at
    # Restarting does not resume the cancelled move.
    assert api.set_state(0) == 0
    time.sleep(0.3)
    assert api.get_state() == (0, State.SLEEPING)
    assert joints(api) == stopped_at


def test_gripper_enable_and_position(emulator, connect):
    api = connect()
    assert api.set_gripper_position(300, wait=False) == 0
    time.sleep(0.2)
    assert api.get_gripper_position() == (0, 0), "a disabled gripper must not move"
    assert api.set_gripper_enable(True) == 0
    assert api.set_gripper_mode(0) == 0
    assert api.set_gripper_speed(2000) == 0  # 500 pulse/s in the emulator: 1.6 s for 800
    assert api.set_gripper_position(800, wait=False) == 0
    code, midway = api.get_gripper_position()
    assert code == 0 and 0 <= midway < 800
    time.sleep(0.2)
    assert midway < api.get_gripper_position()[1]
    assert wait_for(lambda: api.get_gripper_position() == (0, 800), 3.0)
    assert api.set_gripper_position(200, wait=True, speed=5000) == 0
    # The SDK's wait ends within its own tolerance of the goal; the last fraction of a pulse follows.
    assert wait_for(lambda: api.get_gripper_position() == (0, 200), 3.0)
    assert emulator.snapshot().gripper_position == pytest.approx(200, abs=0.5)


def test_missing_gripper_raises_end_effector_communication_error(connect):
    emulator = start_emulator(SECOND_HOST, gripper=False)
    try:
        api = connect(SECOND_HOST)
        assert api.set_gripper_enable(True) != 0
        assert api.get_err_warn_code() == (0, [ERROR_END_EFFECTOR_COMM, 0])
    finally:
        emulator.stop()


def test_stop_drops_link_and_start_allows_reconnect(emulator, connect):
    api = connect()
    assert api.motion_enable(True) == 0
    emulator.stop()
    assert wait_for(lambda: not api.connected, 3.0), "SDK did not notice the lost link"
    assert api.get_state()[0] != 0
    with pytest.raises(Exception):  # noqa: B017 (the SDK raises its own, version-dependent errors)
        XArmAPI(HOST, is_radian=True, forbid_uds=True)  # nobody listening

    emulator.start()
    again = connect()
    assert again.connected
    assert again.get_state() == (0, State.STOPPED)
    assert emulator.snapshot().motors_enabled, "the controller kept its state across the link loss"


def test_pause_hangs_and_resume_recovers(emulator, connect):
    api = connect(report_type="real")
    reports = []
    api.register_report_location_callback(lambda data: reports.append(time.monotonic()))
    api.set_timeout(0.5)
    emulator.pause()
    time.sleep(0.05)
    paused_at = len(reports)
    assert api.get_state()[0] == API_STATE_TIMEOUT
    assert len(reports) == paused_at, "a paused controller must not report"
    emulator.resume()
    assert api.get_state() == (0, State.STOPPED)
    assert wait_for(lambda: len(reports) > paused_at + 5, 1.0)
    assert api.connected


def test_report_streams_run_at_sdk_rates_and_carry_joints(emulator, connect):
    real = connect(report_type="real")
    rich = connect()
    counts = {"real": 0, "rich": 0}
    real.register_report_location_callback(lambda data: counts.__setitem__("real", counts["real"] + 1))
    rich.register_report_location_callback(lambda data: counts.__setitem__("rich", counts["rich"] + 1))
    time.sleep(1.0)
    # 100 Hz and 5 Hz; the SDK drops a report when it falls behind, hence the low margin.
    assert 40 <= counts["real"] <= 110
    assert 3 <= counts["rich"] <= 7
    emulator.set_joint_positions([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    assert wait_for(lambda: real.angles == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], abs=1e-5), 0.5)
    assert wait_for(lambda: rich.angles == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], abs=1e-5), 1.0)


def test_two_emulators_on_separate_loopback_addresses(emulator, connect):
    other = start_emulator(SECOND_HOST)
    try:
        first, second = connect(HOST), connect(SECOND_HOST)
        enter_mode(first, 0)
        assert first.set_servo_angle(angle=[0.3, 0, 0, 0, 0, 0, 0], speed=math.pi, wait=True) == 0
        assert joints(first)[0] == pytest.approx(0.3, abs=1e-6)
        assert joints(second) == [0.0] * 7
        assert second.get_state() == (0, State.STOPPED)
    finally:
        other.stop()
