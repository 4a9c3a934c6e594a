"""Topic and service names of the identical interface (ros2_control conventions).

Every topic string in r2s2r is written here once. Names are relative so a namespace keeps two
robots apart; `~/` names are private to the node that serves them.
"""

from __future__ import annotations

import re

CAMERA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")  # one token of a topic name (use fullmatch)
CAMERA_NAME_EXPECTED = "letters, digits and underscores, starting with a letter (a topic name)"


class Topics:
    JOINT_STATES = "joint_states"
    DIAGNOSTICS = "diagnostics"
    ESTOP = "estop"
    CLOCK = "/clock"  # ROS time is global, whatever the namespace
    TF = "/tf"  # tf2's topics are global, whatever a node's namespace
    TF_STATIC = "/tf_static"
    ROBOT_DESCRIPTION = "robot_description"  # the URDF, latched, as robot_state_publisher offers it
    OBJECT_POSES = "twin/object_poses"
    OBJECT_SIZES = "twin/object_sizes"  # std_msgs/String, JSON: object name -> bounding-box extents (m)
    CONTACTS = "twin/contacts"

    @staticmethod
    def joint_trajectory(group: str) -> str:
        """joint_trajectory_controller's input for one joint group."""
        return f"{group}_controller/joint_trajectory"

    @staticmethod
    def follow_joint_trajectory(group: str) -> str:
        """joint_trajectory_controller's action for one joint group (control_msgs FollowJointTrajectory)."""
        return f"{group}_controller/follow_joint_trajectory"

    @staticmethod
    def controller_state(group: str) -> str:
        """joint_trajectory_controller's state (control_msgs JointTrajectoryControllerState)."""
        return f"{group}_controller/controller_state"

    @staticmethod
    def gripper_action(gripper: str) -> str:
        """gripper_action_controller's action (control_msgs GripperCommand)."""
        return f"{gripper}_controller/gripper_cmd"

    @staticmethod
    def position_commands(group: str) -> str:
        """forward_command_controller (position) input for one joint group: each command is held
        until the next, as ros2_control's controller holds it."""
        return f"{group}_position_controller/commands"

    @staticmethod
    def streaming_commands(group: str) -> str:
        """Streaming targets for one joint group (what policies publish): a target older than the
        driver's watchdog_s is braked to a stop, so a client that falls silent stops the arm."""
        return f"{group}_streaming_controller/commands"

    @staticmethod
    def gripper_commands(gripper: str) -> str:
        """Gripper opening in metres, one value."""
        return f"{gripper}_controller/commands"

    @staticmethod
    def camera_image(camera: str) -> str:
        return f"cameras/{camera}/image_raw"

    @staticmethod
    def camera_info(camera: str) -> str:
        return f"cameras/{camera}/camera_info"

    @staticmethod
    def camera_depth(camera: str) -> str:
        return f"cameras/{camera}/depth/image_raw"


class Services:
    RESET = "~/reset"
    HOME = "~/home"
    ENABLE = "~/enable"
