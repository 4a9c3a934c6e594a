"""ros2_control's action interfaces on driver_node: what joint_trajectory_controller and
gripper_action_controller offer, for every group and gripper of the robot, on every backend.

  <group>_controller/follow_joint_trajectory   control_msgs/action/FollowJointTrajectory
  <group>_controller/controller_state          control_msgs/msg/JointTrajectoryControllerState
  <gripper>_controller/gripper_cmd             control_msgs/action/GripperCommand

The goals themselves (checks, tolerances, outcome) are hardware.goals'; this module turns
messages into them and them into feedback and results. Each executing goal holds one executor
thread while it runs (DriverNode.executor_threads counts them in).
"""

from __future__ import annotations

import threading

try:
    from control_msgs.action import FollowJointTrajectory, GripperCommand
    from control_msgs.msg import JointTrajectoryControllerState
except ImportError as error:  # the interfaces are built at set-up, not shipped as wheels
    raise ImportError(f"control_msgs is not importable ({error}); build it with `r2s2r interfaces build` "
                      "(make does), or source a ROS 2 Jazzy install that has ros-jazzy-control-msgs") from None
from action_msgs.msg import GoalStatus
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from trajectory_msgs.msg import JointTrajectoryPoint

from r2s2r.contract import CommandError, Topics, convert, qos
from r2s2r.contract.types import JointSample
from r2s2r.hardware.driver import Driver
from r2s2r.hardware.goals import (ABORTED, INVALID_GOAL, SUCCEEDED, GripperGoal, GripperSettings,
                                  Outcome, ToleranceDefaults, TrajectoryGoal)

WAKE_S = 0.1  # an executing goal looks at cancel requests and the link at least this often


def _point(positions, velocities) -> JointTrajectoryPoint:
    return JointTrajectoryPoint(positions=[float(v) for v in positions], velocities=[float(v) for v in velocities])


def _finish(goal_handle, outcome: Outcome) -> None:
    """Put the goal handle into the outcome's terminal state."""
    if outcome.status == SUCCEEDED:
        goal_handle.succeed()
    elif outcome.status == ABORTED:
        goal_handle.abort()
    else:
        if goal_handle.status != GoalStatus.STATUS_CANCELING:
            # Preempted without a cancel request: rclpy offers no public way to the cancelled state, which
            # the controllers report for a preempted goal; the state machine passes through CANCELING.
            from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
            goal_handle._update_state(_rclpy.GoalEvent.CANCEL_GOAL)
        goal_handle.canceled()


