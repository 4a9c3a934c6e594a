"""control_msgs and tf2_msgs built by `r2s2r interfaces build` (make set-up runs it): the type
hashes DDS peers compare, messages through the built type supports, a FollowJointTrajectory goal
between two participants, and the build's cache and ROS-install paths."""

import json
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from r2s2r import ros_interfaces
from r2s2r.waiting import wait_for
from tests.ros_helpers import own_context

PREFIX = Path(sys.prefix)
# What an independent colcon build of control_msgs 5.x (the Jazzy line) gives.
FOLLOW_JOINT_TRAJECTORY_HASH = "RIHS01_738ebcb7a2d7cfa42f9f1001cc99ce3a4383d1cfe508015d9be8485e4b1c66f6"


def test_follow_joint_trajectory_has_the_jazzy_type_hash():
    assert ros_interfaces.type_hash("control_msgs", "action/FollowJointTrajectory") == FOLLOW_JOINT_TRAJECTORY_HASH


@pytest.mark.parametrize("package", ros_interfaces.PACKAGES)
def test_every_compiled_type_hash_is_its_own_definitions(package):
    """The C library's hash of each interface equals the type description generated from that
    interface's own file (share/<package>/<kind>/<name>.json). control_msgs has msg/GripperCommand
    and action/GripperCommand: rosidl_cli pairs descriptions by name alone and gave both one hash."""
    share = PREFIX / "share" / package
    interfaces = ros_interfaces.interface_files(ros_interfaces.definitions(package))
    expected = {"control_msgs": {"action/FollowJointTrajectory.action", "action/GripperCommand.action",
                                 "msg/JointTrajectoryControllerState.msg", "msg/GripperCommand.msg"},
                "tf2_msgs": {"msg/TFMessage.msg", "srv/FrameGraph.srv", "action/LookupTransform.action"}}[package]
    assert expected <= set(interfaces)
    hashes = {}
    for relative in interfaces:
        kind, name = Path(relative).parent.name, Path(relative).stem
        described = json.loads((share / kind / f"{name}.json").read_text())["type_hashes"][0]
        assert described["type_name"] == f"{package}/{kind}/{name}"
        hashes[f"{kind}/{name}"] = ros_interfaces.type_hash(package, f"{kind}/{name}")
        assert hashes[f"{kind}/{name}"] == described["hash_string"], relative
    if package == "control_msgs":
        assert hashes["msg/GripperCommand"] != hashes["action/GripperCommand"]


def test_messages_round_trip_through_the_built_type_supports():
    from builtin_interfaces.msg import Duration
    from control_msgs.action import FollowJointTrajectory, GripperCommand
    from control_msgs.msg import JointTolerance, JointTrajectoryControllerState
    from geometry_msgs.msg import TransformStamped
    from rclpy.serialization import deserialize_message, serialize_message
    from tf2_msgs.msg import TFMessage
    from trajectory_msgs.msg import JointTrajectoryPoint

    goal = FollowJointTrajectory.Goal()
    goal.trajectory.joint_names = ["fr3_joint1", "fr3_joint2"]
    goal.trajectory.points = [JointTrajectoryPoint(positions=[0.1, -0.2], time_from_start=Duration(sec=1))]
    goal.path_tolerance = [JointTolerance(name="fr3_joint1", position=0.05)]
    goal.goal_time_tolerance = Duration(nanosec=500_000_000)
    state = JointTrajectoryControllerState(joint_names=["a"], reference=JointTrajectoryPoint(positions=[1.5]))
    gripper = GripperCommand.Goal()
    gripper.command.position, gripper.command.max_effort = 0.04, 20.0
    frame = TransformStamped(child_frame_id="fr3_link1")
    frame.header.frame_id = "base"
    frame.transform.translation.z = 0.333
    for message in (goal, state, gripper, TFMessage(transforms=[frame]),
                    FollowJointTrajectory.Result(error_code=FollowJointTrajectory.Result.PATH_TOLERANCE_VIOLATED,
                                                 error_string="fr3_joint1 0.08 rad off")):
        assert deserialize_message(serialize_message(message), type(message)) == message
    assert FollowJointTrajectory.Result.INVALID_JOINTS == -2  # control_msgs' constants, as generated


