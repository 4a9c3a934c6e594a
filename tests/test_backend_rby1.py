"""Rby1Hardware against the rby1-sdk stand-in (tests/standins/rby1_sdk_standin.py), driven by
ControlLoop without a ROS graph; the stand-in is checked against the real rby1_sdk 0.10.0, which
installs on our Python (a test dependency)."""

import enum
import importlib
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from r2s2r.hardware.backends import load_backend
from r2s2r.hardware.base import HardwareError, Lifecycle, LinkLost
from r2s2r.hardware.rby1 import PARKED_HOLD_TIME_S, Rby1Hardware
from r2s2r.paths import config_path
from r2s2r.robots import get_robot
from r2s2r.stack import load_stack
from tests.backend_helpers import PeerLog, active_loop, arrived, by_joint, hostile_session, run_on_the_shim, stream
from tests.standins import rby1_sdk_standin as standin
from tests.standins import signatures

# A hardware protocol in real time (link timeouts of tens of ms): run alone, never beside another
# test file (make test runs these after the others, one at a time).
pytestmark = pytest.mark.realtime

RBY1 = get_robot("rby1")
ADDRESS = "127.0.0.1:50051"
SDK_Q0 = np.array([0.0, 0.0] + [RBY1.home[j] for j in standin.JOINT_NAMES[2:]])  # wheels, then our joints


@pytest.fixture
def sdk(monkeypatch, tmp_path):
    world = standin.world
    world.reset()
    world.add_robot(ADDRESS, SDK_Q0)
    device = tmp_path / "rby1_gripper"  # the UPC's udev name, here a file so the path exists
    device.touch()
    world.add_gripper_bus(str(device), ADDRESS)
    monkeypatch.setitem(sys.modules, "rby1_sdk", standin)
    return world


def bus_device(world) -> str:
    (device,) = world.buses
    return device


def hardware(sdk, **settings):
    return Rby1Hardware(RBY1, {"address": ADDRESS, "gripper_device": bus_device(sdk), "gripper_homing_stall_s": 0.1,
                               **settings})


def in_joint_order(targets: dict) -> np.ndarray:
    return np.concatenate([targets[g] for g in RBY1.group_names])


def group_targets(offset: float = 0.15) -> dict:
    """Each joint `offset` from home toward the middle of its range."""
    limits, names = RBY1.limits, RBY1.joint_names
    targets = {}
    for group in RBY1.groups:
        i = [names.index(j) for j in group.joints]
        home = RBY1.home_positions[i]
        middle = (limits.lower[i] + limits.upper[i]) / 2
        targets[group.name] = home + offset * np.sign(middle - home + 1e-9)
    return targets


@pytest.fixture
def active(sdk):
    hw = hardware(sdk)
    yield hw, active_loop(hw, control_rate_hz=200.0)
    hw.on_cleanup()


def test_connect_reads_the_robot_once_and_goes_inactive(sdk):
    hw = hardware(sdk)
    hw.on_configure()
    assert hw.state is Lifecycle.INACTIVE
    sample = hw.read()
    assert sample.names == RBY1.joint_names + RBY1.gripper_joint_names
    np.testing.assert_allclose(sample.position[:22], RBY1.home_positions)  # mapped by name, wheels left out
    np.testing.assert_allclose(sample.effort[:22], 3.0 * np.sin(RBY1.home_positions))  # the stand-in's torque
    assert np.isnan(sample.position[22:]).all()  # grippers not homed before the first activation
    facts = hw.describe()
    assert facts["control_manager"] == "Idle" and facts["fault"] is False and facts["gripper_homed"] is False
    assert facts["sdk_version"] == "0.10.0" and facts["model"] == "A"
    assert sdk.calls_of("start_state_update")[0].args == (100.0,)
    hw.on_cleanup()
    hw.on_cleanup()  # idempotent
    assert hw.state is Lifecycle.FINALIZED


