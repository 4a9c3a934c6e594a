"""Flexiv Rizon 4: forward kinematics against Flexiv's published joint origins (the current wrist,
and the pre-2024 one of flexiv_rizon4_pre2024), and datasheet limits."""

import mujoco
import numpy as np
import pytest

from r2s2r.robots import get_robot
from r2s2r.sim.scene import Scene
from r2s2r.sim.twin import Twin
from tests.kinematics import check_limits_against_datasheet, check_site_against, joint_origin_chain, tcp_offset

Z, Y = (0.0, 0.0, 1.0), (0.0, 1.0, 0.0)
# Flexiv's Rizon 4 joint origins (flexiv_description since 2024-03-29, flexiv_rdk's kinematics):
# (xyz, rpy, axis), joint 1..7, then the flange.
RIZON4_ORIGINS = [
    ((0.0, 0.0, 0.155), (0.0, 0.0, np.pi), Z),
    ((0.0, 0.03, 0.21), (0.0, 0.0, 0.0), Y),
    ((0.0, 0.035, 0.205), (0.0, 0.0, 0.0), Z),
    ((-0.02, -0.03, 0.19), (0.0, 0.0, -np.pi), Y),
    ((-0.02, 0.025, 0.195), (0.0, 0.0, -np.pi), Z),
    ((0.0, 0.03, 0.19), (0.0, 0.0, 0.0), Y),
    ((-0.015, 0.073, 0.11), (0.0, -np.pi / 2, 0.0), Z),
    ((0.0, 0.0, 0.081), (0.0, 0.0, -np.pi), None),  # flange
]
# The wrist before: joint 7 at (-0.055, 0.07, 0.11) in link 6.
PRE_2024_ORIGINS = RIZON4_ORIGINS[:6] + [((-0.055, 0.07, 0.11), (0.0, -np.pi / 2, 0.0), Z)] + RIZON4_ORIGINS[7:]
# Rizon 4 datasheet (degrees, degrees per second, N m).
Q_MIN = np.radians([-160, -130, -170, -107, -170, -80, -170])
Q_MAX = np.radians([160, 130, 170, 154, 170, 260, 170])
DQ_MAX = np.radians([120, 120, 140, 140, 280, 280, 280])
DDQ_MAX = [3.0] * 7
TAU_MAX = [123.0, 123.0, 64.0, 64.0, 39.0, 39.0, 39.0]


@pytest.fixture(scope="module")
def twin():
    return Twin(Scene(robot="flexiv_rizon4", table=None, robot_cameras=False))


@pytest.mark.parametrize("name, origins", [("flexiv_rizon4", RIZON4_ORIGINS),
                                           ("flexiv_rizon4_pre2024", PRE_2024_ORIGINS)])
def test_flange_pose_matches_published_joint_origins_at_25_configurations(name, origins):
    twin = Twin(Scene(robot=name, table=None, robot_cameras=False))
    check_site_against(twin, "arm_flange", twin.robot.joint_names, Q_MIN, Q_MAX,
                       lambda q: joint_origin_chain(origins, q), seed=13)


def test_the_two_wrists_put_the_flange_40_mm_apart_and_link_6_as_flexiv_weighs_it():
    """The registry keeps both wrists; they differ only in joint 7's origin and link 6's mass."""
    current, older = (Twin(Scene(robot=n, table=None, robot_cameras=False))
                      for n in ("flexiv_rizon4", "flexiv_rizon4_pre2024"))
    for twin in (current, older):
        adr = [twin.model.joint(j).qposadr[0] for j in twin.robot.joint_names]
        twin.data.qpos[adr] = twin.robot.home_positions
        mujoco.mj_kinematics(twin.model, twin.data)
    gap = np.linalg.norm(current.data.site("arm_flange").xpos - older.data.site("arm_flange").xpos)
    assert gap == pytest.approx(0.04, abs=1e-3)
    assert current.model.body("link6").mass[0] == pytest.approx(2.2)
    assert older.model.body("link6").mass[0] == pytest.approx(2.1)
    assert current.model.body("link6").ipos == pytest.approx([0.02, 0.06, 0.07])


def test_home_pose_points_the_flange_down(twin):
    robot = twin.robot
    adr = [twin.model.joint(j).qposadr[0] for j in robot.joint_names]
    twin.data.qpos[adr] = robot.home_positions
    mujoco.mj_kinematics(twin.model, twin.data)
    site = twin.data.site("arm_flange")
    assert site.xmat.reshape(3, 3)[:, 2] == pytest.approx([0.0, 0.0, -1.0], abs=1e-5)
    assert site.xpos == pytest.approx([0.687, -0.113, 0.3266], abs=1e-3)


def test_tcp_is_145_mm_beyond_the_flange(twin):
    offset = tcp_offset(twin, "arm_flange", "arm_tcp")
    assert offset == pytest.approx([0.0, 0.0, 0.145], abs=1e-6)


def test_joint_limits_equal_the_datasheet():
    robot = get_robot("flexiv_rizon4")
    assert robot.joint_names == tuple(f"joint{i}" for i in range(1, 8))  # flexiv_ros2's names
    check_limits_against_datasheet(robot, Q_MIN, Q_MAX, DQ_MAX, DDQ_MAX, TAU_MAX)
    assert robot.gripper("gripper").opening_range == (0.0, 0.085)
