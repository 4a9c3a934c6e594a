"""The driver's whole interface for a robot's groups and grippers, as names and ROS type
strings: what every backend offers (and the twin adds its privileged topics and cameras).
Used by the conformance tests and by tools that check a live graph. No ROS import here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from r2s2r.contract.names import Services, Topics


@dataclass(frozen=True)
class Interface:
    publishers: dict[str, str]  # relative topic name -> type, e.g. "sensor_msgs/msg/JointState"
    subscriptions: dict[str, str]
    services: dict[str, str] = field(default_factory=dict)  # "~/reset" -> "std_srvs/srv/Trigger"
    actions: dict[str, str] = field(default_factory=dict)  # relative action name -> type


def driver_interface(groups: Sequence[str], grippers: Sequence[str], simulated: bool,
                     cameras: Sequence[str] = ()) -> Interface:
    publishers = {Topics.JOINT_STATES: "sensor_msgs/msg/JointState",
                  Topics.DIAGNOSTICS: "diagnostic_msgs/msg/DiagnosticArray",
                  Topics.TF: "tf2_msgs/msg/TFMessage", Topics.TF_STATIC: "tf2_msgs/msg/TFMessage",
                  Topics.ROBOT_DESCRIPTION: "std_msgs/msg/String"}
    if simulated:  # the twin's own: time, privileged state, rendered cameras
        publishers[Topics.CLOCK] = "rosgraph_msgs/msg/Clock"
        publishers[Topics.OBJECT_POSES] = "geometry_msgs/msg/PoseArray"
        publishers[Topics.OBJECT_SIZES] = "std_msgs/msg/String"
        for cam in cameras:
            publishers[Topics.camera_image(cam)] = "sensor_msgs/msg/Image"
            publishers[Topics.camera_info(cam)] = "sensor_msgs/msg/CameraInfo"
    subscriptions = {Topics.ESTOP: "std_msgs/msg/Bool"}
    actions = {}
    for group in groups:
        subscriptions[Topics.position_commands(group)] = "std_msgs/msg/Float64MultiArray"
        subscriptions[Topics.streaming_commands(group)] = "std_msgs/msg/Float64MultiArray"
        subscriptions[Topics.joint_trajectory(group)] = "trajectory_msgs/msg/JointTrajectory"
        publishers[Topics.controller_state(group)] = "control_msgs/msg/JointTrajectoryControllerState"
        actions[Topics.follow_joint_trajectory(group)] = "control_msgs/action/FollowJointTrajectory"
    for gripper in grippers:
        subscriptions[Topics.gripper_commands(gripper)] = "std_msgs/msg/Float64MultiArray"
        actions[Topics.gripper_action(gripper)] = "control_msgs/action/GripperCommand"
    services = {Services.RESET: "std_srvs/srv/Trigger", Services.HOME: "std_srvs/srv/Trigger",
                Services.ENABLE: "std_srvs/srv/SetBool"}
    return Interface(publishers, subscriptions, services, actions)


SIM_ONLY_PREFIXES = ("/clock", "twin/", "cameras/")
