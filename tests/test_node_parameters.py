"""Parameters are checked when a node starts and cannot be changed under it: driver_node,
policy_node and recorder_node refuse out-of-range rates, factors, times and names by name
(hypothesis tries any number: a node starts exactly when each is in its range), and `ros2 param
set` on a running node (driver, camera, policy, recorder: every node nodes.runtime.run starts) is
refused with how to change it, over DDS, while the node keeps running."""

import math
import re

import pytest
import rclpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rclpy.context import Context
from rclpy.parameter import Parameter

from r2s2r.nodes.driver_node import DriverNode


@pytest.mark.parametrize("name, value, expected", [
    ("real_time_factor", -1.0, "expected 0 (as fast as the CPU allows) or a factor"),
    ("control_rate_hz", -1000.0, "expected 0 (the robot's own rate) or a rate from 1 Hz to 10 kHz"),
    ("control_rate_hz", 1e-300, "expected 0 (the robot's own rate) or a rate from 1 Hz to 10 kHz"),
    ("state_rate_hz", float("nan"), "expected 0 (the robot's own rate)"),
    ("state_rate_hz", 1e-300, "expected 0 (the robot's own rate)"),
    ("camera_rate_hz", 1e6, "expected 0 (no twin cameras) or a rate from 0.1 Hz to 1 kHz"),
    ("camera_rate_hz", 1e-9, "expected 0 (no twin cameras) or a rate from 0.1 Hz to 1 kHz"),
    ("watchdog_s", 0.0, "expected a positive time up to 60 s"),
    ("velocity_scale", 1.5, "expected a share of the datasheet velocities in (0, 1]"),
    ("seed", -3, "expected an integer from 0 to 2^32 - 1"),
])
def test_out_of_range_parameters_stop_the_driver_before_it_starts(name, value, expected):
    context = Context()
    rclpy.init(context=context)
    try:
        with pytest.raises(ValueError, match=f"parameter .{name}. is .*; {re.escape(expected)}"):
            DriverNode(context=context, parameter_overrides=[Parameter("robot", value="franka_fr3"),
                                                             Parameter(name, value=value)])
    finally:
        rclpy.shutdown(context=context)


def test_a_running_node_refuses_parameter_changes_and_keeps_running(tmp_path, stack_process):
    from rcl_interfaces.srv import SetParameters
    from rcl_interfaces.msg import Parameter as ParameterMsg, ParameterType, ParameterValue
    stack = tmp_path / "driver.yaml"
    stack.write_text("nodes:\n  - name: driver\n    executable: driver_node\n    parameters:\n"
                     "      - config/robots/franka_fr3.yaml\n      - {camera_rate_hz: 0.0}\n")
    proc = stack_process(str(stack))
    assert proc.wait_for_line("on backend sim", 60), proc.output
    context = Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node("param_setter", context=context)
        client = node.create_client(SetParameters, "/driver/set_parameters")
        assert client.wait_for_service(timeout_sec=30), proc.output
        request = SetParameters.Request(parameters=[ParameterMsg(
            name="real_time_factor", value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=-5.0))])
        future = client.call_async(request)
        executor = rclpy.executors.SingleThreadedExecutor(context=context)
        executor.add_node(node)
        executor.spin_until_future_complete(future, timeout_sec=30)
        (result,) = future.result().results
        assert not result.successful
        assert "real_time_factor: read when driver starts; set it in the stack file or with -p" in result.reason
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    assert proc.proc.poll() is None and "Traceback" not in proc.output, proc.output


@pytest.mark.parametrize("node, overrides, expected", [
    ("policy", {"command_rate_hz": float("nan")}, "parameter 'command_rate_hz' is nan; expected a rate in Hz"),
    ("policy", {"command_rate_hz": -5.0}, "parameter 'command_rate_hz' is -5.0; expected a rate in Hz"),
    ("recorder", {"duration_s": -1.0}, "parameter 'duration_s' is -1.0; expected 0 (until stopped)"),
    ("recorder", {"duration_s": float("nan")}, "parameter 'duration_s' is nan; expected 0 (until stopped)"),
])
def test_policy_and_recorder_refuse_out_of_range_numbers_by_name(node, overrides, expected, tmp_path):
    """Checked before anything starts: the recorder writes no bag."""
    from r2s2r.nodes.policy_node import PolicyNode
    from r2s2r.nodes.recorder_node import RecorderNode
    base = {"policy": {"robot": "franka_fr3", "policy": "scripted:hold"},
            "recorder": {"robot": "franka_fr3", "out": str(tmp_path / "bag.mcap")}}[node]
    make = {"policy": PolicyNode, "recorder": RecorderNode}[node]
    context = Context()
    rclpy.init(context=context)
    try:
        with pytest.raises(ValueError, match=re.escape(expected)):
            make(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in {**base, **overrides}.items()])
    finally:
        rclpy.shutdown(context=context)
    assert not (tmp_path / "bag.mcap").exists()


