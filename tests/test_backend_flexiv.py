"""FlexivHardware against the flexivrdk stand-in (tests/standins/flexivrdk_standin.py), driven by
ControlLoop without a ROS graph. flexivrdk has no wheel for Python 3.11, so the stand-in is
checked against the API facts recorded from the flexivrdk 1.9.4.1 wheel (flexivrdk_api.json)."""

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from r2s2r.hardware.backends import load_backend
from r2s2r.hardware.base import HardwareError, Lifecycle, LinkLost
from r2s2r.hardware.flexiv import FlexivHardware
from r2s2r.paths import config_path
from r2s2r.robots import get_robot
from r2s2r.stack import load_stack
from tests.backend_helpers import PeerLog, active_loop, arrived, by_joint, hostile_session, run_on_the_shim, stream
from tests.standins import flexivrdk_standin, signatures

# A hardware protocol in real time (link timeouts of tens of ms): run alone, never beside another
# test file (make test runs these after the others, one at a time).
pytestmark = pytest.mark.realtime

RIZON = get_robot("flexiv_rizon4")
SERIAL = "Rizon4-062468"
API = json.loads((Path(__file__).parent / "standins" / "flexivrdk_api.json").read_text())


@pytest.fixture
def rdk(monkeypatch):
    world = flexivrdk_standin.world
    world.reset()
    world.add_arm(SERIAL, RIZON.home_positions)
    monkeypatch.setitem(sys.modules, "flexivrdk", flexivrdk_standin)
    return world


def hardware(**settings):
    return FlexivHardware(RIZON, {"serial_number": SERIAL, **settings})


@pytest.fixture
def active(rdk):
    hw = hardware()
    yield hw, active_loop(hw, control_rate_hz=200.0)
    hw.on_cleanup()


def test_connect_reads_the_arm_once_and_goes_inactive(rdk):
    hw = hardware()
    hw.on_configure()
    assert hw.state is Lifecycle.INACTIVE
    sample = hw.read()
    assert sample.names == RIZON.joint_names + ("gripper_finger_joint1", "gripper_finger_joint2")
    np.testing.assert_allclose(sample.position[:7], RIZON.home_positions)
    np.testing.assert_allclose(sample.effort[:7], 2.0 * np.sin(RIZON.home_positions))  # the stand-in's tau
    np.testing.assert_allclose(sample.position[7:], [0.0425, 0.0425])  # an open 85 mm gripper, per finger
    assert rdk.calls_of("Robot")[0].args == (SERIAL, (), False, False)
    facts = hw.describe()
    assert facts["serial_number"] == SERIAL and facts["model"] == "Rizon4" and facts["rdk_version"] == "1.9.4.1"
    assert facts["operational_status"] == "NOT_ENABLED" and facts["fault"] is False
    hw.on_cleanup()
    hw.on_cleanup()  # idempotent
    assert hw.state is Lifecycle.FINALIZED


def test_streams_setpoints_and_the_arm_arrives_at_bounded_speed(active, rdk):
    hw, loop = active
    assert rdk.arm(SERIAL).mode is flexivrdk_standin.Mode.NRT_JOINT_POSITION
    target = RIZON.home_positions + np.array([0.3, -0.2, 0.25, -0.2, -0.3, 0.2, 0.3])  # fingers clear of the table
    start = time.monotonic()
    speeds = [np.abs(sample.velocity[:7]) for sample in stream(loop, 5.0, target, until=arrived(target, 5e-4))]
    stream(loop, 0.1, target)  # settled: the last setpoints sent are the target
    elapsed = time.monotonic() - start
    np.testing.assert_allclose(loop.positions(), target, atol=1e-3)
    np.testing.assert_allclose(rdk.arm(SERIAL).q, target, atol=1e-3)
    assert np.all(np.max(speeds, axis=0) <= RIZON.limits.velocity + 1e-6)
    sends = rdk.calls_of("SendJointPosition")
    positions, velocities, max_vel, max_acc = sends[-1].args
    np.testing.assert_allclose(positions, target, atol=1e-6)
    assert velocities == [0.0] * 7
    np.testing.assert_allclose(max_vel, RIZON.limits.velocity)
    np.testing.assert_allclose(max_acc, RIZON.limits.acceleration)
    # Throttled to command_rate_hz (100 by default) although the loop cycles at 200 Hz.
    assert len(sends) <= elapsed * 100 + 2


