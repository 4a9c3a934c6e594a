"""The xArm backend (r2s2r.hardware.xarm) against the xArm controller emulator.

Everything below the backend is real: the unmodified xarm-python-sdk (XArmAPI) talks TCP to
tests/emulators/xarm_emulator.py, which serves the controller's command ports (502, 503) and
report ports (30001-30003) on its own loopback address. The backend is driven the way the
driver drives it, through ControlLoop, paced by the host clock. Settings and SDK-missing checks
need neither the SDK nor the emulator.

The emulator shares this process (and the GIL) with the SDK's threads, so on a busy machine a
report can be late by more than the default 50 ms link timeout. The link-loss tests run with
that default, as they measure it; the others allow the longest setting, 100 ms.
"""

import math
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from r2s2r.contract.types import JointCommand
from r2s2r.hardware.backends import load_backend
from r2s2r.hardware.base import HardwareError, Lifecycle, LinkLost
from r2s2r.hardware.xarm import XArmHardware, XArmSettings
from r2s2r.paths import config_path
from r2s2r.robots import get_robot
from r2s2r.stack import load_stack
from tests.backend_helpers import (PeerLog, active_loop, arrived, by_joint, check_imports_without, hostile_session,
                                   stream)
from tests.emulators.xarm_emulator import Reg, State, XArmEmulator

# A hardware protocol in real time (link timeouts of tens of ms): run alone, never beside another
# test file (make test runs these after the others, one at a time).
pytestmark = pytest.mark.realtime

HOST = "127.0.0.31"  # the emulator's own tests use 127.0.0.21/22
SECOND_HOST = "127.0.0.32"
ROBOT = get_robot("xarm7")
HOME = ROBOT.home_positions
ARM = len(ROBOT.joint_names)
MAX_JOINT_SPEED = math.pi  # rad/s: the xArm 7's limit, in its URDF and in the emulator


def start_emulator(host, **options):
    emulator = XArmEmulator(host, **options)
    try:
        emulator.start()
    except OSError as exc:  # port 502 needs root or a low ip_unprivileged_port_start
        pytest.fail(f"cannot bind the xArm controller ports on {host} (port 502 needs root): {exc}")
    return emulator


@pytest.fixture
def emulator():
    emu = start_emulator(HOST, initial_joints=HOME.tolist())
    yield emu
    emu.stop()


@pytest.fixture
def backend():
    """Factory for XArmHardware on the emulator; each one is disconnected after the test."""
    made = []

    def make(**settings):
        hw = XArmHardware(ROBOT, {"ip": HOST, "link_timeout_s": 0.1, **settings})
        made.append(hw)
        return hw
    yield make
    for hw in made:
        hw.on_cleanup()


def arm_of(sample):
    return sample.position[:ARM]


def fingers_of(sample):
    return sample.position[ARM:]


def until_at(target):
    """Arrived: every arm joint within 1e-4 rad of `target`."""
    return arrived(target, 1e-4)


# ----- settings, registry, SDK missing: no SDK needed ---------------------------------------------

@pytest.mark.parametrize("settings, key, expected", [
    ({}, "xarm.ip", "IPv4 address"),
    ({"ip": "xarm.local"}, "xarm.ip", "IPv4 address"),
    ({"ip": "/dev/ttyUSB0"}, "xarm.ip", "IPv4 address"),
    ({"ip": 3232235962}, "xarm.ip", "IPv4 address"),
    ({"ip": HOST, "link_timeout_s": 0.5}, "xarm.link_timeout_s", "<= 0.1"),
    ({"ip": HOST, "link_timeout_s": "fast"}, "xarm.link_timeout_s", "a finite number"),
    ({"ip": HOST, "connect_timeout_s": 0.0}, "xarm.connect_timeout_s", ">= 0.5"),
    ({"ip": HOST, "gripper": "yes"}, "xarm.gripper", "true or false"),
    ({"ip": HOST, "gripper_speed": 9000}, "xarm.gripper_speed", "1000 to 5000"),
    ({"ip": HOST, "status_poll_hz": 0}, "xarm.status_poll_hz", ">= 1.0"),
    ({"ip": HOST, "port": 502}, "xarm.port", "unknown key"),
])
def test_bad_settings_name_the_key_and_what_was_expected(settings, key, expected):
    with pytest.raises(HardwareError) as caught:
        XArmHardware(ROBOT, settings)
    assert key in str(caught.value) and expected in str(caught.value)