# -- hypothesis: any number, and the node starts exactly when every one is in its range ---------------------
number = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 5e-324, 1e300, -1.0]))


def _refusal(make, **overrides) -> str:
    """'' where the node starts (it is closed again), else the one-line message it was refused with."""
    try:
        node = make(**overrides)
    except ValueError as refused:  # ConfigError is one
        assert "\n" not in str(refused), str(refused)
        return str(refused)
    node.close()
    node.destroy_node()
    return ""


POLICY_RANGES = {  # the oracle: what each number may be
    "command_rate_hz": lambda v: 0.1 <= v <= 10000, "sync_tolerance_s": lambda v: 0 <= v <= 60,
    "max_observation_age_s": lambda v: 0 < v < math.inf, "deadline_s": lambda v: 0 < v < math.inf,
    "max_action_age_s": lambda v: 0 < v < math.inf, "ensemble_coefficient": lambda v: 0 <= v < math.inf,
    "replan_steps": lambda v: v >= 1,
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.fixed_dictionaries({}, optional={
    **{name: number for name in POLICY_RANGES if name != "replan_steps"},
    "replan_steps": st.integers(-2**63, 2**63 - 1)}))
def test_policy_node_starts_exactly_when_its_numbers_are_in_range(ros_context, values):
    from r2s2r.nodes.policy_node import PolicyNode

    def make(**overrides):
        return PolicyNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in {
            "robot": "franka_fr3", "policy": "scripted:hold", **overrides}.items()])
    refused = _refusal(make, **values)
    wrong = sorted(name for name, v in values.items() if not POLICY_RANGES[name](v))
    assert bool(refused) == bool(wrong), (values, refused)
    if refused:  # names one of the wrong parameters, its value and what was expected
        name = next(n for n in wrong if re.search(rf"\b{n}\b", refused))
        assert refused.startswith((f"parameter {name!r} is {values[name]!r}; expected ",
                                   f"policy parameters: {name}: expected ")), refused
        assert repr(values[name]) in refused or repr(float(values[name])) in refused, refused


MONTH_S = 30 * 86400.0
camera_names = st.lists(st.one_of(st.sampled_from(["scene", "wrist", "cam_2", ""]), st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6)), max_size=3)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(duration=st.one_of(number, st.sampled_from([MONTH_S, MONTH_S + 1, 1e10])), cameras=camera_names,
       folder=st.booleans())
def test_recorder_starts_exactly_when_its_parameters_are_sound_and_writes_nothing_otherwise(
        ros_context, tmp_path_factory, duration, cameras, folder):
    from r2s2r.contract.names import CAMERA_NAME
    from r2s2r.nodes.recorder_node import RecorderNode
    where = tmp_path_factory.mktemp("rec")
    out = where if folder else where / "bag.mcap"

    def make(**overrides):
        return RecorderNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in {
            "robot": "franka_fr3", "out": str(out), **overrides}.items()])
    refused = _refusal(make, duration_s=duration, cameras=cameras or [""])
    bad_cameras = [c for c in cameras if c and not CAMERA_NAME.fullmatch(c)]
    if folder:
        assert refused == f"parameter 'out' is {str(out)!r}, a folder; expected the MCAP bag to write (a file path)"
    elif not 0 <= duration <= MONTH_S:
        assert refused.startswith(f"parameter 'duration_s' is {duration!r}; expected 0 (until stopped) or a "
                                  "positive time in seconds, up to 30 days"), refused
    elif bad_cameras:
        assert refused.startswith(f"parameter 'cameras' holds {bad_cameras}; expected camera names of letters"), refused
    else:
        assert refused == "" and out.is_file()
    assert list(where.iterdir()) == ([out] if not refused else [])  # refused: no bag, not even an empty one
