"""Message <-> numpy conversions of the contract round-trip, and malformed messages say why."""

import numpy as np
import pytest
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from r2s2r.contract import CommandError, JointSample, Topics
from r2s2r.contract import convert


def test_joint_state_round_trip():
    sample = JointSample(12.345678901, ("a", "b"), [0.1, -0.2], [1.0, 2.0], [3.0, -4.0])
    back = convert.joint_sample(convert.joint_state_msg(sample))
    assert back.names == ("a", "b")
    assert back.stamp == pytest.approx(12.345678901, abs=1e-9)
    np.testing.assert_array_equal(back.position, sample.position)
    np.testing.assert_array_equal(back.effort, sample.effort)


@pytest.mark.parametrize("encoding,dtype,shape", [("rgb8", np.uint8, (4, 5, 3)), ("bgr8", np.uint8, (4, 5, 3)),
                                                  ("mono8", np.uint8, (4, 5)), ("16UC1", np.uint16, (4, 5)),
                                                  ("32FC1", np.float32, (4, 5))])
def test_image_round_trip(encoding, dtype, shape):
    rng = np.random.default_rng(0)
    image = (rng.random(shape) * 200).astype(dtype)
    msg = convert.image_msg(image, encoding, 1.5, "cam_optical_frame")
    assert msg.step == shape[1] * (shape[2] if len(shape) == 3 else 1) * np.dtype(dtype).itemsize
    np.testing.assert_array_equal(convert.image_array(msg), image)


def test_trajectory_with_inconsistent_point_is_rejected_by_name():
    msg = JointTrajectory(joint_names=["a", "b"])
    msg.points = [JointTrajectoryPoint(positions=[0.0, 1.0]), JointTrajectoryPoint(positions=[0.5])]
    with pytest.raises(CommandError, match="point 1 has 1 positions, expected 2"):
        convert.trajectory_arrays(msg)
    with pytest.raises(CommandError, match="no points"):
        convert.trajectory_arrays(JointTrajectory(joint_names=["a"]))


def test_trajectory_arrays_keep_velocities_only_when_every_point_has_them():
    msg = convert.trajectory_msg(["a"], [1.0, 2.0], [[0.1], [0.2]], velocities=[[0.0], [0.0]])
    names, stamp, times, pos, vel, acc = convert.trajectory_arrays(msg)
    assert names == ("a",) and stamp == 0.0
    np.testing.assert_allclose(times, [1.0, 2.0])
    assert vel.shape == (2, 1) and acc is None


def test_topic_names_follow_ros2_control_conventions():
    assert Topics.joint_trajectory("arm") == "arm_controller/joint_trajectory"
    assert Topics.position_commands("left_arm") == "left_arm_position_controller/commands"
    assert Topics.streaming_commands("left_arm") == "left_arm_streaming_controller/commands"
    assert Topics.follow_joint_trajectory("left_arm") == "left_arm_controller/follow_joint_trajectory"
    assert Topics.gripper_action("left_gripper") == "left_gripper_controller/gripper_cmd"
    assert Topics.gripper_commands("gripper") == "gripper_controller/commands"
    assert Topics.camera_info("scene") == "cameras/scene/camera_info"