def test_a_follow_joint_trajectory_goal_between_two_participants():
    """An action server and a client, each a DDS participant of its own: goal, feedback, result."""
    import rclpy
    from control_msgs.action import FollowJointTrajectory
    from rclpy.action import ActionClient, ActionServer
    from rclpy.executors import SingleThreadedExecutor
    from trajectory_msgs.msg import JointTrajectoryPoint

    contexts = [own_context(), own_context()]
    server_node = rclpy.create_node("fjt_server", context=contexts[0])
    client_node = rclpy.create_node("fjt_client", context=contexts[1])
    received, feedback, feedback_seen = [], [], threading.Event()

    def execute(handle):
        received.append(list(handle.request.trajectory.joint_names))
        message = FollowJointTrajectory.Feedback(joint_names=handle.request.trajectory.joint_names)
        message.desired = handle.request.trajectory.points[-1]
        # The feedback topic may match after the goal services did (wait_for_server waits on those
        # alone): publish until the client has one.
        deadline = time.monotonic() + 60.0
        while not feedback_seen.is_set() and time.monotonic() < deadline:
            handle.publish_feedback(message)
            feedback_seen.wait(0.05)
        handle.succeed()
        return FollowJointTrajectory.Result(error_code=FollowJointTrajectory.Result.SUCCESSFUL, error_string="done")

    server = ActionServer(server_node, FollowJointTrajectory, "arm_controller/follow_joint_trajectory", execute)
    client = ActionClient(client_node, FollowJointTrajectory, "arm_controller/follow_joint_trajectory")
    executors, threads, stop = [], [], threading.Event()
    for node, context in zip((server_node, client_node), contexts):
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        executors.append(executor)

        def spin(executor=executor):
            while not stop.is_set():
                executor.spin_once(timeout_sec=0.05)
        threads.append(threading.Thread(target=spin, daemon=True))
        threads[-1].start()
    try:
        assert client.wait_for_server(timeout_sec=60.0), "the action server was not discovered in 60 s"
        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = ["fr3_joint1", "fr3_joint2"]
        goal.trajectory.points = [JointTrajectoryPoint(positions=[0.3, -0.4])]
        def on_feedback(message):
            feedback.append(message.feedback)
            feedback_seen.set()
        sent = client.send_goal_async(goal, feedback_callback=on_feedback)
        assert wait_for(sent.done, 60.0)
        assert sent.result().accepted
        result = sent.result().get_result_async()
        assert wait_for(result.done, 60.0)
        assert result.result().result.error_code == FollowJointTrajectory.Result.SUCCESSFUL
        assert received == [["fr3_joint1", "fr3_joint2"]]
        assert feedback and list(feedback[0].desired.positions) == [0.3, -0.4]
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10.0)
        server.destroy()
        client.destroy()
        for executor, node, context in zip(executors, (server_node, client_node), contexts):
            executor.shutdown()
            node.destroy_node()
            context.shutdown()


def test_a_second_build_is_up_to_date_and_a_ros_install_is_used_instead(tmp_path, monkeypatch):
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(PREFIX))  # no ROS install sourced
    lines = []
    outcomes = ros_interfaces.build(PREFIX, log=lines.append)
    assert [o.how for o in outcomes] == ["up to date"] * len(ros_interfaces.PACKAGES)
    ros = tmp_path / "opt" / "ros" / "jazzy"
    (ros / "share" / "control_msgs").mkdir(parents=True)
    (ros / "share" / "control_msgs" / "package.xml").write_text("<package/>")
    monkeypatch.setenv("AMENT_PREFIX_PATH", f"{ros}:{PREFIX}")
    control, tf2 = ros_interfaces.build(PREFIX, log=lines.append)
    assert (control.how, control.where) == ("system", ros)
    assert tf2.how == "up to date"
    assert any(line.startswith("control_msgs: system") for line in map(str, lines))


def test_a_cached_build_installs_into_a_new_prefix_and_changed_definitions_miss_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("AMENT_PREFIX_PATH", "")
    key = ros_interfaces.cache_key("tf2_msgs", ros_interfaces.definitions("tf2_msgs"))
    staged = ros_interfaces.cache_root() / f"tf2_msgs-{key}"  # what a finished build leaves there
    for relative, content in (("lib/libtf2_msgs__rosidl_generator_c.so", "library"),
                              ("python/tf2_msgs/__init__.py", ""), ("share/tf2_msgs/msg/TFMessage.msg", "definition"),
                              ("COMPLETE", "")):
        (staged / relative).parent.mkdir(parents=True, exist_ok=True)
        (staged / relative).write_text(content)
    prefix = tmp_path / "venv"
    lines = []
    (first,) = ros_interfaces.build(prefix, packages=("tf2_msgs",), log=lines.append)
    assert first.how == "from cache"
    assert (prefix / "lib" / "libtf2_msgs__rosidl_generator_c.so").read_text() == "library"
    assert (ros_interfaces._site_packages(prefix) / "tf2_msgs" / "__init__.py").is_file()
    assert (prefix / "share" / "tf2_msgs" / "msg" / "TFMessage.msg").read_text() == "definition"
    (second,) = ros_interfaces.build(prefix, packages=("tf2_msgs",), log=lines.append)
    assert second.how == "up to date"
    # an edited definition is another cache entry (and another type hash)
    shutil.copytree(ros_interfaces.definitions("tf2_msgs"), tmp_path / "share" / "interfaces" / "tf2_msgs")
    with open(tmp_path / "share" / "interfaces" / "tf2_msgs" / "msg" / "TFMessage.msg", "a") as definition:
        definition.write("int32 extra\n")
    monkeypatch.setattr(ros_interfaces, "share_dir", lambda: tmp_path / "share")
    assert ros_interfaces.cache_key("tf2_msgs", ros_interfaces.definitions("tf2_msgs")) != key


def test_unknown_packages_and_missing_definitions_are_named(tmp_path, monkeypatch, capsys):
    from r2s2r.cli import main
    assert main(["interfaces", "build", "moveit_msgs"]) == 2
    assert "unknown package moveit_msgs; expected control_msgs, tf2_msgs" in capsys.readouterr().err
    monkeypatch.setattr(ros_interfaces, "share_dir", lambda: tmp_path)
    with pytest.raises(ros_interfaces.InterfaceBuildError, match="no definitions of tf2_msgs at .*interfaces/tf2_msgs"):
        ros_interfaces.build(PREFIX, packages=("tf2_msgs",), force=True, log=lambda line: None)