def test_activate_powers_servos_all_but_the_wheels_and_homes_the_grippers(active, sdk):
    hw, _ = active
    robot = sdk.robots[ADDRESS]
    assert robot.servoed == set(standin.JOINT_NAMES[2:])  # never the wheels
    assert robot.control_manager is standin.ControlManagerState.State.Enabled
    assert robot.flange_voltage == {"right": 12, "left": 12}
    bus = sdk.buses[bus_device(sdk)]
    assert bus.mode_writes_ignored == 0  # modes were only written with torque off
    assert all(m.mode == standin.DynamixelBus.CurrentBasedPositionControlMode for m in bus.motors.values())
    assert hw.describe()["gripper_homed"] is True


def test_streams_setpoints_and_every_component_arrives_at_bounded_speed(active, sdk):
    hw, loop = active
    targets = group_targets()
    wanted = in_joint_order(targets)
    start = time.monotonic()
    speeds = [np.abs(sample.velocity[:22]) for sample in stream(loop, 5.0, targets, until=arrived(wanted, 1e-3))]
    stream(loop, 0.1, targets)  # settled: the last command sent is the target
    elapsed = time.monotonic() - start
    np.testing.assert_allclose(loop.positions(), wanted, atol=2e-3)
    np.testing.assert_allclose(sdk.robots[ADDRESS].q[2:], wanted, atol=2e-3)
    np.testing.assert_allclose(sdk.robots[ADDRESS].q[:2], 0.0)  # the base never moved
    assert np.all(np.max(speeds, axis=0) <= RBY1.limits.velocity + 1e-6)
    sends = sdk.calls_of("stream.send_command")
    positions, settings = sends[-1].args
    assert set(positions) == {"torso", "right_arm", "left_arm", "head"}
    for group in RBY1.group_names:
        np.testing.assert_allclose(positions[group], targets[group], atol=1e-6)
    minimum_time, hold_time, velocity_limit, _ = settings["right_arm"]
    assert minimum_time == pytest.approx(1.01 / 100) and hold_time == 1.0
    np.testing.assert_allclose(velocity_limit, RBY1.limits.velocity[[RBY1.joint_names.index(j)
                                                                     for j in RBY1.group("right_arm").joints]])
    assert len(sends) <= elapsed * 100 + 2  # throttled to command_rate_hz, the loop runs at 200 Hz
    assert {c.thread for c in sends} == {"rby1-stream"}


def test_grippers_move_on_the_bus_only_when_the_opening_changes(active, sdk):
    hw, loop = active
    loop.controller.command_gripper("right_gripper", [0.03], hw.now)
    loop.controller.command_gripper("left_gripper", [0.08], hw.now)
    fingers = np.array([0.015, 0.015, 0.04, 0.04])
    stream(loop, 3.0, until=lambda _: np.allclose(hw.read().position[22:], fingers, atol=1e-4))
    stream(loop, 0.1)
    np.testing.assert_allclose(hw.read().position[22:], fingers, atol=1e-4)
    writes = sdk.calls_of("bus.send_position")
    assert len(writes) == 1 and {c.thread for c in writes} == {"rby1-gripper"}
    bus = sdk.buses[bus_device(sdk)]
    right, left = bus.motors[0], bus.motors[1]
    assert right.q == pytest.approx(right.low + 0.3 * (right.high - right.low))  # 0.03 of 0.1 m open
    assert left.q == pytest.approx(left.low + 0.8 * (left.high - left.low))
    # A GripperCommand's max_effort of 20 N, 40 % of the gripper's 50 N: 40 % of Rainbow's goal
    # current 5.0 on that motor, sent before the goal positions; the other keeps its own.
    before = len(sdk.calls_of("bus.send_torque"))
    loop.controller.command_gripper("right_gripper", [0.03], hw.now, 20.0)
    stream(loop, 1.0, until=lambda _: len(sdk.calls_of("bus.send_position")) == 2)
    stream(loop, 0.1)
    torques = sdk.calls_of("bus.send_torque")[before:]
    assert len(torques) == 1 and torques[0].args[0] == [(0, pytest.approx(2.0)), (1, pytest.approx(5.0))]
    assert len(sdk.calls_of("bus.send_position")) == 2
    assert sdk.calls.index(torques[0]) < sdk.calls.index(sdk.calls_of("bus.send_position")[-1])
    assert hw.describe()["gripper_goal_currents"] == "2, 5"


