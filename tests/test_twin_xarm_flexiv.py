"""The xArm7 and Rizon 4 twins over DDS: `r2s2r up <robot>_sim.yaml` in its own process, this test
as the client. Streamed targets, a trajectory and a gripper command each arrive, and
joint_states carry the vendor's joint names.
"""

import time

import numpy as np
import pytest
from trajectory_msgs.msg import JointTrajectory

from r2s2r.contract import Topics
from r2s2r.robots import get_robot

# Per robot: its stack, and an offset from home (rad) that every joint moves through.
CASES = {
    "xarm7": ("config/stacks/xarm7_sim.yaml", [0.2, 0.15, -0.2, 0.25, 0.2, -0.2, 0.3]),
    "flexiv_rizon4": ("config/stacks/flexiv_rizon4_sim.yaml", [0.2, 0.15, -0.2, -0.25, 0.2, 0.2, 0.3]),
}
ARRIVED = 1e-3  # rad
TIMEOUT = 20.0  # s of wall time; the twin runs at real time unless the CPU is starved


@pytest.mark.parametrize("robot_name", sorted(CASES))
def test_streaming_trajectory_and_gripper_over_dds(robot_name, stack_process, ros_client):
    stack, offset = CASES[robot_name]
    robot = get_robot(robot_name)
    arm = robot.group("arm").joints
    home = robot.home_positions
    stack_process(stack, "camera_rate_hz:=0.0")  # images are not under test; spare the CPU
    client = ros_client()
    sample = client.wait_for_joint_states(timeout=30.0)
    assert sample.names == arm + robot.gripper_joint_names
    assert client.wait_until_at(arm, home, ARRIVED, TIMEOUT)

    # Streaming: a one-second ramp from home to home + offset, at 100 Hz.
    assert client.wait_for_subscriber(Topics.position_commands("arm"))
    streamed = home + np.asarray(offset)
    for s in np.linspace(0.0, 1.0, 101):
        client.send_positions("arm", home + s * np.asarray(offset))
        time.sleep(0.01)
    assert client.wait_until_at(arm, streamed, ARRIVED, TIMEOUT), \
        f"streamed target missed by {np.max(np.abs(client.positions(arm) - streamed)):.4f} rad"

    # A trajectory back past home, two points, as joint_trajectory_controller takes it.
    assert client.wait_for_subscriber(Topics.joint_trajectory("arm"), JointTrajectory)
    goal = home - 0.5 * np.asarray(offset)
    client.send_trajectory("arm", list(arm), [0.8, 1.6], [home, goal])
    assert client.wait_until_at(arm, goal, ARRIVED, TIMEOUT), \
        f"trajectory goal missed by {np.max(np.abs(client.positions(arm) - goal)):.4f} rad"

    # The gripper closes to 20 mm: the finger joints' travel sums to the opening.
    assert client.wait_for_subscriber(Topics.gripper_commands("gripper"))
    client.send_gripper("gripper", 0.02)
    fingers = robot.gripper("gripper").joints
    assert client.wait_for(lambda: abs(client.positions(fingers).sum() - 0.02) < 1e-3, TIMEOUT), \
        f"gripper opening {client.positions(fingers).sum():.4f} m, commanded 0.02 m"
    # The driver's diagnostics (1 Hz) counted every command and rejected none.
    assert client.wait_for(lambda: int(client.diagnostic_values().get("commands_accepted", 0)) >= 3, TIMEOUT)
    assert client.diagnostic_values()["commands_rejected"] == "0"
