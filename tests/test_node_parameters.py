"""Parameters are checked when a node starts and cannot be changed under it: driver_node refuses
out-of-range rates, factors and limits by name, and `ros2 param set` on a running node (driver,
camera, policy, recorder: every node nodes.runtime.run starts) is refused with how to change it,
over DDS, while the node keeps running."""

import re

import pytest
import rclpy
from rclpy.context import Context
from rclpy.parameter import Parameter

from r2s2r.nodes.driver_node import DriverNode


@pytest.mark.parametrize("name, value, expected", [
    ("real_time_factor", -1.0, "expected 0 (as fast as the CPU allows) or a factor"),
    ("control_rate_hz", -1000.0, "expected 0 (the robot's own rate) or a rate up to 10 kHz"),
    ("state_rate_hz", float("nan"), "expected 0 (the robot's own rate)"),
    ("camera_rate_hz", 1e6, "expected 0 (no twin cameras) or a rate up to 1 kHz"),
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
