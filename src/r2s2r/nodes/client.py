"""A client of the identical interface over DDS: what a policy node, the demo and the
tests use to command any robot (twin or real) and read it back.
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory

from r2s2r.contract import JointSample, Topics
from r2s2r.contract import convert, qos
from r2s2r.nodes.runtime import spin_in_background, stop_spinning
from r2s2r.waiting import wait_for


class RobotClient:
    """Owns a node spinning on a background thread; all methods are safe to call from the caller's thread."""

    def __init__(self, name: str = "r2s2r_client", namespace: str = "", driver: str = "driver",
                 cameras: Sequence[str] = (), context=None):
        # context: an initialised rclpy Context (a DDS participant of the caller's), else the default.
        if context is None and not rclpy.ok():
            rclpy.init()
        self.node = Node(name, namespace=namespace, context=context)
        self.driver = driver
        self._lock = threading.Lock()
        self._joints: JointSample | None = None
        self._joint_count = 0
        self._diagnostics: list[DiagnosticArray] = []
        self._images: dict[str, Image] = {}
        self._publishers: dict[str, object] = {}
        self._action_clients: dict[str, object] = {}
        self.node.create_subscription(JointState, Topics.JOINT_STATES, self._on_joints, qos.STATE)
        self.node.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, self._on_diag, qos.DIAGNOSTICS)
        for cam in cameras:
            self.node.create_subscription(Image, Topics.camera_image(cam),
                                          lambda msg, c=cam: self._on_image(c, msg), qos.SENSOR)
        self._executor = SingleThreadedExecutor(context=context)
        self._executor.add_node(self.node)
        self._thread = spin_in_background(self._executor)

    # -- inputs -------------------------------------------------------------------------------
    def _on_joints(self, msg):
        with self._lock:
            self._joints = convert.joint_sample(msg)
            self._joint_count += 1

    def _on_diag(self, msg):
        with self._lock:
            self._diagnostics.append(msg)
            del self._diagnostics[:-200]

    def _on_image(self, camera, msg):
        with self._lock:
            self._images[camera] = msg

    @property
    def joints(self) -> JointSample | None:
        if self._thread.error is not None:  # its inputs stopped: say so rather than wait on stale ones
            raise RuntimeError(f"the client's executor stopped spinning: {self._thread.error!r}")
        with self._lock:
            return self._joints

    @property
    def joint_state_count(self) -> int:
        with self._lock:
            return self._joint_count

    def diagnostics(self) -> list[DiagnosticArray]:
        with self._lock:
            return list(self._diagnostics)

    def diagnostic_values(self, prefix: str = "r2s2r/driver/") -> dict[str, str]:
        """Key/values of the newest status whose name starts with `prefix` (default: the driver's;
        camera and policy nodes publish on the same topic)."""
        for msg in reversed(self.diagnostics()):
            for status in msg.status:
                if status.name.startswith(prefix):
                    return {kv.key: kv.value for kv in status.values} | {"message": status.message}
        return {}

    def image(self, camera: str) -> np.ndarray | None:
        with self._lock:
            msg = self._images.get(camera)
        return None if msg is None else convert.image_array(msg)

    wait_for = staticmethod(wait_for)  # client.wait_for(predicate, timeout): r2s2r.waiting's

    def wait_for_joint_states(self, timeout: float = 10.0) -> JointSample:
        if not self.wait_for(lambda: self.joints is not None, timeout):
            raise TimeoutError(f"no {Topics.JOINT_STATES} within {timeout} s: is the driver running "
                               "on this ROS_DOMAIN_ID?")
        return self.joints

    def positions(self, names: Sequence[str]) -> np.ndarray:
        return self.wait_for_joint_states().positions_of(names)

    def wait_until_at(self, names: Sequence[str], target, tolerance: float, timeout: float) -> bool:
        target = np.asarray(target, float)
        return self.wait_for(lambda: self.joints is not None and
                             np.max(np.abs(self.joints.positions_of(names) - target)) < tolerance, timeout)

    # -- outputs ------------------------------------------------------------------------------
    def _publisher(self, msg_type, topic, profile=qos.COMMAND):
        if topic not in self._publishers:
            self._publishers[topic] = self.node.create_publisher(msg_type, topic, profile)
        return self._publishers[topic]

    def wait_for_subscriber(self, topic: str, msg_type=Float64MultiArray, timeout: float = 10.0) -> bool:
        pub = self._publisher(msg_type, topic, qos.LATCHED if topic == Topics.ESTOP else qos.COMMAND)
        return self.wait_for(lambda: pub.get_subscription_count() > 0, timeout)

    def send_positions(self, group: str, values: Sequence[float], streaming: bool = False) -> None:
        """A target for `group`: held until the next (forward_command_controller), or `streaming`
        (the driver's watchdog stops the arm once such targets stop coming)."""
        topic = Topics.streaming_commands(group) if streaming else Topics.position_commands(group)
        self._publisher(Float64MultiArray, topic).publish(convert.float_array_msg(values))

    def send_gripper(self, gripper: str, opening: float | Sequence[float]) -> None:
        values = [opening] if np.isscalar(opening) else list(opening)
        self._publisher(Float64MultiArray, Topics.gripper_commands(gripper)).publish(convert.float_array_msg(values))

    def send_trajectory(self, group: str, names, times, positions, velocities=None, accelerations=None,
                        stamp: float = 0.0) -> None:
        msg = convert.trajectory_msg(names, times, positions, velocities, accelerations, stamp)
        self._publisher(JointTrajectory, Topics.joint_trajectory(group)).publish(msg)

    def send_raw(self, topic: str, msg) -> None:
        self._publisher(type(msg), topic).publish(msg)

    # -- the controllers' actions ------------------------------------------------------------------
    def _action_client(self, action_type, name: str):
        from rclpy.action import ActionClient
        if name not in self._action_clients:
            self._action_clients[name] = ActionClient(self.node, action_type, name)
        return self._action_clients[name]

    def prepare_actions(self, groups: Sequence[str], grippers: Sequence[str], timeout: float = 10.0) -> bool:
        """Make the action clients of `groups` and `grippers` and wait until every server is
        discovered, so that a sequence of goals starts with the whole robot's actions at hand."""
        from control_msgs.action import FollowJointTrajectory, GripperCommand
        clients = [self._action_client(FollowJointTrajectory, Topics.follow_joint_trajectory(g)) for g in groups]
        clients += [self._action_client(GripperCommand, Topics.gripper_action(g)) for g in grippers]
        return all(client.wait_for_server(timeout_sec=timeout) for client in clients)

    def follow_trajectory(self, group: str, names, times, positions, velocities=None, accelerations=None,
                          stamp: float = 0.0, path_tolerance=(), goal_tolerance=(), goal_time_tolerance: float = 0.0,
                          timeout: float = 10.0) -> "ActionGoal":
        """Send a FollowJointTrajectory goal to `group`'s controller, as MoveIt's trajectory execution
        does; tolerances as (joint, position, velocity, acceleration) tuples. Returns once the goal
        is accepted or refused."""
        from control_msgs.action import FollowJointTrajectory
        from control_msgs.msg import JointTolerance
        goal = FollowJointTrajectory.Goal()
        goal.trajectory = convert.trajectory_msg(names, times, positions, velocities, accelerations, stamp)
        goal.path_tolerance = [JointTolerance(name=n, position=float(p), velocity=float(v), acceleration=float(a))
                               for n, p, v, a in path_tolerance]
        goal.goal_tolerance = [JointTolerance(name=n, position=float(p), velocity=float(v), acceleration=float(a))
                               for n, p, v, a in goal_tolerance]
        goal.goal_time_tolerance = convert.to_duration(goal_time_tolerance)
        return self._send_goal(self._action_client(FollowJointTrajectory, Topics.follow_joint_trajectory(group)),
                               goal, timeout)

    def gripper_goal(self, gripper: str, position: float, max_effort: float = 0.0,
                     timeout: float = 10.0) -> "ActionGoal":
        """Send a GripperCommand goal (the opening in metres) to `gripper`'s controller."""
        from control_msgs.action import GripperCommand
        goal = GripperCommand.Goal()
        goal.command.position, goal.command.max_effort = float(position), float(max_effort)
        return self._send_goal(self._action_client(GripperCommand, Topics.gripper_action(gripper)), goal, timeout)

    def _send_goal(self, client, goal, timeout: float) -> "ActionGoal":
        if not client.wait_for_server(timeout_sec=timeout):
            raise TimeoutError(f"action {client._action_name} not available within {timeout} s")
        handle = ActionGoal(self)
        future = self.on_executor(lambda: client.send_goal_async(goal, feedback_callback=handle.on_feedback), timeout)
        if not self.wait_for(future.done, timeout):
            raise TimeoutError(f"action {client._action_name} did not answer the goal within {timeout} s")
        handle.goal_handle = future.result()
        return handle

    def on_executor(self, call, timeout: float = 10.0):
        """call() on the spinning thread, its return value. rclpy's ActionClient files a request's
        future only after sending it: called from another thread, a reply handled in between is
        dropped and the future never completes (ros2/rclpy#1123)."""
        task = self._executor.create_task(call)
        if not self.wait_for(task.done, timeout):
            raise TimeoutError(f"the client's executor did not run a call within {timeout} s")
        return task.result()

    def estop(self, engaged: bool = True) -> None:
        self._publisher(Bool, Topics.ESTOP, qos.LATCHED).publish(Bool(data=engaged))

    def _call(self, srv_type, name: str, request, timeout: float):
        client = self.node.create_client(srv_type, f"{self.driver}/{name.removeprefix('~/')}")
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                raise TimeoutError(f"service {client.srv_name} not available within {timeout} s")
            future = client.call_async(request)
            if not self.wait_for(future.done, timeout):
                raise TimeoutError(f"service {client.srv_name} did not answer within {timeout} s")
            return future.result()
        finally:
            self.node.destroy_client(client)

    def reset(self, timeout: float = 10.0) -> Trigger.Response:
        return self._call(Trigger, "reset", Trigger.Request(), timeout)

    def home(self, timeout: float = 10.0) -> Trigger.Response:
        return self._call(Trigger, "home", Trigger.Request(), timeout)

    def enable(self, on: bool = True, timeout: float = 10.0) -> SetBool.Response:
        return self._call(SetBool, "enable", SetBool.Request(data=on), timeout)

    def close(self) -> None:
        stop_spinning(self._executor, self._thread)
        for client in self._action_clients.values():
            client.destroy()
        self.node.destroy_node()


class ActionGoal:
    """A goal sent by RobotClient: its feedback as it comes, its result, a way to cancel it."""

    def __init__(self, client: RobotClient):
        self._client = client
        self.goal_handle = None
        self.feedback: list = []
        self._result_future = None

    @property
    def accepted(self) -> bool:
        return self.goal_handle is not None and self.goal_handle.accepted

    def on_feedback(self, msg) -> None:
        self.feedback.append(msg.feedback)

    def result(self, timeout: float = 30.0):
        """(status, result): status an action_msgs/GoalStatus value (4 succeeded, 5 canceled, 6 aborted)."""
        if self._result_future is None:
            self._result_future = self._client.on_executor(self.goal_handle.get_result_async)
        if not self._client.wait_for(self._result_future.done, timeout):
            raise TimeoutError(f"no result within {timeout} s")
        response = self._result_future.result()
        return response.status, response.result

    def cancel(self, timeout: float = 10.0):
        """Request cancellation; the cancel response."""
        future = self._client.on_executor(self.goal_handle.cancel_goal_async)
        if not self._client.wait_for(future.done, timeout):
            raise TimeoutError(f"no cancel response within {timeout} s")
        return future.result()