def test_gripper_moves_on_a_worker_thread_only_when_the_opening_changes(active, rdk):
    hw, loop = active
    stream(loop, 0.1)
    loop.controller.command_gripper("gripper", [0.03], hw.now)
    stream(loop, 3.0, until=lambda _: abs(hw.read().position[7] - 0.015) < 1e-6)
    stream(loop, 0.1)
    moves = rdk.calls_of("Gripper.Move")
    # The controller's home opening (fully open) once, then 0.03 once, although every cycle writes it.
    assert [m.args[0] for m in moves] == pytest.approx([0.085, 0.03])
    width, velocity, force = moves[-1].args
    assert velocity == pytest.approx(0.15) and force == pytest.approx(100.0)  # the spec's, within the params
    assert {m.thread for m in moves} == {"flexiv-gripper"} != {threading.current_thread().name}
    np.testing.assert_allclose(hw.read().position[7:], [0.015, 0.015], atol=1e-6)
    # A GripperCommand's max_effort moves again with that force, clamped to the gripper's range
    # (the stand-in's device reports 20 .. 235 N); a command without one goes back to the spec's.
    for max_effort, force in ((60.0, 60.0), (5.0, 20.0), (0.0, 100.0)):
        loop.controller.command_gripper("gripper", [0.03], hw.now, max_effort)
        stream(loop, 1.0, until=lambda _, f=force: rdk.calls_of("Gripper.Move")[-1].args[2] == pytest.approx(f))
        assert rdk.calls_of("Gripper.Move")[-1].args == pytest.approx((0.03, 0.15, force))
        assert hw.describe()["gripper_force_n"] == pytest.approx(force)
    assert len(rdk.calls_of("Gripper.Move")) == 5  # once per change, though every cycle writes it


def test_a_hostile_stream_leaves_the_arm_at_rest_and_an_estop_stops_it(active, rdk):
    """The shared hostile session (tests/backend_helpers.hostile_session), checked on the
    SendJointPosition calls the stand-in received: they come to rest after the stream, stop within
    the stopping distance after an estop and stay put until enable()."""
    _, loop = active

    def sent():
        sends = rdk.calls_of("SendJointPosition")
        return by_joint([c.time for c in sends], [c.args[0] for c in sends])
    hostile_session(loop, PeerLog(sent, resolution=1e-9), seed=5)  # the RDK takes doubles


def test_deactivate_stops_the_arm_and_holds(active, rdk):
    hw, loop = active
    stream(loop, 0.3, RIZON.home_positions + 0.3)
    hw.on_deactivate()
    assert hw.state is Lifecycle.INACTIVE
    assert rdk.arm(SERIAL).mode is flexivrdk_standin.Mode.IDLE
    sent = len(rdk.calls_of("SendJointPosition"))
    held = hw.read().position[:7]
    stream(loop, 0.2)
    assert len(rdk.calls_of("SendJointPosition")) == sent  # nothing streams while inactive
    np.testing.assert_allclose(hw.read().position[:7], held)


def test_link_loss_raises_within_100_ms_and_reconnect_reads_again(active, rdk):
    hw, loop = active
    stream(loop, 0.3, RIZON.home_positions + 0.3)
    rdk.cut_link(SERIAL)
    cut = time.monotonic()
    with pytest.raises(LinkLost, match="stopped answering"):
        stream(loop, 1.0)
    assert time.monotonic() - cut < 0.1
    assert hw.state is Lifecycle.ERROR
    with pytest.raises(LinkLost):  # stays lost until connect()
        hw.read()
    with pytest.raises(LinkLost, match="cannot connect"):
        hw.on_configure()  # the robot is still unreachable
    rdk.restore_link(SERIAL)
    hw.on_configure()
    assert hw.state is Lifecycle.INACTIVE
    np.testing.assert_allclose(hw.read().position[:7], rdk.arm(SERIAL).q)
    hw.on_activate()
    loop.hold_here()
    stream(loop, 0.1)
    assert hw.state is Lifecycle.ACTIVE