def test_a_hostile_stream_leaves_every_component_at_rest_and_an_estop_stops_it(active, sdk):
    """The shared hostile session (tests/backend_helpers.hostile_session), checked on the joint
    position commands the stand-in's command stream received: they come to rest after the stream,
    stop within the stopping distance after an estop and stay put until enable()."""
    _, loop = active

    def sent():
        sends = sdk.calls_of("stream.send_command")
        return by_joint([c.time for c in sends], [in_joint_order(c.args[0]) for c in sends])
    hostile_session(loop, PeerLog(sent, resolution=1e-9), seed=3)  # the SDK takes doubles


def test_deactivate_parks_on_the_last_setpoint(active, sdk):
    hw, loop = active
    stream(loop, 0.3, group_targets())
    hw.on_deactivate()
    assert hw.state is Lifecycle.INACTIVE
    sends = sdk.calls_of("stream.send_command")
    assert sends[-1].args[1]["torso"][1] == PARKED_HOLD_TIME_S
    stream(loop, 0.2)
    assert len(sdk.calls_of("stream.send_command")) == len(sends)  # nothing streams while inactive


def test_link_loss_raises_within_100_ms_and_reconnect_reads_again(active, sdk):
    hw, loop = active
    stream(loop, 0.3, group_targets())
    sdk.cut_link(ADDRESS)
    cut = time.monotonic()
    with pytest.raises(LinkLost, match="stopped answering"):
        stream(loop, 1.0)
    assert time.monotonic() - cut < 0.1
    assert hw.state is Lifecycle.ERROR
    hw.on_cleanup()  # what the driver does, then it retries connect()
    with pytest.raises(LinkLost, match="no answer from 127.0.0.1:50051"):
        hw.on_configure()
    sdk.restore_link(ADDRESS)
    hw.on_configure()
    assert hw.state is Lifecycle.INACTIVE
    np.testing.assert_allclose(hw.read().position[:22], sdk.robots[ADDRESS].q[2:])
    hw.on_activate()
    loop.hold_here()
    stream(loop, 0.2)
    assert hw.state is Lifecycle.ACTIVE and hw.describe()["gripper_homed"] is True


def test_a_fault_is_reported_stops_streaming_and_reset_resumes_it(active, sdk):
    hw, loop = active
    stream(loop, 0.1)
    sdk.inject_fault(ADDRESS)
    # The loop goes on: the robot holds, nothing is sent.
    stream(loop, 2.0, until=lambda _: hw.describe().get("last_error") == "control manager MinorFault")
    assert hw.state is Lifecycle.ERROR
    sent = len(sdk.calls_of("stream.send_command"))
    stream(loop, 0.1)
    assert len(sdk.calls_of("stream.send_command")) == sent
    facts = hw.describe()
    assert facts["fault"] is True and facts["control_manager"] == "MinorFault"
    assert facts["last_error"] == "control manager MinorFault"
    hw.reset()
    assert sdk.calls_of("reset_fault_control_manager") and hw.state is Lifecycle.ACTIVE
    loop.hold_here()
    targets = group_targets(0.1)
    stream(loop, 5.0, targets, until=arrived(in_joint_order(targets), 1e-3))
    np.testing.assert_allclose(loop.positions(), in_joint_order(targets), atol=2e-3)
    assert hw.describe()["fault"] is False


def test_a_fault_that_does_not_clear_is_an_error(active, sdk):
    hw, loop = active
    sdk.inject_fault(ADDRESS, major=True)
    # Only until the driver stops streaming, which the stream's end may show before the state
    # callback brings the fault: reset() asks the control manager itself.
    stream(loop, 2.0, until=lambda _: hw.state is Lifecycle.ERROR)
    with pytest.raises(HardwareError, match="reset_fault_control_manager\\(\\) failed"):
        hw.reset()
    with pytest.raises(HardwareError, match="control manager is in MajorFault"):
        hw.on_activate()


def test_a_preempted_stream_is_reported(active, sdk):
    hw, loop = active
    stream(loop, 0.1)
    sdk.robots[ADDRESS].stream._finish(standin.RobotCommandFeedback.FinishCode.Preempted)
    stream(loop, 2.0, until=lambda _: hw.state is Lifecycle.ERROR)
    assert hw.state is Lifecycle.ERROR and "command stream ended" in hw.describe()["last_error"]