def test_settings_defaults_and_the_registry():
    assert load_backend("xarm") is XArmHardware
    hw = XArmHardware(ROBOT, {"ip": HOST})
    assert hw.config == XArmSettings(ip=HOST)
    assert hw.link_timeout_s == 0.05 and hw.state is Lifecycle.UNCONFIGURED
    with pytest.raises(HardwareError, match="connect"):
        hw.read()
    hw.on_cleanup()  # safe before connect, and twice
    hw.on_cleanup()
    assert hw.state is Lifecycle.FINALIZED


def test_shipped_config_holds_the_documented_defaults():
    params = yaml.safe_load(config_path("robots", "xarm7.yaml").read_text())["/**"]["ros__parameters"]
    block = params["xarm"]
    with pytest.raises(HardwareError, match="xarm.ip"):  # the address must be set for the arm at hand
        XArmSettings.parse(block)
    assert XArmSettings.parse({**block, "ip": "192.168.1.185"}) == XArmSettings(ip="192.168.1.185")
    stack = load_stack("config/stacks/xarm7_real.yaml", {"xarm.ip": "192.168.1.185"})
    (driver,) = stack.nodes
    assert driver.parameters == {"backend": "xarm", "xarm.ip": "192.168.1.185"}
    assert [Path(f).name for f in driver.parameter_files] == ["xarm7.yaml"]


def test_robot_must_be_an_xarm7():
    with pytest.raises(HardwareError, match="xArm 7.*franka_fr3"):
        XArmHardware(get_robot("franka_fr3"), {"ip": HOST})


