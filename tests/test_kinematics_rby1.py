"""RB-Y1: forward kinematics of both arm flanges against Rainbow's published joint origins
(rby1-sdk, models/rby1a), evaluated with numpy; joint limits against the published values."""

import pytest

from r2s2r.robots import get_robot
from r2s2r.sim.scene import Scene
from r2s2r.sim.twin import Twin
from tests.kinematics import check_site_against, joint_origin_chain, tcp_offset

X, Y, Z = (1, 0, 0), (0, 1, 0), (0, 0, 1)
ROLL = 0.349065850  # the shoulders' built-in roll, rad

# Joint origins (xyz, rpy) and axes: base -> torso_0 .. torso_5
TORSO_CHAIN = [
    ((0, 0, 0.2805), (0, 0, 0), X),
    ((0, 0, 0), (0, 0, 0), Y),
    ((0, 0, 0.350), (0, 0, 0), Y),
    ((0, 0, 0.350), (0, 0, 0), Y),
    ((0, 0, 0), (0, 0, 0), X),
    ((0, 0, 0.309426548461), (0, 0, 0), Z),
]


def arm_chain(sign):
    """torso_5 -> <side>_arm_0 .. 6 -> tool flange; sign -1 for the right arm, +1 for the left."""
    return [
        ((0, sign * 0.220, 0.080073451539), (sign * ROLL, 0, 0), Y),
        ((0, 0, 0), (-sign * ROLL, 0, 0), X),
        ((0, 0, 0), (0, 0, 0), Z),
        ((0.031, 0, -0.276), (0, 0, 0), Y),
        ((-0.031, 0, -0.256), (0, 0, 0), Z),
        ((0, 0, 0), (0, 0, 0), Y),
        ((0, 0, 0), (0, 0, 0), Z),
        ((0, 0, -0.1087), (0, 0, 0), None),  # tool_<side>: the flange (FT sensor mount)
    ]


PI = 3.141592654
DEG1 = 0.017453293
# Rainbow's model A limits: lower, upper, velocity (rad/s), effort (N m), acceleration (rad/s^2);
# the torso's efforts are its drives' torque at their current limit (697 / 232 N m, where Rainbow's
# model says 270 / 120: urdf/rby1.urdf gives the published figures they come from).
TORSO_LIMITS = [
    (-0.261799388, 0.261799388, 2.09439510, 697, 5),
    (-0.523598776, 1.570796327, 2.09439510, 697, 5),
    (-2.617993878, 1.570796327, 2.09439510, 697, 5),
    (-0.785398163, 1.570796327, 3.141592654, 232, 5),
    (-0.523598776, 0.523598776, 3.141592654, 232, 5),
    (-2.35619449, 2.35619449, 3.141592654, 232, 5),
]


def arm_limits(side):
    shoulder = (-PI, DEG1) if side == "right" else (-DEG1, PI)
    return [(-PI, PI, PI, 70, 10), (*shoulder, PI, 70, 10), (-PI, PI, PI, 70, 10),
            (-2.617993878, DEG1, PI, 40, 10), (-PI, PI, 6.283185308, 10, 10),
            (-1.570796327, 1.919862177, 6.283185308, 10, 10), (-2.705260340, 2.705260340, 2.094395102, 8, 10)]


HEAD_LIMITS = [(-0.523, 0.523, 3.14, 1000, 10), (-0.35, 1.57, 3.14, 1000, 10)]


@pytest.fixture(scope="module")
def twin():
    return Twin(Scene(robot="rby1", table=None, robot_cameras=False))


@pytest.mark.parametrize("side,sign", [("right", -1), ("left", 1)])
def test_flange_pose_matches_published_joint_origins_at_25_configurations(twin, side, sign):
    robot = twin.robot
    chain = TORSO_CHAIN + arm_chain(sign)
    joints = robot.group("torso").joints + robot.group(f"{side}_arm").joints
    limits = TORSO_LIMITS + arm_limits(side)
    low = [row[0] for row in limits]
    high = [row[1] for row in limits]
    check_site_against(twin, f"{side}_arm_flange", joints, low, high,
                       lambda q: joint_origin_chain(chain, q), seed=11)


@pytest.mark.parametrize("side", ["right", "left"])
def test_tcp_is_between_the_pads_149_mm_below_the_flange(twin, side):
    offset = tcp_offset(twin, f"{side}_arm_flange", f"{side}_arm_tcp")
    # FT sensor 46.1 mm, then the pads' centre 103 mm below the end-effector frame.
    assert offset == pytest.approx([0.0, 0.0, -0.1491], abs=1e-6)


def test_joint_limits_equal_the_published_values():
    robot = get_robot("rby1")
    rows = TORSO_LIMITS + arm_limits("right") + arm_limits("left") + HEAD_LIMITS
    limits = robot.limits
    assert limits.lower.tolist() == pytest.approx([r[0] for r in rows], abs=1e-9)
    assert limits.upper.tolist() == pytest.approx([r[1] for r in rows], abs=1e-9)
    assert limits.velocity.tolist() == pytest.approx([r[2] for r in rows], abs=1e-9)
    assert limits.effort.tolist() == [r[3] for r in rows]
    assert limits.acceleration.tolist() == [r[4] for r in rows]
    for side in ("right", "left"):
        assert robot.gripper(f"{side}_gripper").opening_range == (0.0, 0.1)


def test_joint_names_follow_rainbows_sdk():
    robot = get_robot("rby1")
    assert robot.joint_names == tuple(
        [f"torso_{i}" for i in range(6)] + [f"right_arm_{i}" for i in range(7)]
        + [f"left_arm_{i}" for i in range(7)] + ["head_0", "head_1"])
    assert robot.gripper_joint_names == ("gripper_finger_r1", "gripper_finger_r2",
                                         "gripper_finger_l1", "gripper_finger_l2")