def test_servo_needs_power_and_says_so(sdk):
    hw = hardware(sdk, power="5v")  # the actuators' 48 V stays off
    hw.on_configure()
    with pytest.raises(HardwareError, match=re.escape("servo_on('torso_.*|right_arm_.*|left_arm_.*|head_.*') failed")):
        hw.on_activate()


def test_without_a_gripper_bus_the_fingers_read_nan_and_are_not_commanded(sdk):
    hw = Rby1Hardware(RBY1, {"address": ADDRESS, "gripper_device": ""})
    loop = active_loop(hw, control_rate_hz=200.0)
    loop.controller.command_gripper("right_gripper", [0.02], hw.now)
    stream(loop, 0.1)
    assert np.isnan(hw.read().position[22:]).all()
    assert not sdk.calls_of("bus.open_port") and sdk.robots[ADDRESS].flange_voltage == {"right": 0, "left": 0}
    hw.on_cleanup()


def test_connect_failures_say_why(sdk):
    with pytest.raises(LinkLost, match="no answer from 127.0.0.9:50051 within 0.1 s"):
        Rby1Hardware(RBY1, {"address": "127.0.0.9:50051", "gripper_device": "", "connect_timeout_s": 0.1}).on_configure()
    with pytest.raises(HardwareError, match="no gripper bus at /nonexistent/rby1_gripper.*run the driver on the UPC"):
        Rby1Hardware(RBY1, {"address": ADDRESS, "gripper_device": "/nonexistent/rby1_gripper"}).on_configure()


@pytest.mark.parametrize("settings, problem", [
    ({"address": "192.168.30.1"}, "rby1.address: expected the robot's gRPC address as host:port"),
    ({"model": "m"}, "rby1.model: expected one of a, got 'm'"),
    ({"servo": ".*"}, "rby1.servo: expected a pattern that names no wheel (right_wheel, left_wheel)"),
    ({"power": "(48v"}, "rby1.power: expected a regular expression"),
    ({"command_rate_hz": 1000}, "rby1.command_rate_hz: expected a number <= 500"),
    ({"state_rate_hz": 10}, "rby1.state_rate_hz: expected a number >= 50"),
    ({"gripper_device": 3}, "rby1.gripper_device: expected the gripper bus's device path"),
    ({"gripper_reversed": "yes"}, "rby1.gripper_reversed: expected true or false"),
    ({"ip": "192.168.30.1"}, "rby1.ip: expected one of the keys"),
])
def test_bad_settings_name_the_key_and_what_was_expected(settings, problem):
    with pytest.raises(HardwareError, match=re.escape(problem)):
        Rby1Hardware(RBY1, settings)


def test_backend_is_found_by_name_and_built_from_settings():
    hw = load_backend("rby1")(RBY1, {"address": "10.0.0.5:50051", "gripper_device": ""})
    assert isinstance(hw, Rby1Hardware) and hw.address == "10.0.0.5:50051"


def test_the_shipped_config_and_stack_hold_the_documented_defaults():
    params = yaml.safe_load(config_path("robots", "rby1.yaml").read_text())["/**"]["ros__parameters"]
    hw = Rby1Hardware(RBY1, params["rby1"])
    assert (hw.address, hw.model, hw.command_rate_hz, hw.state_rate_hz) == ("192.168.30.1:50051", "a", 100.0, 100.0)
    assert not any(re.fullmatch(hw.servo, wheel) for wheel in ("right_wheel", "left_wheel"))
    (driver,) = load_stack("config/stacks/rby1_real.yaml", {"rby1.gripper_device": ""}).nodes
    assert driver.parameters == {"backend": "rby1", "rby1.gripper_device": ""}
    assert [Path(f).name for f in driver.parameter_files] == ["rby1.yaml"]


def test_a_missing_sdk_names_the_package_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "rby1_sdk", None)
    with pytest.raises(HardwareError, match=re.escape("needs rby1-sdk 0.10.0") + ".*" +
                       re.escape("pip install .[drivers]")):
        Rby1Hardware(RBY1, {"gripper_device": ""}).on_configure()


# -- the stand-in against the real rby1_sdk ----------------------------------------------------------
def _real_sdk():
    try:
        return importlib.import_module("rby1_sdk")
    except ImportError as exc:
        raise AssertionError(f"the signature test needs the real rby1-sdk==0.10.0 installed (a test dependency): "
                             f"{exc}") from None