class ControllerActions:
    """The action servers and controller_state publishers of one driver node. `update()` is called
    by the node's control-loop thread after every state tick."""

    def __init__(self, node: Node, driver: Driver, tolerances: ToleranceDefaults, gripper: GripperSettings,
                 state_rate_hz: float, ros_time_offset: float = 0.0):
        """`ros_time_offset`: ROS time minus the robot's clock (a real robot's is the host's monotonic one)."""
        self.node = node
        self.ros_time_offset = ros_time_offset
        self.driver = driver
        self.tolerances = tolerances
        self.gripper_settings = gripper
        self._lock = threading.Lock()
        self._running: dict[str, object] = {}  # group or gripper -> its goal now executing
        self._pending: dict[bytes, object] = {}  # goal id -> goal, from acceptance to execution
        self._state_period = 1.0 / state_rate_hz if state_rate_hz > 0 else float("inf")
        self._next_state = float("-inf")
        group = ReentrantCallbackGroup()  # goals execute side by side: one arm's does not wait for the other's
        self._servers = []
        self._state_publishers = {}
        robot = driver.robot
        for name in robot.group_names:
            action = Topics.follow_joint_trajectory(name)
            self._servers.append(ActionServer(
                node, FollowJointTrajectory, action, execute_callback=self._execute_trajectory,
                goal_callback=lambda request: GoalResponse.ACCEPT,
                handle_accepted_callback=lambda handle, g=name, a=action: self._accept_trajectory(g, a, handle),
                cancel_callback=lambda handle: CancelResponse.ACCEPT, callback_group=group))
            self._state_publishers[name] = node.create_publisher(
                JointTrajectoryControllerState, Topics.controller_state(name), qos.STATE)
        for spec in robot.grippers:
            action = Topics.gripper_action(spec.name)
            self._servers.append(ActionServer(
                node, GripperCommand, action, execute_callback=self._execute_gripper,
                goal_callback=lambda request: GoalResponse.ACCEPT,
                handle_accepted_callback=lambda handle, g=spec.name, a=action: self._accept_gripper(g, a, handle),
                cancel_callback=lambda handle: CancelResponse.ACCEPT, callback_group=group))

    def to_robot_clock(self, ros_stamp: float) -> float:
        """A trajectory's header stamp on the robot's clock: 0 stays 0 (start now, the ROS rule); any
        other stamp is a time, even one before the robot clock's zero (long over, so refused as old)."""
        return ros_stamp - self.ros_time_offset if ros_stamp != 0 else 0.0

    @property
    def executing_limit(self) -> int:
        """Goals that may execute at once: one per group and per gripper."""
        return len(self._servers)

    # -- acceptance: check and command; a goal that fails its checks ends at once, with why ---------
    def _accept_trajectory(self, group: str, action: str, goal_handle) -> None:
        goal = TrajectoryGoal(self.driver, group, action)
        request = goal_handle.request
        try:
            names, stamp, times, positions, velocities, accelerations = convert.trajectory_arrays(request.trajectory)
        except CommandError as error:
            goal._end_now(Outcome(ABORTED, INVALID_GOAL, f"{action}: {error}"))
        else:
            tolerance = [(t.name, t.position, t.velocity, t.acceleration) for t in request.path_tolerance]
            goal_tolerance = [(t.name, t.position, t.velocity, t.acceleration) for t in request.goal_tolerance]
            goal.start(names, self.to_robot_clock(stamp), times, positions, velocities, accelerations, self.tolerances, tolerance,
                       goal_tolerance, convert.from_time(request.goal_time_tolerance),
                       multi_dof_points=len(request.multi_dof_trajectory.points))
        self._take(group, goal, goal_handle)

    def _accept_gripper(self, gripper: str, action: str, goal_handle) -> None:
        goal = GripperGoal(self.driver, gripper, action, self.gripper_settings)
        goal.start(goal_handle.request.command.position, goal_handle.request.command.max_effort)
        self._take(gripper, goal, goal_handle)

    def _take(self, name: str, goal, goal_handle) -> None:
        if not goal.done:
            with self._lock:
                previous = self._running.get(name)
                self._running[name] = goal
            if previous is not None:
                previous.preempt()
        with self._lock:
            self._pending[bytes(goal_handle.goal_id.uuid)] = goal
        goal_handle.execute()

    # -- execution: wait for the loop thread's news; feedback, then the result ----------------------
    def _follow(self, goal_handle, publish_feedback):
        """Run the goal to its end: feedback as the loop thread posts it, cancel requests, a lost
        link; the goal handle put into its terminal state. The goal, ended."""
        with self._lock:
            goal = self._pending.pop(bytes(goal_handle.goal_id.uuid))
        while not goal.done:
            if goal_handle.is_cancel_requested:
                goal.cancel()
            elif not self.node.context.ok():
                goal.lost("the driver is shutting down")
            elif not self.driver.connected:
                goal.lost(f"the robot is not connected ({self.driver.link_fault})")
            elif goal.wait(WAKE_S):
                publish_feedback(goal)
        with self._lock:
            for name, running in list(self._running.items()):
                if running is goal:
                    del self._running[name]
        try:
            _finish(goal_handle, goal.outcome)
        except Exception:  # the node is stopping: its action server went with the context
            if self.node.context.ok():
                raise
            return goal
        if goal.outcome.status != SUCCEEDED:
            self.node.get_logger().warning(f"{goal.source}: goal {goal.outcome.status}: "
                                           f"{goal.outcome.error_string or 'stalled'}")
        return goal

    def _execute_trajectory(self, goal_handle):
        goal = self._follow(goal_handle, lambda goal: self._publish_trajectory_feedback(goal_handle, goal))
        return FollowJointTrajectory.Result(error_code=goal.outcome.error_code, error_string=goal.outcome.error_string)

    def _publish_trajectory_feedback(self, goal_handle, goal: TrajectoryGoal) -> None:
        feedback = goal.feedback
        if feedback is None:
            return
        msg = FollowJointTrajectory.Feedback()
        msg.header.stamp = convert.to_time(feedback.stamp + self.ros_time_offset)
        msg.joint_names = list(feedback.joints)
        msg.desired, msg.actual, msg.error = (_point(*pair) for pair in (feedback.desired, feedback.actual,
                                                                         feedback.error))
        goal_handle.publish_feedback(msg)

    def _execute_gripper(self, goal_handle):
        def feedback(goal: GripperGoal):
            if goal.state is not None:
                goal_handle.publish_feedback(GripperCommand.Feedback(**vars(goal.state)))
        goal = self._follow(goal_handle, feedback)
        state = goal.state
        if state is None and self.driver.loop is not None:  # refused or ended before a tick: as measured now
            state = goal.measure(self.driver.loop.last_sample)
        return GripperCommand.Result(**vars(state)) if state is not None else GripperCommand.Result()

    # -- the loop thread ----------------------------------------------------------------------------
    def update(self, now: float, sample: JointSample) -> None:
        with self._lock:
            goals = list(self._running.values())
        for goal in goals:
            goal.update(now, sample)
        if self._state_period == float("inf"):  # controller_state_rate_hz 0: not published
            return
        if now >= self._next_state or now + self._state_period < self._next_state:  # (a reset restarts time)
            self._next_state = now + self._state_period
            self._publish_states(now, sample)

    def _publish_states(self, now: float, sample: JointSample) -> None:
        controller = self.driver.loop.controller
        for name, publisher in self._state_publishers.items():
            joints = self.driver.robot.group(name).joints
            reference, reference_velocity, output, output_velocity = controller.reference(name, now)
            position = sample.positions_of(joints)
            velocity = sample.velocities_of(joints)
            msg = JointTrajectoryControllerState()
            msg.header.stamp = convert.to_time(now + self.ros_time_offset)
            msg.joint_names = list(joints)
            msg.reference = _point(reference, reference_velocity)
            msg.feedback = _point(position, velocity)
            msg.error = _point(reference - position, reference_velocity - velocity)
            msg.output = _point(output, output_velocity)
            msg.speed_scaling_factor = 1.0
            publisher.publish(msg)

    def close(self) -> None:
        """End every running goal (the node is stopping) and drop the servers."""
        with self._lock:
            goals = list(self._running.values())
        for goal in goals:
            goal.lost("the driver is shutting down")
        for server in self._servers:
            server.destroy()
