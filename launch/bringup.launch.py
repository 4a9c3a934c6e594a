"""Bring up an r2s2r stack on a full ROS 2 install, from the same YAML `r2s2r up` reads.

    ros2 launch r2s2r bringup.launch.py robot:=franka_fr3 backend:=sim
    ros2 launch r2s2r bringup.launch.py stack:=/path/to/my_stack.yaml
    ros2 launch r2s2r bringup.launch.py robot:=franka_fr3 backend:=sim scene:=/path/to/scene.yaml

The stack is config/stacks/<robot>_<backend>.yaml unless `stack` names a file. `scene` (if set)
is passed to every node of the stack as the `scene` parameter.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from r2s2r.stack import find_stack, launch_node_arguments, load_stack


def _nodes(context):
    robot = LaunchConfiguration("robot").perform(context)
    backend = LaunchConfiguration("backend").perform(context)
    stack_file = LaunchConfiguration("stack").perform(context)
    scene = LaunchConfiguration("scene").perform(context)
    overrides = {"scene": scene} if scene else {}
    stack = load_stack(stack_file or find_stack(robot, backend), overrides)
    actions = []
    for spec in stack.nodes:
        node = Node(**launch_node_arguments(spec))
        actions.append(node)
        if spec.on_exit == "stop":  # as `r2s2r up` does: one node ending ends the stack
            actions.append(RegisterEventHandler(OnProcessExit(
                target_action=node, on_exit=[EmitEvent(event=Shutdown(reason=f"{spec.name} exited"))])))
    return actions


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="franka_fr3",
                              description="the robot's registry name (r2s2r robots list; franka: franka_fr3)"),
        DeclareLaunchArgument("backend", default_value="sim", description="sim or a vendor backend"),
        DeclareLaunchArgument("stack", default_value="", description="a stack YAML (overrides robot/backend)"),
        DeclareLaunchArgument("scene", default_value="", description="scene YAML for the twin"),
        OpaqueFunction(function=_nodes),
    ])
