"""Recording: `r2s2r record` over DDS against the Franka twin, the bag it writes read back by
r2s2r and by mcap-ros2-support's own decoder, and bad bags refused with errors that name what
is wrong."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from r2s2r.data.episode import EpisodeError, EpisodeWriter, load_episode
from r2s2r.robots import get_robot
from r2s2r.data.mcap_io import topics
from tests.ros_helpers import REPO
from tests.test_foxglove_layout import layout_topics

FR3 = get_robot("franka_fr3")


def test_record_over_dds_writes_a_bag_of_states_commands_and_cameras(stack_process, ros_client, tmp_path):
    stack = stack_process("config/stacks/franka_fr3_sim.yaml")
    client = ros_client(cameras=("scene",))
    client.wait_for_joint_states(60)
    out = tmp_path / "episode.mcap"
    env_path = f"{REPO / 'src'}"
    recorder = subprocess.Popen([sys.executable, "-m", "r2s2r.cli", "record", "--stack", "config/stacks/franka_fr3_sim.yaml",
                                 "--out", str(out), "--cameras", "scene", "--duration", "6"], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": env_path}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(recorder.stdout), daemon=True)
    reader.start()
    try:
        from std_msgs.msg import Float64MultiArray
        arm = client._publisher(Float64MultiArray, "arm_position_controller/commands")
        grip = client._publisher(Float64MultiArray, "gripper_controller/commands")
        # The driver and the recorder both listen, and the recorder has the arm at rest, before anything
        # is sent (on a loaded machine discovery of one topic can trail another's by seconds).
        assert client.wait_for(lambda: arm.get_subscription_count() >= 2 and grip.get_subscription_count() >= 2
                               and any("first message on joint_states" in line for line in lines), 60), "".join(lines)
        # The driver has matched this publisher too (its side of discovery can trail ours by a second
        # on a loaded machine, and a command sent before that never reaches it): hold where the arm
        # is until the driver counts a command accepted.
        here = client.positions(FR3.joint_names)

        def driver_listens():
            client.send_positions("arm", here)
            return int(client.diagnostic_values().get("commands_accepted", 0)) >= 1
        assert client.wait_for(driver_listens, 60, poll=0.05), client.diagnostic_values()
        target = FR3.home_positions + 0.05
        for _ in range(20):
            client.send_positions("arm", target)
            time.sleep(0.05)
        client.send_gripper("gripper", 0.03)
        recorder.wait(timeout=60)
        reader.join(timeout=5)
    finally:
        if recorder.poll() is None:
            recorder.kill()
    output = "".join(lines)
    assert recorder.returncode == 0, output
    assert "closed the bag" in output
    episode = load_episode(out)
    assert episode.robot.name == "franka_fr3"
    assert episode.joints.names == FR3.joint_names + FR3.gripper_joint_names
    assert len(episode.joints.times) > 100  # 250 Hz for a few seconds
    sent = [c for c in episode.commands if c.kind == "positions" and np.allclose(c.values, target)]
    assert len(sent) >= 15 and np.allclose(sent[-1].values, target)
    assert any(c.kind == "gripper" and c.values[0] == pytest.approx(0.03) for c in episode.commands)
    cam = episode.calibrated_camera("scene")
    assert cam.rgb and cam.rgb[0].shape == (cam.calibration.height, cam.calibration.width, 3)
    assert episode.diagnostics
    # A viewer shows the robot from the bag alone: its description and transforms are in it, and
    # every topic of the shipped Foxglove layout.
    recorded = topics(out)
    assert {"/tf", "/tf_static", "/robot_description"} <= set(recorded)
    assert layout_topics() <= set(recorded)
    # Commands land on the states' clock: the arm moves within a second of the first command.
    # The recorder stamps each message as it arrives, and nothing orders a command's arrival
    # against the states of another process: on a loaded machine the first command reached the
    # recorder 49 ms (one command period) after the states that showed it taking effect. Five
    # periods of slack still fail any clock other than the states' (wall time is years off).
    j = episode.joints
    moved = j.times[np.argmax(np.abs(j.position[:, 0] - j.position[0, 0]) > 0.01)]
    assert sent[0].time - 0.25 < moved < sent[0].time + 1.0
    # The bag decodes without rclpy too, through mcap-ros2-support (as Foxglove and rosbags read it).
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory
    with open(out, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        schemas = {}
        for schema, _channel, _message, decoded in reader.iter_decoded_messages(topics=["/joint_states"]):
            schemas[schema.name] = decoded
            break
    assert list(schemas) == ["sensor_msgs/msg/JointState"]
    assert list(schemas["sensor_msgs/msg/JointState"].name) == list(episode.joints.names)
    assert stack.proc.poll() is None


def _sample(t):
    from r2s2r.contract.types import JointSample
    n = len(FR3.joint_names + FR3.gripper_joint_names)
    return JointSample(t, FR3.joint_names + FR3.gripper_joint_names, np.zeros(n), np.zeros(n), np.zeros(n))


def test_a_truncated_bag_is_refused_naming_the_cut(tmp_path):
    path = tmp_path / "cut.mcap"
    with EpisodeWriter(path, "franka_fr3") as bag:
        for i in range(50):
            bag.joint_sample(_sample(i * 0.004), 100 + i * 0.004)
            bag.positions("arm", FR3.home_positions, 100 + i * 0.004)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(EpisodeError, match="not a complete MCAP bag"):
        load_episode(path)


def test_missing_topics_are_named(tmp_path):
    path = tmp_path / "states_only.mcap"
    with EpisodeWriter(path, "franka_fr3") as bag:
        for i in range(10):
            bag.joint_sample(_sample(i * 0.004), i * 0.004)
    with pytest.raises(EpisodeError, match=r"no command messages.*/arm_position_controller/commands"):
        load_episode(path)
    empty = tmp_path / "no_states.mcap"
    with EpisodeWriter(empty, "franka_fr3") as bag:
        bag.positions("arm", FR3.home_positions, 0.0)
    with pytest.raises(EpisodeError, match="no messages on /joint_states"):
        load_episode(empty)


def test_images_without_camera_info_are_named(tmp_path):
    path = tmp_path / "no_info.mcap"
    with EpisodeWriter(path, "franka_fr3") as bag:
        for i in range(5):
            bag.joint_sample(_sample(i * 0.004), i * 0.004)
            bag.positions("arm", FR3.home_positions, i * 0.004)
        bag.image("scene", np.zeros((24, 32, 3), np.uint8), 0.0, 0.0)
    episode = load_episode(path)
    with pytest.raises(EpisodeError, match=r"/cameras/scene/camera_info has no message on it"):
        episode.calibrated_camera("scene")
