"""MCAP ROS 2 bags: real message types round-trip, and an independent decoder (mcap_ros2's,
which parses the stored message definitions itself, as Foxglove and rosbags do) reads them."""

import numpy as np
import pytest
from geometry_msgs.msg import PoseArray
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray

from r2s2r.contract import convert
from r2s2r.contract.types import JointSample
from r2s2r.data.mcap_io import BagError, BagWriter, message_definition, read_bag, topics

NAMES = ("j1", "j2", "j3")


def joint_state(t: float) -> JointState:
    sample = JointSample(t, NAMES, np.array([0.1, -0.2, 0.3]) * t, np.array([1.0, 2.0, 3.0]), np.zeros(3))
    return convert.joint_state_msg(sample)


@pytest.fixture
def bag(tmp_path):
    path = tmp_path / "episode.mcap"
    image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    with BagWriter(path) as writer:
        for k in range(3):
            t = 0.5 * k
            writer.write("/joint_states", joint_state(t))  # stamped from its header
            writer.write("/arm_position_controller/commands", convert.float_array_msg([t, 2 * t], "arm"), t)
        writer.write("/cameras/scene/image_raw", convert.image_msg(image, "rgb8", 0.25, "scene_optical"))
        writer.write("/twin/object_poses", convert.pose_array_msg([(np.array([0.4, 0.1, 0.02]),
                                                                    np.array([1.0, 0.0, 0.0, 0.0]))], 0.25, "world"))
        assert writer.count == 8
    return path, image


def test_messages_round_trip_as_their_ros_types(bag):
    path, image = bag
    assert topics(path) == {"/joint_states": "sensor_msgs/msg/JointState",
                            "/arm_position_controller/commands": "std_msgs/msg/Float64MultiArray",
                            "/cameras/scene/image_raw": "sensor_msgs/msg/Image",
                            "/twin/object_poses": "geometry_msgs/msg/PoseArray"}
    messages = list(read_bag(path))
    assert [m.stamp for m in messages] == sorted(m.stamp for m in messages)  # log-time order
    states = [m for m in messages if m.topic == "/joint_states"]
    assert [m.stamp for m in states] == [0.0, 0.5, 1.0]
    assert isinstance(states[2].msg, JointState) and tuple(states[2].msg.name) == NAMES
    np.testing.assert_array_equal(states[2].msg.position, [0.1, -0.2, 0.3])
    (picture,) = read_bag(path, ["/cameras/scene/image_raw"])
    assert isinstance(picture.msg, Image) and picture.msg.encoding == "rgb8"
    np.testing.assert_array_equal(convert.image_array(picture.msg), image)
    commands = [m.msg for m in read_bag(path, ["/arm_position_controller/commands"])]
    assert all(isinstance(c, Float64MultiArray) for c in commands) and list(commands[1].data) == [0.5, 1.0]
    (poses,) = read_bag(path, ["/twin/object_poses"])
    assert isinstance(poses.msg, PoseArray) and poses.msg.poses[0].position.x == 0.4


def test_an_independent_ros2_decoder_reads_the_bag_from_its_stored_definitions(bag):
    path, image = bag
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        assert reader.get_header().profile == "ros2"
        decoded = {}
        for schema, channel, _message, msg in reader.iter_decoded_messages():
            assert schema.encoding == "ros2msg" and channel.message_encoding == "cdr"
            decoded.setdefault(channel.topic, []).append(msg)
    state = decoded["/joint_states"][1]
    assert list(state.name) == list(NAMES) and list(state.position) == pytest.approx([0.05, -0.1, 0.15])
    assert state.header.stamp.sec == 0 and state.header.stamp.nanosec == 500_000_000
    picture = decoded["/cameras/scene/image_raw"][0]
    assert (picture.height, picture.width, picture.step) == (4, 6, 18) and bytes(picture.data) == image.tobytes()
    assert decoded["/twin/object_poses"][0].poses[0].orientation.w == 1.0


def test_definitions_carry_every_nested_type_once():
    text = message_definition("sensor_msgs/msg/Image")
    assert "uint32 height" in text and "uint8[] data" in text
    assert text.count("MSG: std_msgs/Header") == 1 and text.count("MSG: builtin_interfaces/Time") == 1
    pose_array = message_definition("geometry_msgs/msg/PoseArray")
    for nested in ("geometry_msgs/Pose", "geometry_msgs/Point", "geometry_msgs/Quaternion", "std_msgs/Header"):
        assert f"MSG: {nested}\n" in pose_array


def test_bad_use_says_what_was_expected(tmp_path):
    with BagWriter(tmp_path / "a.mcap") as writer:
        with pytest.raises(BagError, match="expected an absolute topic name"):
            writer.write("joint_states", joint_state(0.0))
        writer.write("/x", joint_state(0.0))
        with pytest.raises(BagError, match="topic /x carries sensor_msgs/msg/JointState; got a std_msgs"):
            writer.write("/x", convert.float_array_msg([1.0]))
        with pytest.raises(BagError, match="is not a ROS 2 message class"):
            writer.write("/y", {"data": 1})
    with pytest.raises(BagError, match="no such bag"):
        list(read_bag(tmp_path / "missing.mcap"))
    with pytest.raises(BagError, match="no definition of nonexistent_msgs/msg/Thing"):
        message_definition("nonexistent_msgs/msg/Thing")
