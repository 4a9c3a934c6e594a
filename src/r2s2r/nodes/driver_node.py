"""driver_node: one robot behind the identical interface; `backend: sim` is the MuJoCo twin.

Parameters (config/robots/<robot>.yaml sets them, a stack may override):
  robot            registered robot name (required)
  backend          sim (this issue); the vendor backends plug in here
  scene            scene YAML for the twin (default: a table and no objects)
  seed             twin seed
  control_rate_hz  command cycle rate (default: the robot's)
  state_rate_hz    joint_states rate (default: the robot's)
  camera_rate_hz   image rate of the twin's cameras, 0 disables them
  cameras          camera names to publish (default: all of the scene's)
  publish_depth    also publish cameras/<name>/depth/image_raw (32FC1, metres)
  real_time_factor 1.0 paces the twin to the wall clock; 0 runs as fast as it can
"""

from __future__ import annotations

import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseArray
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory

from r2s2r.contract import CommandError, Services, Topics
from r2s2r.contract import convert, qos
from r2s2r.contract.frames import WORLD, camera_optical_frame
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.nodes.runtime import run
from r2s2r.robots import get_robot
from r2s2r.sim.scene import Scene, load_scene

BACKENDS = ("sim",)
# A trajectory stamped further ahead than this is almost surely on another clock (use_sim_time).
MAX_FUTURE_STAMP_S = 10.0