def test_a_fault_is_reported_stops_streaming_and_reset_resumes_it(active, rdk):
    hw, loop = active
    stream(loop, 0.1)
    rdk.inject_fault(SERIAL, description="joint 3 torque limit exceeded")
    # The loop goes on: the robot holds, nothing is sent.
    stream(loop, 2.0, RIZON.home_positions + 0.1, until=lambda _: hw.state is Lifecycle.ERROR)
    assert hw.state is Lifecycle.ERROR
    sent = len(rdk.calls_of("SendJointPosition"))
    stream(loop, 0.1, RIZON.home_positions + 0.1)
    assert len(rdk.calls_of("SendJointPosition")) == sent
    facts = hw.describe()
    assert facts["fault"] is True and facts["operational_status"] == "MINOR_FAULT"
    assert facts["fault_detail"] == "MINOR_FAULT, last event: joint 3 torque limit exceeded"
    hw.reset()
    assert rdk.calls_of("ClearFault") and hw.state is Lifecycle.ACTIVE
    assert rdk.arm(SERIAL).mode is flexivrdk_standin.Mode.NRT_JOINT_POSITION
    assert hw.describe()["fault"] is False
    target = RIZON.home_positions + 0.1
    loop.hold_here()
    stream(loop, 5.0, target, until=arrived(target, 5e-4))
    np.testing.assert_allclose(loop.positions(), target, atol=1e-3)


def test_a_fault_that_does_not_clear_is_an_error(active, rdk):
    hw, loop = active
    rdk.inject_fault(SERIAL, critical=True)
    with pytest.raises(HardwareError, match="did not clear"):
        hw.reset()
    with pytest.raises(HardwareError, match="in fault"):
        hw.on_activate()


def test_activate_says_what_keeps_the_arm_from_operating(rdk):
    hw = hardware(operational_timeout_s=0.2)
    hw.on_configure()
    rdk.arm(SERIAL).estop_released = False
    with pytest.raises(HardwareError, match="E-stop .* is pressed"):
        hw.on_activate()
    rdk.arm(SERIAL).estop_released = True
    rdk.arm(SERIAL).auto_mode = False
    with pytest.raises(HardwareError, match="IN_MANUAL_MODE: switch the robot to Auto \\(Remote\\) mode"):
        hw.on_activate()
    assert hw.state is Lifecycle.INACTIVE


@pytest.mark.parametrize("settings, problem", [
    ({}, "flexiv.serial_number: expected the robot's serial number as Flexiv Elements shows it"),
    ({"serial_number": "062468"}, "flexiv.serial_number: expected the robot's serial number"),
    ({"serial_number": SERIAL, "network_interface_whitelist": "10.42.0.1, 192.168.2"},
     "flexiv.network_interface_whitelist: expected IPv4 addresses separated by commas, got '192.168.2'"),
    ({"serial_number": SERIAL, "command_rate_hz": 2000}, "flexiv.command_rate_hz: expected a number <= 1000"),
    ({"serial_number": SERIAL, "gripper_name": 5}, "flexiv.gripper_name: expected the gripper's device name"),
    ({"serial_number": SERIAL, "ip": "192.168.2.100"}, "flexiv.ip: expected one of the keys"),
])
def test_bad_settings_name_the_key_and_what_was_expected(settings, problem):
    with pytest.raises(HardwareError, match=problem.replace("(", "\\(")):
        FlexivHardware(RIZON, settings)


def test_backend_is_found_by_name_and_built_from_settings(rdk):
    hw = load_backend("flexiv")(RIZON, {"serial_number": "Rizon 4s-062468", "network_interface_whitelist": "10.42.0.1"})
    assert isinstance(hw, FlexivHardware) and hw.whitelist == ["10.42.0.1"]