def test_missing_sdk_names_the_package(monkeypatch):
    for name in ("xarm", "xarm.wrapper"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    hw = XArmHardware(ROBOT, {"ip": HOST})
    with pytest.raises(HardwareError) as caught:
        hw.on_configure()
    assert "pip install xarm-python-sdk" in str(caught.value)
    assert "pip install .[drivers]" in str(caught.value)
    assert hw.state is Lifecycle.UNCONFIGURED


def test_the_backend_imports_without_loading_the_sdk():
    check_imports_without("r2s2r.hardware.xarm", "xarm")


# ----- through the real SDK against the emulator -------------------------------------------------

def test_connect_clears_a_pending_error_and_reads_the_state(emulator, backend):
    emulator.model.gripper.position, emulator.model.gripper.target = 425.0, 425  # half open, at rest
    emulator.inject_error(31, disable_motors=True)  # a collision stop left from before
    hw = backend()
    hw.on_configure()
    assert hw.state is Lifecycle.INACTIVE
    truth = emulator.snapshot()
    assert truth.error_code == 0 and truth.motors_enabled and truth.gripper_enabled
    assert (truth.mode, truth.state) == (0, State.SLEEPING)  # position mode: the arm holds

    sample = hw.read()
    assert sample.names == ROBOT.joint_names + ROBOT.gripper_joint_names
    assert arm_of(sample) == pytest.approx(HOME, abs=1e-6)  # the protocol carries fp32
    assert fingers_of(sample) == pytest.approx([0.02125, 0.02125])  # 425 pulses = 42.5 mm, two fingers
    assert sample.effort[:ARM] == pytest.approx(np.zeros(ARM))  # the report's joint torques
    assert np.all(np.isnan(sample.effort[ARM:])) and np.all(np.isnan(sample.velocity[ARM:]))
    assert sample.stamp <= hw.now

    facts = hw.describe()
    assert facts["firmware"] == "2.6.0" and facts["robot_sn"] == "XI1303A0000000"
    assert facts["control_box_sn"] == "AC1302A0000000"
    assert facts["error_at_connect"] == 31 and facts["error_code"] == 0
    assert facts["arm_mode"] == 0 and facts["state"] == "inactive"
    assert facts["gripper_port"].startswith("503")


def test_streamed_setpoints_reach_the_target_at_bounded_speed(emulator, backend):
    hw = backend()
    loop = active_loop(hw)
    assert emulator.snapshot().mode == 1  # servo-j
    sent_before = emulator.register_count(Reg.MOVE_SERVOJ)
    cycles_before = loop.cycles
    target = HOME + np.array([0.6, 0.0, 0.0, 0.3, 0.0, 0.0, -0.4])
    samples = stream(loop, 3.0, target, until=until_at(target))

    assert until_at(target)(samples[-1]), f"stopped at {arm_of(samples[-1])}, target {target}"
    assert emulator.snapshot().joints == pytest.approx(target, abs=1e-4)
    travelled = np.array([arm_of(s)[0] - HOME[0] for s in samples])
    midway = [s for s, d in zip(samples, travelled) if 0.1 < d < 0.5]
    assert midway, "no sample caught joint1 mid-way"
    assert all(0.0 < s.velocity[0] < 1.5 * MAX_JOINT_SPEED for s in midway if np.isfinite(s.velocity[0]))
    # Over any 0.2 s or more, joint1 covered no more than its speed limit allows (+ the arrival
    # jitter of the report stamps).
    stamps = np.array([s.stamp for s in samples])
    for i in range(0, len(samples), 10):
        later = stamps - stamps[i] >= 0.2
        span = np.abs(travelled[later] - travelled[i])
        assert np.all(span <= MAX_JOINT_SPEED * (stamps[later] - stamps[i]) + 0.05)
    # One servo-j per cycle; the sender thread drops a setpoint only when a newer one is waiting.
    sent, cycles = emulator.register_count(Reg.MOVE_SERVOJ) - sent_before, loop.cycles - cycles_before
    assert 0.5 * cycles <= sent <= cycles

    hw.on_deactivate()
    truth = emulator.snapshot()
    assert (truth.mode, truth.state) == (0, State.SLEEPING)
    assert truth.joints == pytest.approx(target, abs=1e-4)
    with pytest.raises(HardwareError, match="activate"):
        loop.cycle()
    hw.on_activate()  # and back to streaming
    assert emulator.snapshot().mode == 1
    hw.on_cleanup()  # not moving: back to position mode, no stop
    truth = emulator.snapshot()
    assert (truth.mode, truth.state) == (0, State.SLEEPING)


def test_gripper_moves_and_gets_each_target_once(emulator, backend, monkeypatch):
    hw = backend()
    loop = active_loop(hw)
    sent = []
    api = hw._api  # count the SDK calls the gripper worker makes; the SDK underneath stays real
    original = api.set_gripper_position

    def counted(pulses, **kwargs):
        sent.append(pulses)
        return original(pulses, **kwargs)
    monkeypatch.setattr(api, "set_gripper_position", counted)

    for opening, pulses in ((0.02, 200), (0.085, 850), (0.0, 0)):
        loop.controller.command_gripper("gripper", [opening], hw.now)
        samples = stream(loop, 3.0, HOME, until=lambda s, opening=opening: abs(fingers_of(s).sum() - opening) < 1e-4)
        assert fingers_of(samples[-1]) == pytest.approx([opening / 2] * 2, abs=1e-4)
        assert emulator.snapshot().gripper_target == pulses
        assert len(samples) > 10  # streamed for a while: the same target never went out again
    assert sent == [200, 850, 0]
    assert hw.describe()["gripper_fault"] == ""


def test_link_loss_on_stop_is_detected_within_100ms_and_connect_recovers(emulator, backend):
    hw = backend(link_timeout_s=0.05)
    loop = active_loop(hw)
    target = HOME + np.array([1.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    # Under way, well clear of home (a loaded host moved it 0.055 rad in a fixed 0.25 s).
    stream(loop, 20.0, target, until=lambda sample: arm_of(sample)[0] > HOME[0] + 0.2)
    emulator.stop()
    lost_at = time.monotonic()
    with pytest.raises(LinkLost):
        stream(loop, 1.0, target)
    assert time.monotonic() - lost_at < 0.1
    assert hw.state is Lifecycle.ERROR and "link_lost" in hw.describe()
    with pytest.raises(LinkLost):  # stays lost until connect()
        hw.read()
    with pytest.raises(LinkLost, match="cannot connect"):  # nobody listening
        hw.on_configure()
    emulator.start()
    hw.on_configure()  # a fresh XArmAPI; the old one is closed
    assert hw.state is Lifecycle.INACTIVE
    halted = emulator.snapshot().joints  # connect() stopped the servo target the controller kept
    assert HOME[0] + 0.1 < halted[0] < target[0] - 0.1
    assert arm_of(hw.read()) == pytest.approx(halted, abs=1e-6)
    assert emulator.client_counts() == {"command": 1, "command_aux": 1, "real": 1}
    hw.on_activate()
    loop.hold_here()  # as the driver does after a reconnect
    assert until_at(target)(stream(loop, 3.0, target, until=until_at(target))[-1])


def test_link_loss_on_a_hung_controller_is_detected_within_100ms(emulator, backend):
    hw = backend(link_timeout_s=0.05, connect_timeout_s=1.0)
    loop = active_loop(hw)
    target = HOME + np.array([0.0, 0.0, 0.0, 1.2, 0.0, 0.0, 0.0])
    stream(loop, 0.2, target)
    emulator.pause()
    hung_at = time.monotonic()
    with pytest.raises(LinkLost):
        stream(loop, 1.0, target)
    assert time.monotonic() - hung_at < 0.1
    hw.on_cleanup()  # what the driver does on a lost link
    assert hw.state is Lifecycle.FINALIZED
    with pytest.raises(LinkLost, match="did not finish the SDK handshake"):
        hw.on_configure()  # TCP is accepted, nothing answers: bounded by connect_timeout_s

    emulator.resume()
    for _ in range(4):  # retried as the driver does; the same handshake carries on
        try:
            hw.on_configure()
            break
        except LinkLost:
            continue
    assert hw.state is Lifecycle.INACTIVE
    halted = emulator.snapshot().joints
    assert HOME[3] + 0.05 < halted[3] < target[3] - 0.05
    assert arm_of(hw.read()) == pytest.approx(halted, abs=1e-6)
    hw.on_activate()
    loop.hold_here()
    assert until_at(target)(stream(loop, 3.0, target, until=until_at(target))[-1])


def test_a_late_reply_is_no_lost_link_while_reports_flow(emulator, backend):
    # A busy host or network delays servo-j replies past the link timeout (a fresh run lost the
    # link so); the report stream is live, so the controller is, and the arm streams on.
    hw = backend()  # link_timeout_s 0.1: replies may take up to 0.4 s
    loop = active_loop(hw)
    target = HOME + np.array([0.0, 0.0, 0.4, 0.0, 0.0, 0.0, 0.0])
    stream(loop, 0.1, target)
    emulator.delay_replies(0.2)
    stream(loop, 0.6, target)
    assert hw.state is Lifecycle.ACTIVE and "link_lost" not in hw.describe()
    emulator.delay_replies(0.0)
    assert until_at(target)(stream(loop, 3.0, target, until=until_at(target))[-1])


def test_controller_error_stops_writes_and_reset_recovers(emulator, backend):
    hw = backend()
    loop = active_loop(hw)
    target = HOME + np.array([0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0])
    stream(loop, 0.1, target)
    emulator.inject_error(31)  # collision detected: the controller stops the arm
    with pytest.raises(HardwareError, match="C31") as caught:
        stream(loop, 1.0, target)
    assert not isinstance(caught.value, LinkLost)
    assert hw.state is Lifecycle.ERROR and "C31" in hw.describe()["fault"]
    assert hw.read().position.shape == (ARM + 2,)  # the link is fine: the state still reads
    with pytest.raises(HardwareError, match="reset"):
        hw.on_activate()

    hw.reset()
    assert hw.state is Lifecycle.ACTIVE
    truth = emulator.snapshot()
    assert (truth.error_code, truth.mode) == (0, 1)
    loop.hold_here()
    assert until_at(target)(stream(loop, 3.0, target, until=until_at(target))[-1])
    assert hw.describe()["error_code"] == 0


def test_disconnect_while_moving_stops_the_arm(emulator, backend):
    hw = backend()
    hw.on_configure()
    hw.on_activate()
    # Streamed setpoints stay within a cycle of the arm, which stops as soon as they do; one far
    # setpoint (past the safety layer) keeps the controller moving the arm for 0.6 s instead.
    target = HOME + np.array([2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    hw.write(JointCommand(ROBOT.joint_names, target), np.array([0.085]))
    time.sleep(0.15)
    hw.on_cleanup()
    stopped = emulator.snapshot()
    assert stopped.state == State.STOPPED  # emergency_stop: halted, motors still on
    assert stopped.motors_enabled and HOME[0] + 0.1 < stopped.joints[0] < target[0] - 0.5
    time.sleep(0.2)
    assert emulator.snapshot().joints == stopped.joints
    assert emulator.client_counts() == {}
    hw.on_cleanup()
    assert hw.state is Lifecycle.FINALIZED


@pytest.fixture
def arm_without_gripper():
    emu = start_emulator(SECOND_HOST, gripper=False, initial_joints=HOME.tolist())
    yield emu
    emu.stop()


def test_arm_without_the_gripper(arm_without_gripper, backend):
    with pytest.raises(HardwareError, match="xarm.gripper: false"):
        backend(ip=SECOND_HOST).on_configure()
    hw = backend(ip=SECOND_HOST, gripper=False)
    loop = active_loop(hw)  # clears the end-effector error (C19) the first attempt caused
    assert hw.describe()["error_at_connect"] == 19
    rs485 = arm_without_gripper.register_count(Reg.RS485_RTU)
    target = HOME + np.array([0.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0])
    samples = stream(loop, 3.0, target, until=until_at(target))
    assert until_at(target)(samples[-1])
    assert np.all(np.isnan(fingers_of(samples[-1])))  # no gripper to measure
    assert arm_without_gripper.register_count(Reg.RS485_RTU) == rs485  # and none commanded


def test_a_hostile_stream_leaves_the_arm_at_rest_and_an_estop_stops_it(emulator, backend):
    """The shared hostile session (tests/backend_helpers.hostile_session), checked on the servo-j
    targets the emulated controller received: they come to rest after the stream, stop within the
    stopping distance after an estop and stay put until enable().

    The emulator answers from threads of the test's own process: a loaded host can starve its
    reports past the 100 ms link timeout (fresh42: 102 ms). The backend then drops the link, as
    it must (the link-loss tests check that), and the session is begun again on a new
    connection, up to three times, judged on what the controller received since."""
    lost = None
    for _ in range(3):
        loop = active_loop(backend())
        begun = time.monotonic()

        def sent(begun=begun):
            log = [(t, values) for t, values in emulator.servo_targets() if t >= begun]
            return by_joint([t for t, _ in log], [values for _, values in log])
        try:
            # servo-j carries fp32: 1e-6 rad is two of its steps at the xArm's 2 pi joint range.
            hostile_session(loop, PeerLog(sent, resolution=1e-6), seed=7)
            return
        except LinkLost as error:
            lost = error
            loop.hardware.on_cleanup()
    raise AssertionError(f"the link dropped in each of three sessions, the last time: {lost}")