class DriverNode(Node):
    def __init__(self):
        super().__init__("driver")
        self.declare_parameters("", [
            ("robot", Parameter.Type.STRING), ("backend", "sim"), ("scene", ""), ("seed", 0),
            ("control_rate_hz", 0.0), ("state_rate_hz", 0.0), ("camera_rate_hz", 30.0),
            ("cameras", Parameter.Type.STRING_ARRAY), ("publish_depth", False), ("real_time_factor", 1.0),
        ])
        robot_name = self._param("robot", "")
        if not robot_name:
            raise ValueError("parameter 'robot' is required: one of the registered robots")
        self.robot = get_robot(robot_name)  # UnknownRobotError lists the known robots
        backend = self._param("backend", "sim")
        if backend not in BACKENDS:
            raise ValueError(f"parameter 'backend' is {backend!r}; expected one of {', '.join(BACKENDS)}")
        scene_path = self._param("scene", "")
        scene = load_scene(scene_path) if scene_path else Scene(robot=self.robot.name)
        if scene.robot != self.robot.name:
            raise ValueError(f"scene {scene.source} is for robot {scene.robot!r}, but parameter 'robot' is "
                             f"{self.robot.name!r}")
        self.hardware = SimHardware(scene, seed=self._param("seed", 0))
        self.hardware.connect()
        self.hardware.activate()
        self.loop = ControlLoop(self.hardware, self._param("control_rate_hz", 0.0) or None)
        self.state_rate = self._param("state_rate_hz", 0.0) or self.robot.state_rate_hz
        self.camera_rate = self._param("camera_rate_hz", 30.0)
        self.publish_depth = self._param("publish_depth", False)
        self.real_time_factor = self._param("real_time_factor", 1.0)
        twin = self.hardware.twin
        wanted = self._param("cameras", None)
        unknown = [c for c in (wanted or []) if c not in twin.camera_names]
        if unknown:
            raise ValueError(f"parameter 'cameras' names {unknown}; the scene's cameras are "
                             f"{', '.join(twin.camera_names)}")
        self.camera_names = tuple(wanted) if wanted else twin.camera_names
        if self.camera_rate <= 0:
            self.camera_names = ()

        self._estopped = False
        self._enabled = True
        self._fault = ""
        self._lock = threading.Lock()  # serialises loop-thread work with reset / home services

        # Outputs.
        self.pub_joints = self.create_publisher(JointState, Topics.JOINT_STATES, qos.STATE)
        self.pub_diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.pub_clock = self.create_publisher(Clock, Topics.CLOCK, qos.CLOCK)
        self.pub_objects = self.create_publisher(PoseArray, Topics.OBJECT_POSES, qos.TWIN)
        self.pub_images = {c: self.create_publisher(Image, Topics.camera_image(c), qos.SENSOR) for c in self.camera_names}
        self.pub_infos = {c: self.create_publisher(CameraInfo, Topics.camera_info(c), qos.SENSOR) for c in self.camera_names}
        self.pub_depths = {c: self.create_publisher(Image, Topics.camera_depth(c), qos.SENSOR)
                           for c in self.camera_names} if self.publish_depth else {}
        # Inputs.
        for group in self.robot.group_names:
            self.create_subscription(Float64MultiArray, Topics.position_commands(group),
                                     lambda msg, g=group: self._on_positions(g, msg), qos.COMMAND)
            self.create_subscription(JointTrajectory, Topics.joint_trajectory(group),
                                     lambda msg, g=group: self._on_trajectory(g, msg), qos.COMMAND)
        for gripper in self.robot.grippers:
            self.create_subscription(Float64MultiArray, Topics.gripper_commands(gripper.name),
                                     lambda msg, g=gripper.name: self._on_gripper(g, msg), qos.COMMAND)
        self.create_subscription(Bool, Topics.ESTOP, self._on_estop, qos.LATCHED)
        self.create_service(Trigger, Services.RESET, self._on_reset)
        self.create_service(Trigger, Services.HOME, self._on_home)
        self.create_service(SetBool, Services.ENABLE, self._on_enable)

        self._running = True
        self._rtf = 0.0
        self._thread = threading.Thread(target=self._run_loop, name="twin-loop", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"{self.robot.name} on backend {backend}: groups {', '.join(self.robot.group_names)}, "
            f"grippers {', '.join(g.name for g in self.robot.grippers) or 'none'}, cameras "
            f"{', '.join(self.camera_names) or 'none'}; control {self.loop.rate_hz:g} Hz, state {self.state_rate:g} Hz")

    def _param(self, name, default):
        try:
            value = self.get_parameter(name).value
        except ParameterUninitializedException:
            return default
        return default if value is None else value

    # -- command callbacks: bad input is reported, never raised into the executor ----------------
    def _report(self, error: Exception) -> None:
        self.get_logger().error(f"rejected: {error}")
        self._publish_diagnostics()

    def _accepting(self, what: str) -> bool:
        if self._estopped or not self._enabled:
            reason = "estop is latched (clear it with ~/enable)" if self._estopped else "output is disabled (~/enable)"
            self._report(CommandError(f"{what}: ignored, {reason}"))
            return False
        return True

    def _on_positions(self, group: str, msg: Float64MultiArray) -> None:
        if self._accepting(Topics.position_commands(group)):
            try:
                self.loop.controller.command_positions(group, convert.float_array(msg), self.hardware.now)
            except CommandError as error:
                self._report(error)

    def _on_trajectory(self, group: str, msg: JointTrajectory) -> None:
        if not self._accepting(Topics.joint_trajectory(group)):
            return
        try:
            names, stamp, times, pos, vel, acc = convert.trajectory_arrays(msg)
            now = self.hardware.now
            if stamp > now + MAX_FUTURE_STAMP_S:
                raise CommandError(f"{Topics.joint_trajectory(group)}: header.stamp {stamp:.3f} s is "
                                   f"{stamp - now:.1f} s ahead of the robot clock ({now:.3f} s); expected 0 "
                                   "(start now) or a time on the robot's clock (use_sim_time for the twin)")
            self.loop.controller.command_trajectory(group, names, stamp, times, pos, vel, acc, now)
        except CommandError as error:
            self._report(error)

    def _on_gripper(self, gripper: str, msg: Float64MultiArray) -> None:
        if self._accepting(Topics.gripper_commands(gripper)):
            try:
                self.loop.controller.command_gripper(gripper, convert.float_array(msg), self.hardware.now)
            except CommandError as error:
                self._report(error)

    def _on_estop(self, msg: Bool) -> None:
        if msg.data and not self._estopped:
            self._estopped = True
            with self._lock:
                self.loop.hold_here()
            self.get_logger().warning("estop: holding position until ~/enable is called with true")
            self._publish_diagnostics()

    def _on_enable(self, request: SetBool.Request, response: SetBool.Response):
        with self._lock:
            self.loop.hold_here()
            self._enabled = bool(request.data)
            if request.data:
                self._estopped = False
        response.success = True
        response.message = "enabled" if request.data else "disabled: holding position"
        self._publish_diagnostics()
        return response

    def _on_reset(self, request, response: Trigger.Response):
        with self._lock:
            self.hardware.reset()
            self.loop.hold_here()
        response.success = True
        response.message = f"scene reset at t={self.hardware.now:.3f} s"
        return response

    def _on_home(self, request, response: Trigger.Response):
        try:
            for group in self.robot.groups:
                values = np.array([self.robot.home[j] for j in group.joints])
                self.loop.controller.command_positions(group.name, values, self.hardware.now)
            response.success = True
            response.message = "moving home"
        except CommandError as error:
            response.success = False
            response.message = str(error)
        return response

    # -- the loop thread ----------------------------------------------------------------------------
    def _run_loop(self) -> None:
        renderer = None
        if self.camera_names:
            from r2s2r.sim.render import TwinRenderer
            renderer = TwinRenderer(self.hardware.twin)  # the GL context lives on this thread
        tick = 1.0 / self.state_rate
        camera_period = 1.0 / self.camera_rate if self.camera_rate > 0 else float("inf")
        next_camera = self.hardware.now
        next_diag = self.hardware.now
        wall0, sim0 = time.monotonic(), self.hardware.now
        rtf_window = (wall0, sim0)
        try:
            while self._running and self.context.ok():
                with self._lock:
                    target = self.hardware.now + tick
                    self.loop.run_until(target)
                    now = self.hardware.now
                    sample = self.hardware.read()
                    images = []
                    if renderer is not None and now >= next_camera:
                        next_camera = max(next_camera + camera_period, now)
                        for cam in self.camera_names:
                            depth = renderer.depth(cam) if cam in self.pub_depths else None
                            images.append((cam, renderer.rgb(cam), depth))
                    poses = list(self.hardware.twin.object_poses().values()) if images else []
                self.pub_clock.publish(Clock(clock=convert.to_time(now)))
                self.pub_joints.publish(convert.joint_state_msg(sample))
                if images:
                    self._publish_images(now, images)
                    self.pub_objects.publish(convert.pose_array_msg(poses, now, WORLD))
                if now >= next_diag:
                    next_diag = now + 1.0
                    wall = time.monotonic()
                    self._rtf = (now - rtf_window[1]) / max(wall - rtf_window[0], 1e-9)
                    rtf_window = (wall, now)
                    self._publish_diagnostics()
                if self.real_time_factor > 0:
                    ahead = (now - sim0) / self.real_time_factor - (time.monotonic() - wall0)
                    if ahead > 0:
                        time.sleep(ahead)
                    elif ahead < -0.5:  # fell behind by more than half a second: do not try to catch up
                        wall0, sim0 = time.monotonic(), now
        except Exception as exc:  # the twin itself failed: say so and stop moving
            if not self.context.ok():
                return  # shutting down: the publishers are gone, nothing failed
            self._fault = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"control loop stopped: {self._fault}")
            self._publish_diagnostics()
        finally:
            if renderer is not None:
                renderer.close()

    def _publish_images(self, now: float, images) -> None:
        twin = self.hardware.twin
        for cam, rgb, depth in images:
            frame = camera_optical_frame(cam)
            self.pub_images[cam].publish(convert.image_msg(rgb, "rgb8", now, frame))
            fx, fy, cx, cy = twin.camera_intrinsics(cam)
            self.pub_infos[cam].publish(convert.camera_info_msg(rgb.shape[1], rgb.shape[0], fx, fy, cx, cy, now, frame))
            if depth is not None:
                self.pub_depths[cam].publish(convert.image_msg(depth, "32FC1", now, frame))

    def _publish_diagnostics(self) -> None:
        stats = self.loop.controller.stats
        level = convert.OK
        message = "running"
        if self._fault:
            level, message = convert.ERROR, f"fault: {self._fault}"
        elif self._estopped:
            level, message = convert.WARN, "estop latched: holding position"
        elif not self._enabled:
            level, message = convert.WARN, "disabled: holding position"
        elif stats.last_error:
            level, message = convert.WARN, f"last command rejected: {stats.last_error}"
        values = {
            "backend": self.hardware.backend, "robot": self.robot.name,
            "mode": "estop" if self._estopped else ("enabled" if self._enabled else "disabled"),
            "time": f"{self.hardware.now:.3f}", "real_time_factor": f"{self._rtf:.3f}",
            "commands_accepted": sum(stats.accepted.values()), "commands_rejected": sum(stats.rejected.values()),
            "last_rejection": stats.last_error,
            "active_trajectories": ",".join(self.loop.controller.active_trajectories()),
        }
        values.update({f"rejected.{k}": v for k, v in stats.rejected.items()})
        status = convert.diagnostic_status(f"r2s2r/driver/{self.robot.name}", self.hardware.backend, level, message, values)
        self.pub_diag.publish(convert.diagnostic_array([status], self.hardware.now))

    def close(self) -> None:
        self._running = False
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)


def main(args=None) -> int:
    return run(DriverNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