def test_the_shipped_config_and_stack_hold_the_documented_defaults():
    params = yaml.safe_load(config_path("robots", "flexiv_rizon4.yaml").read_text())["/**"]["ros__parameters"]
    block = params["flexiv"]
    with pytest.raises(HardwareError, match="flexiv.serial_number"):  # to be set for the arm at hand
        FlexivHardware(RIZON, block)
    hw = FlexivHardware(RIZON, {**block, "serial_number": SERIAL})
    assert (hw.whitelist, hw.gripper_name, hw.command_rate_hz) == ([], "Robotiq-2F-85", 100.0)
    (driver,) = load_stack("config/stacks/flexiv_rizon4_real.yaml", {"flexiv.serial_number": SERIAL}).nodes
    assert driver.parameters == {"backend": "flexiv", "flexiv.serial_number": SERIAL}
    assert [Path(f).name for f in driver.parameter_files] == ["flexiv_rizon4.yaml"]


def test_a_missing_sdk_names_the_package_and_the_python_versions(monkeypatch):
    monkeypatch.setitem(sys.modules, "flexivrdk", None)  # import flexivrdk raises ImportError
    with pytest.raises(HardwareError) as error:
        hardware().on_configure()
    message = str(error.value)
    assert "flexivrdk 1.9.4.1" in message and "pip install .[drivers]" in message
    assert "CPython 3.10, 3.12, 3.14 only, none for 3.11 or 3.13" in message


def test_connect_failures_say_why(rdk):
    with pytest.raises(LinkLost, match="cannot connect to Rizon4-999999.*RDK server is activated"):
        FlexivHardware(RIZON, {"serial_number": "Rizon4-999999"}).on_configure()
    rdk.add_arm("Rizon10-000001", np.zeros(7), model_name="Rizon10")
    with pytest.raises(HardwareError, match="is a Rizon10 with 7 joints; robot flexiv_rizon4 expects a Rizon 4"):
        FlexivHardware(RIZON, {"serial_number": "Rizon10-000001"}).on_configure()
    with pytest.raises(HardwareError, match="no gripper 'Flexiv-GN01'.*configured in Flexiv Elements"):
        hardware(gripper_name="Flexiv-GN01").on_configure()
    no_gripper = hardware(gripper_name="")
    no_gripper.on_configure()
    assert np.isnan(no_gripper.read().position[7:]).all()


# -- the stand-in against the recorded API of flexivrdk 1.9.4.1 --------------------------------------
def test_standin_offers_only_names_of_the_sdk_with_its_signatures():
    assert flexivrdk_standin.__version__ == API["version"] == "1.9.4.1"
    public = {n for n in vars(flexivrdk_standin) if not n.startswith("_")}
    helpers = {"annotations", "dataclass", "field", "enum", "math", "re", "threading", "time", "DOF",
               "SDK_NAMES", "CONTROL_NAMES"}
    assert public - helpers == set(flexivrdk_standin.SDK_NAMES) | set(flexivrdk_standin.CONTROL_NAMES)
    checked = 0
    for name in flexivrdk_standin.SDK_NAMES:
        real = API["classes"][name]
        cls = getattr(flexivrdk_standin, name)
        if "enum_members" in real:
            assert {m.name: m.value for m in cls} == real["enum_members"], name
            checked += len(real["enum_members"])
            continue
        for attribute in cls.__annotations__:
            assert attribute in real["properties"], f"{name}.{attribute} is not in flexivrdk {API['version']}"
            checked += 1
        for method, function in vars(cls).items():
            if not callable(function) or (method.startswith("_") and method != "__init__"):
                continue
            assert method in real["methods"], f"{name}.{method} is not in flexivrdk {API['version']}"
            overloads = [o["parameters"] for o in real["methods"][method]]
            problem = signatures.mismatch(f"{name}.{method}", signatures.parameters(function), overloads)
            assert problem is None, problem
            checked += 1
    assert checked > 60



def test_the_backend_imports_without_the_sdk_and_runs_on_the_shim_in_another_process():
    """What a driver in a process of its own (the DDS conformance tests) relies on: the backend
    imports without the SDK, and tests/standins/shim puts the stand-in under the SDK's name, with
    a robot on its network."""
    printed = run_on_the_shim("r2s2r.hardware.flexiv.FlexivHardware", "flexivrdk", "flexiv_rizon4",
                              {"serial_number": "Rizon4-062468"})
    assert printed == ["tests.standins.flexivrdk_standin", get_robot("flexiv_rizon4").joint_names[0]]
