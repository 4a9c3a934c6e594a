"""MoveIt 2's move_group on an r2s2r robot, on a full ROS 2 Jazzy install with ros-jazzy-moveit:

    ros2 launch r2s2r moveit.launch.py robot:=franka_fr3 backend:=sim
    ros2 launch r2s2r moveit.launch.py robot:=xarm7 backend:=xarm rviz:=true

It brings the robot's stack up (bringup.launch.py), writes the robot's MoveIt configuration
(`r2s2r robots moveit`) into a folder of its own, and starts robot_state_publisher and move_group
on it; MoveIt then executes its plans through driver_node's follow_joint_trajectory and
gripper_cmd actions. docs/moveit.md says what was verified and what was not.
"""

import os
import tempfile

import yaml
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.conditions import IfCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from r2s2r.robots import get_robot
from r2s2r.sim import moveit


def _moveit(context):
    robot = get_robot(LaunchConfiguration("robot").perform(context))
    out = LaunchConfiguration("config_dir").perform(context) or tempfile.mkdtemp(prefix=f"r2s2r_moveit_{robot.name}_")
    moveit.write(robot, out)

    def read(name):
        with open(os.path.join(out, name)) as f:
            return f.read()

    def load(name):
        return yaml.safe_load(read(name))

    description = {"robot_description": read(f"{robot.name}.urdf")}
    semantic = {"robot_description_semantic": read(f"{robot.name}.srdf")}
    sim_time = {"use_sim_time": LaunchConfiguration("backend").perform(context) == "sim"}
    move_group = {
        **description, **semantic, **sim_time,
        "robot_description_kinematics": load("kinematics.yaml"),
        "robot_description_planning": load("joint_limits.yaml"),
        "planning_pipelines": ["ompl"],
        "default_planning_pipeline": "ompl",
        "ompl": load("ompl_planning.yaml"),
        **load("moveit_controllers.yaml"),
        "trajectory_execution.allowed_execution_duration_scaling": 1.2,
        "trajectory_execution.allowed_goal_duration_margin": 0.5,
        "publish_robot_description_semantic": True,
    }
    nodes = [
        Node(package="robot_state_publisher", executable="robot_state_publisher", output="screen",
             parameters=[description, sim_time]),
        Node(package="moveit_ros_move_group", executable="move_group", output="screen", parameters=[move_group]),
        Node(package="rviz2", executable="rviz2", output="screen", condition=IfCondition(LaunchConfiguration("rviz")),
             arguments=["-d", os.path.join(get_package_share_directory("r2s2r"), "config", "rviz", "r2s2r.rviz")],
             parameters=[description, semantic, sim_time]),
    ]
    return nodes


def generate_launch_description():
    bringup = os.path.join(get_package_share_directory("r2s2r"), "launch", "bringup.launch.py")
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="franka_fr3", description="the robot's registry name"),
        DeclareLaunchArgument("backend", default_value="sim", description="sim or a vendor backend"),
        DeclareLaunchArgument("config_dir", default_value="",
                              description="where to write the MoveIt configuration (default: a new temporary folder)"),
        DeclareLaunchArgument("rviz", default_value="false", description="start RViz too"),
        IncludeLaunchDescription(PythonLaunchDescriptionSource(bringup), launch_arguments={
            "robot": LaunchConfiguration("robot"), "backend": LaunchConfiguration("backend")}.items()),
        OpaqueFunction(function=_moveit),
    ])
