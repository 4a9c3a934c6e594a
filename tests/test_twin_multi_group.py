"""The multi-group twins over DDS: `r2s2r up <robot>_sim.yaml` in its own process, this test as
the client. Each joint group follows streamed targets and a trajectory while every other group
holds still, and each gripper opens and closes, all through the identical interface.
"""

import time

import numpy as np
import pytest
from trajectory_msgs.msg import JointTrajectory

from r2s2r.contract import Topics
from r2s2r.robots import get_robot

# Per robot: its stack, and per group an offset from home (rad) that the group moves through.
CASES = {
    "rby1": ("config/stacks/rby1_sim.yaml", {
        "torso": [0.05, -0.1, 0.1, -0.1, 0.05, 0.1],
        "right_arm": [-0.15, -0.1, 0.15, -0.2, -0.15, -0.15, 0.2],
        "left_arm": [-0.15, 0.1, -0.15, -0.2, 0.15, -0.15, -0.2],
        "head": [0.2, -0.15],
    }),
    "aloha": ("config/stacks/aloha_sim.yaml", {
        "left_arm": [0.2, 0.15, -0.15, 0.2, 0.2, -0.3],
        "right_arm": [-0.2, 0.15, -0.15, -0.2, 0.2, 0.3],
    }),
}
ARRIVED = 1e-3  # rad
STILL = 1e-3  # rad: how far a group that was not commanded may end from where it was
SETTLE = 2.0  # s: the uncommanded groups' servos take up the reaction of a moving torso or arm
TIMEOUT = 20.0  # s of wall time; the twin runs at real time unless the CPU is starved


def _assert_others_held(client, robot, group, reference):
    """Every group but `group` is back within STILL of `reference` (joint name -> position)."""
    names = [j for j in robot.joint_names if j not in robot.group(group).joints]
    held = np.array([reference[j] for j in names])

    def deviation():
        return float(np.max(np.abs(client.positions(names) - held)))
    assert client.wait_for(lambda: deviation() < STILL, SETTLE), \
        f"moving {group} left another group {deviation() * 1e3:.2f} mrad from where it was"


@pytest.mark.parametrize("robot_name", sorted(CASES))
def test_each_group_streams_and_follows_a_trajectory_while_the_others_hold(robot_name, stack_process, ros_client):
    stack, offsets = CASES[robot_name]
    robot = get_robot(robot_name)
    assert set(offsets) == set(robot.group_names)
    stack_process(stack, "camera_rate_hz:=0.0")  # images are not under test; spare the CPU
    client = ros_client()
    sample = client.wait_for_joint_states(timeout=30.0)
    assert sample.names == robot.joint_names + robot.gripper_joint_names
    assert client.wait_until_at(robot.joint_names, robot.home_positions, ARRIVED, TIMEOUT)

    for group in robot.group_names:
        joints = robot.group(group).joints
        start = client.positions(joints)
        reference = dict(zip(robot.joint_names, client.positions(robot.joint_names)))
        offset = np.asarray(offsets[group])

        # Streaming: a half-second ramp to start + offset, at 100 Hz.
        assert client.wait_for_subscriber(Topics.position_commands(group))
        for s in np.linspace(0.0, 1.0, 51):
            client.send_positions(group, start + s * offset)
            time.sleep(0.01)
        streamed = start + offset
        assert client.wait_until_at(joints, streamed, ARRIVED, TIMEOUT), \
            f"{group}: streamed target missed by {np.max(np.abs(client.positions(joints) - streamed)):.4f} rad"
        _assert_others_held(client, robot, group, reference)

        # A trajectory to the far side of the start, two points, as joint_trajectory_controller takes it.
        assert client.wait_for_subscriber(Topics.joint_trajectory(group), JointTrajectory)
        goal = start - 0.5 * offset
        client.send_trajectory(group, list(joints), [0.6, 1.2], [start, goal])
        assert client.wait_until_at(joints, goal, ARRIVED, TIMEOUT), \
            f"{group}: trajectory goal missed by {np.max(np.abs(client.positions(joints) - goal)):.4f} rad"
        _assert_others_held(client, robot, group, reference)

    # Each gripper in turn moves to the middle of its range; those not yet commanded stay open.
    for i, gripper in enumerate(robot.grippers):
        assert client.wait_for_subscriber(Topics.gripper_commands(gripper.name))
        target = sum(gripper.opening_range) / 2
        client.send_gripper(gripper.name, target)
        assert client.wait_for(lambda g=gripper, t=target: abs(client.positions(g.joints).sum() - t) < 1e-3, TIMEOUT), \
            f"{gripper.name}: opening {client.positions(gripper.joints).sum():.4f} m, commanded {target} m"
        for waiting in robot.grippers[i + 1:]:
            assert client.positions(waiting.joints).sum() == pytest.approx(waiting.opening_range[1], abs=1e-3)

    # The driver's diagnostics (1 Hz) counted the commands and rejected none.
    expected = 2 * len(robot.groups) + len(robot.grippers)
    assert client.wait_for(lambda: int(client.diagnostic_values().get("commands_accepted", 0)) >= expected, TIMEOUT)
    assert client.diagnostic_values()["commands_rejected"] == "0"
