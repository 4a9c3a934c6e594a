"""Franka FR3: forward kinematics against Franka's published DH table, and datasheet limits."""

import numpy as np
import pytest

from r2s2r.robots import get_robot
from r2s2r.sim.scene import Scene
from r2s2r.sim.twin import Twin
from tests.kinematics import check_site_against, modified_dh, tcp_offset

# Franka's published modified DH parameters: (a, d, alpha, theta offset), joint 1..7, flange.
FR3_DH = [
    (0.0, 0.333, 0.0, 0.0),
    (0.0, 0.0, -np.pi / 2, 0.0),
    (0.0, 0.316, np.pi / 2, 0.0),
    (0.0825, 0.0, np.pi / 2, 0.0),
    (-0.0825, 0.384, -np.pi / 2, 0.0),
    (0.0, 0.0, np.pi / 2, 0.0),
    (0.088, 0.0, np.pi / 2, 0.0),
    (0.0, 0.107, 0.0, 0.0),  # flange
]
# FR3 datasheet joint limits.
Q_MIN = [-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159]
Q_MAX = [2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159]
DQ_MAX = [2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26]
DDQ_MAX = [10.0] * 7
TAU_MAX = [87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0]


@pytest.fixture(scope="module")
def twin():
    return Twin(Scene(robot="franka_fr3", table=None, robot_cameras=False))


def test_flange_pose_matches_published_dh_at_25_configurations(twin):
    check_site_against(twin, "arm_flange", twin.robot.joint_names, Q_MIN, Q_MAX,
                       lambda q: modified_dh(FR3_DH, q), seed=7)


def test_tcp_is_103_4_mm_beyond_the_flange(twin):
    offset = tcp_offset(twin, "arm_flange", "arm_tcp")
    assert offset == pytest.approx([0.0, 0.0, 0.1034], abs=1e-6)


def test_joint_limits_equal_the_datasheet():
    limits = get_robot("franka_fr3").limits
    assert limits.lower.tolist() == Q_MIN
    assert limits.upper.tolist() == Q_MAX
    assert limits.velocity.tolist() == DQ_MAX
    assert limits.acceleration.tolist() == DDQ_MAX
    assert limits.effort.tolist() == TAU_MAX
    assert get_robot("franka_fr3").gripper("gripper").opening_range == (0.0, 0.08)
