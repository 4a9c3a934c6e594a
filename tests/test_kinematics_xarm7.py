"""UFACTORY xArm7: forward kinematics against UFACTORY's published DH table, and datasheet limits."""

import mujoco
import numpy as np
import pytest

from r2s2r.robots import get_robot
from r2s2r.sim.scene import Scene
from r2s2r.sim.twin import Twin
from tests.kinematics import check_limits_against_datasheet, check_site_against, modified_dh, tcp_offset

# UFACTORY's published modified DH parameters of the xArm7: (a, d, alpha, theta offset), joint 1..7;
# joint 7's frame is the tool flange.
XARM7_DH = [
    (0.0, 0.267, 0.0, 0.0),
    (0.0, 0.0, -np.pi / 2, 0.0),
    (0.0, 0.293, np.pi / 2, 0.0),
    (0.0525, 0.0, np.pi / 2, 0.0),
    (0.0775, 0.3425, np.pi / 2, 0.0),
    (0.0, 0.0, np.pi / 2, 0.0),
    (0.076, 0.097, -np.pi / 2, 0.0),
]
# xArm7 datasheet: joint ranges and speed (degrees), efforts as xarm_description gives them.
Q_MIN = np.radians([-360, -118, -360, -11, -360, -97, -360])
Q_MAX = np.radians([360, 120, 360, 225, 360, 180, 360])
DQ_MAX = np.radians([180] * 7)
DDQ_MAX = [20.0] * 7
TAU_MAX = [50.0, 50.0, 30.0, 30.0, 30.0, 20.0, 20.0]


@pytest.fixture(scope="module")
def twin():
    return Twin(Scene(robot="xarm7", table=None, robot_cameras=False))


def test_flange_pose_matches_published_dh_at_25_configurations(twin):
    check_site_against(twin, "arm_flange", twin.robot.joint_names, Q_MIN, Q_MAX,
                       lambda q: modified_dh(XARM7_DH, q), seed=11)


def test_zero_pose_puts_the_flange_where_ufactory_says(twin):
    # UFACTORY's xArm7 zero position: flange at (206, 0, 120.5) mm, pointing down.
    twin.data.qpos[:] = 0.0
    mujoco.mj_kinematics(twin.model, twin.data)
    site = twin.data.site("arm_flange")
    assert site.xpos == pytest.approx([0.206, 0.0, 0.1205], abs=1e-6)
    assert site.xmat.reshape(3, 3)[:, 2] == pytest.approx([0.0, 0.0, -1.0], abs=1e-6)


def test_tcp_is_172_mm_beyond_the_flange(twin):
    offset = tcp_offset(twin, "arm_flange", "arm_tcp")
    assert offset == pytest.approx([0.0, 0.0, 0.172], abs=1e-6)


def test_joint_limits_equal_the_datasheet():
    robot = get_robot("xarm7")
    assert robot.joint_names == tuple(f"joint{i}" for i in range(1, 8))  # xarm_ros2's names
    check_limits_against_datasheet(robot, Q_MIN, Q_MAX, DQ_MAX, DDQ_MAX, TAU_MAX)
    assert robot.gripper("gripper").opening_range == (0.0, 0.085)