def _check_class(cls, real, where: str) -> int:
    checked = 0
    for attribute in getattr(cls, "__annotations__", {}):
        assert hasattr(real, attribute), f"{where}.{attribute} is not in rby1_sdk"
        checked += 1
    for name, value in vars(cls).items():
        if isinstance(value, type) and issubclass(value, enum.IntEnum):
            members = {k: int(v) for k, v in getattr(real, name).__members__.items()}
            assert {m.name: m.value for m in value} == members, f"{where}.{name} members differ"
            checked += len(members)
        elif isinstance(value, int) and not name.startswith("_"):
            assert getattr(real, name) == value, f"{where}.{name} is {getattr(real, name)}, stand-in {value}"
            checked += 1
        elif callable(value) or isinstance(value, staticmethod):
            if name.startswith("_") and name != "__init__":
                continue
            function = value.__func__ if isinstance(value, staticmethod) else value
            overloads = signatures.pybind_signatures(getattr(real, name), name)
            if name == "__init__" and not overloads:
                continue  # not constructible from Python in the SDK; the stand-in builds it internally
            problem = signatures.mismatch(f"{where}.{name}", signatures.parameters(function), overloads)
            assert problem is None, problem
            checked += 1
    return checked


def test_standin_offers_only_names_of_the_sdk_with_its_signatures():
    real = _real_sdk()
    assert real is not standin and real.__version__ == standin.__version__ == "0.10.0"
    public = {n for n in vars(standin) if not n.startswith("_")}
    helpers = {"annotations", "dataclass", "field", "enum", "inspect", "np", "re", "threading", "time", "types",
               "SDK_NAMES", "CONTROL_NAMES", "JOINT_NAMES", "COMPONENT_INDEX", "POWER_DEVICES"}
    assert public - helpers == set(standin.SDK_NAMES) | set(standin.CONTROL_NAMES)
    checked = 0
    for name in standin.SDK_NAMES:
        value, real_value = getattr(standin, name), getattr(real, name)
        if name == "upc":
            assert value.GripperDeviceName == real_value.GripperDeviceName == "/dev/rby1_gripper"
            problem = signatures.mismatch("upc.initialize_device", signatures.parameters(value.initialize_device),
                                          signatures.pybind_signatures(real_value.initialize_device,
                                                                       "initialize_device"))
            assert problem is None, problem
            checked += 2
        elif isinstance(value, type):
            checked += _check_class(value, real_value, name)
        else:
            problem = signatures.mismatch(name, signatures.parameters(value),
                                          signatures.pybind_signatures(real_value, name))
            assert problem is None, problem
            checked += 1
    # The model's joint order is the SDK's: the stand-in's must be the real one.
    model = real.Model_A()
    assert list(model.robot_joint_names) == standin.JOINT_NAMES
    for component, index in standin.COMPONENT_INDEX.items():
        assert list(getattr(model, f"{component}_idx")) == index
    assert checked > 80


def test_the_real_sdk_takes_the_model_and_the_commands_the_backend_builds():
    """Rby1Hardware's joint mapping and command building run against the real rby1_sdk: the model's
    names and index lists, the builders' names and their implicit conversions all hold."""
    real = _real_sdk()
    hw = Rby1Hardware(RBY1, {"gripper_device": ""})
    hw._sdk = real
    hw._map_joints(real.Model_A())
    np.testing.assert_array_equal(hw._index, np.arange(2, 24))
    command = hw._command(RBY1.home_positions, 1.0)
    assert isinstance(command, real.RobotCommandBuilder)



def test_the_backend_imports_without_the_sdk_and_runs_on_the_shim_in_another_process():
    """What a driver in a process of its own (the DDS conformance tests) relies on: the backend
    imports without the SDK, and tests/standins/shim puts the stand-in under the SDK's name, with
    a robot on its network."""
    printed = run_on_the_shim("r2s2r.hardware.rby1.Rby1Hardware", "rby1_sdk", "rby1",
                              {"address": "127.0.0.1:50051", "gripper_device": ""})
    assert printed == ["tests.standins.rby1_sdk_standin", get_robot("rby1").joint_names[0]]
