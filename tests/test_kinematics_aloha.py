"""ALOHA: forward kinematics of both ViperX 300 6-DoF flanges against Interbotix's published joint
origins and the ALOHA 2 cell's mounting, evaluated with numpy; joint limits against the
published values."""

from math import pi, radians

import mujoco
import numpy as np
import pytest

from r2s2r.robots import get_robot
from r2s2r.sim.scene import Scene
from r2s2r.sim.twin import Twin
from tests.kinematics import check_site_against, joint_origin_chain, tcp_offset

X, Y, Z = (1, 0, 0), (0, 1, 0), (0, 0, 1)
# Base links on the table frame (MuJoCo Menagerie's ALOHA 2 cell): facing each other along x.
MOUNTS = {"left": ((-0.469, -0.019, 0.02), (0, 0, 0), None), "right": ((0.469, -0.019, 0.02), (0, 0, pi), None)}
# Interbotix vx300s joint origins (xyz, rpy) and axes: waist .. wrist_rotate, then ee_arm (the flange).
ARM_CHAIN = [
    ((0, 0, 0.079), (0, 0, 0), Z),
    ((0, 0, 0.04805), (0, 0, 0), Y),
    ((0.05955, 0, 0.3), (0, 0, 0), Y),
    ((0.2, 0, 0), (0, 0, 0), X),
    ((0.1, 0, 0), (0, 0, 0), Y),
    ((0.069744, 0, 0), (0, 0, 0), X),
    ((0.042825, 0, 0), (0, 0, 0), None),
]
FULL_TURN = pi - 0.00001
# Interbotix aloha_vx300s limits: lower, upper, velocity (rad/s), effort (N m).
LIMITS = [
    (-FULL_TURN, FULL_TURN, pi, 10),
    (radians(-106), radians(72), pi, 20),
    (radians(-101), radians(92), pi, 15),
    (-FULL_TURN, FULL_TURN, pi, 2),
    (radians(-107), radians(128), pi, 5),
    (-FULL_TURN, FULL_TURN, pi, 1),
]


@pytest.fixture(scope="module")
def twin():
    return Twin(Scene(robot="aloha", table=None, robot_cameras=False))


@pytest.mark.parametrize("side", ["left", "right"])
def test_flange_pose_matches_published_joint_origins_at_25_configurations(twin, side):
    chain = [MOUNTS[side]] + ARM_CHAIN
    joints = twin.robot.group(f"{side}_arm").joints
    check_site_against(twin, f"{side}_arm_flange", joints, [r[0] for r in LIMITS], [r[1] for r in LIMITS],
                       lambda q: joint_origin_chain(chain, q), seed=5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_tcp_is_interbotix_ee_gripper_64_mm_beyond_the_flange(twin, side):
    offset = tcp_offset(twin, f"{side}_arm_flange", f"{side}_arm_tcp")
    assert offset == pytest.approx([0.025875 + 0.0385, 0.0, 0.0], abs=1e-6)


def test_arms_face_each_other_938_mm_apart(twin):
    mujoco.mj_kinematics(twin.model, twin.data)
    left, right = twin.data.body("left_base_link"), twin.data.body("right_base_link")
    assert np.linalg.norm(right.xpos - left.xpos) == pytest.approx(0.938, abs=1e-9)
    # Each arm's forward axis points at the other arm.
    assert left.xmat.reshape(3, 3)[:, 0] == pytest.approx([1, 0, 0], abs=1e-9)
    assert right.xmat.reshape(3, 3)[:, 0] == pytest.approx([-1, 0, 0], abs=1e-9)


def test_joint_limits_equal_the_published_values():
    robot = get_robot("aloha")
    rows = LIMITS * 2
    limits = robot.limits
    assert limits.lower.tolist() == pytest.approx([r[0] for r in rows], abs=1e-9)
    assert limits.upper.tolist() == pytest.approx([r[1] for r in rows], abs=1e-9)
    assert limits.velocity.tolist() == pytest.approx([r[2] for r in rows], abs=1e-9)
    assert limits.effort.tolist() == [r[3] for r in rows]
    for side in ("left", "right"):
        gripper = robot.gripper(f"{side}_gripper")
        assert gripper.joints == (f"{side}_left_finger", f"{side}_right_finger")
        assert gripper.opening_range == (0.004, 0.074)
        for finger in gripper.joints:
            assert (robot.urdf_joints[finger]["lower"], robot.urdf_joints[finger]["upper"]) == (0.0, 0.041)


def test_joint_names_are_interbotix_names_prefixed_by_side():
    names = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")
    robot = get_robot("aloha")
    assert robot.joint_names == tuple(f"left_{n}" for n in names) + tuple(f"right_{n}" for n in names)
