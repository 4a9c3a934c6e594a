"""driver_node: one robot behind the identical interface, whatever the backend.

`backend: sim` is the MuJoCo twin; `franka`, `xarm`, `flexiv`, `rby1`, `aloha` drive real arms
through their vendor SDKs. The ROS side is this one file for all of them: the driver itself is
hardware.driver.Driver; this node turns parameters into one, topics and services into its
methods, and publishes its state, cameras and diagnostics.

Parameters (config/robots/<robot>.yaml sets them, a stack may override):
  robot            registered robot name (required)
  backend          sim | franka | xarm | flexiv | rby1 | aloha
  <backend>.<key>  the backend's connection settings (ip, serial number, port, ...)
  scene            scene YAML: the twin's, and on every backend the cell the collision check
                   models (default: the robot on its table, no objects)
  collision_margin_m  how close (m) the arm may come to the cell's fixed geometry and to itself
  seed             twin seed
  watchdog_s       targets on <group>_streaming_controller/commands older than this: brake and
                   hold (0 disables); <group>_position_controller/commands holds its command
  velocity_scale   fraction of the datasheet velocity limits the safety filter allows
  control_rate_hz  command cycle rate (default: the robot's)
  state_rate_hz    joint_states rate (default: the robot's)
  camera_rate_hz   image rate of the twin's cameras, 0 disables them
  cameras          camera names to publish (default: all of the scene's)
  publish_depth    also publish cameras/<name>/depth/image_raw (32FC1, metres)
  real_time_factor 1.0 paces the twin to the wall clock; 0 runs as fast as it can
  controller_state_rate_hz  rate of <group>_controller/controller_state (0 disables it)
  tf_rate_hz       rate of the links' (and the twin's objects' and fixtures') transforms on /tf (0 disables
                   them), and of the twin's objects' sizes on twin/object_sizes; /tf_static and
                   robot_description are published once, latched
  constraints.goal_time, constraints.stopped_velocity_tolerance, constraints.<joint>.trajectory,
  constraints.<joint>.goal   joint_trajectory_controller's default tolerances for the
                   follow_joint_trajectory goals (a goal's own tolerances override them)
  gripper_action.goal_tolerance, .stall_velocity_threshold, .stall_timeout, .allow_stalling
                   gripper_action_controller's settings for the gripper_cmd goals
"""


from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseArray
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Bool, Float64MultiArray, String
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory

from r2s2r.contract import CommandError, Services, Topics
from r2s2r.contract import convert, qos, tf
from r2s2r.contract.frames import WORLD, camera_optical_frame
from r2s2r.hardware.backends import backend_names, load_backend
from r2s2r.hardware.base import Hardware
from r2s2r.hardware.driver import ERROR, OK, WARN, Driver
from r2s2r.hardware.goals import GripperSettings, ToleranceDefaults
from r2s2r.hardware.safety import SafetyLimits
from r2s2r.hardware.sim import SimHardware
from r2s2r.nodes.actions import ControllerActions
from r2s2r.nodes.runtime import check_ranges, run
from r2s2r.robots import get_robot
from r2s2r.robots.transforms import Transform, fixed_transforms, mount_transform, moving_transforms
from r2s2r.sim.collision import DEFAULT_MARGIN_M
from r2s2r.sim.scene import Scene, load_scene

LEVELS = {OK: convert.OK, WARN: convert.WARN, ERROR: convert.ERROR}

DEFAULTS = {
    "robot": "", "backend": "sim", "scene": "", "seed": 0, "control_rate_hz": 0.0, "state_rate_hz": 0.0,
    "camera_rate_hz": 30.0, "cameras": [""], "publish_depth": False, "real_time_factor": 1.0,
    "watchdog_s": 0.5, "velocity_scale": 1.0, "collision_margin_m": DEFAULT_MARGIN_M,
    "controller_state_rate_hz": 50.0, "tf_rate_hz": 50.0,
    "constraints.goal_time": ToleranceDefaults.goal_time,
    "constraints.stopped_velocity_tolerance": ToleranceDefaults.stopped_velocity,
    "gripper_action.goal_tolerance": GripperSettings.goal_tolerance,
    "gripper_action.stall_velocity_threshold": GripperSettings.stall_velocity_threshold,
    "gripper_action.stall_timeout": GripperSettings.stall_timeout,
    "gripper_action.allow_stalling": GripperSettings.allow_stalling,
}


# Numeric parameters: (lowest, highest, what is expected); POSITIVE ones may not be 0, RATES may be
# 0 (the default) or within their range.
RANGES = {
    "control_rate_hz": (1.0, 10000.0, "0 (the robot's own rate) or a rate from 1 Hz to 10 kHz"),
    "state_rate_hz": (1.0, 10000.0, "0 (the robot's own rate) or a rate from 1 Hz to 10 kHz"),
    "camera_rate_hz": (0.1, 1000.0, "0 (no twin cameras) or a rate from 0.1 Hz to 1 kHz"),
    "real_time_factor": (0.0, 1000.0, "0 (as fast as the CPU allows) or a factor of the wall clock up to 1000"),
    "watchdog_s": (0.0, 60.0, "a positive time up to 60 s"),
    "velocity_scale": (0.0, 1.0, "a share of the datasheet velocities in (0, 1]"),
    "seed": (0, 2**32 - 1, "an integer from 0 to 2^32 - 1"),
    "controller_state_rate_hz": (0.1, 10000.0, "0 (no controller_state) or a rate from 0.1 Hz to 10 kHz"),
    "tf_rate_hz": (0.1, 10000.0, "0 (no /tf) or a rate from 0.1 Hz to 10 kHz"),
    "constraints.goal_time": (0.0, 3600.0, "0 (wait as long as it takes) or a time in seconds up to 3600"),
    "constraints.stopped_velocity_tolerance": (0.0, 100.0, "0 (not checked) or a speed in rad/s"),
    "gripper_action.goal_tolerance": (0.0, 1.0, "a distance in metres up to 1"),
    "gripper_action.stall_velocity_threshold": (0.0, 10.0, "a speed in m/s"),
    "gripper_action.stall_timeout": (0.0, 3600.0, "a time in seconds up to 3600"),
}
POSITIVE = ("watchdog_s", "velocity_scale", "gripper_action.goal_tolerance", "gripper_action.stall_timeout")
RATES = ("control_rate_hz", "state_rate_hz", "camera_rate_hz", "controller_state_rate_hz", "tf_rate_hz")
JOINT_TOLERANCE = (0.0, 100.0, "0 (not checked) or a tolerance in rad (m for a prismatic joint)")


class DriverNode(Node):
    def __init__(self, scene: Scene | None = None, hardware: Hardware | None = None, **node_options):
        """`scene`: the twin's scene as an object (the evaluation engine's perturbed scenes),
        instead of the `scene` parameter; `hardware`: a backend built by the caller (a proxy cell
        at a trial's initial conditions) instead of the `backend` parameter's; `node_options`:
        rclpy Node options (context, parameter_overrides)."""
        # Backend settings (`franka.ip`, ...) are whatever the robot's config file holds.
        super().__init__("driver", automatically_declare_parameters_from_overrides=True, **node_options)
        for name, default in DEFAULTS.items():
            if not self.has_parameter(name):
                self.declare_parameter(name, default)
        check_ranges(self, RANGES, positive=POSITIVE, or_zero=RATES)
        robot_name = self._param("robot")
        if not robot_name:
            raise ValueError("parameter 'robot' is required: one of the registered robots")
        self.robot = get_robot(robot_name)  # UnknownRobotError lists the known robots
        tolerances = self._tolerance_defaults()
        self.backend = self._param("backend")
        unset = scene is None and not self._param("scene")
        if scene is None:
            scene_path = self._param("scene")
            scene = load_scene(scene_path) if scene_path else Scene(robot=self.robot.name)
        if scene.robot != self.robot.name:
            raise ValueError(f"scene {scene.source} is for robot {scene.robot!r}, but parameter 'robot' is "
                             f"{self.robot.name!r}")
        collision_margin = self._param("collision_margin_m")
        if not collision_margin > 0:
            raise ValueError(f"parameter 'collision_margin_m' is {collision_margin}; expected a positive "
                             "distance in metres")
        if hardware is not None:
            self.backend = hardware.backend
        elif self.backend == "sim":
            hardware = SimHardware(scene, seed=self._param("seed"))
        else:
            if self.backend not in backend_names():
                raise ValueError(f"parameter 'backend' is {self.backend!r}; expected one of "
                                 f"{', '.join(backend_names())}")
            prefix = f"{self.backend}."
            settings = {name[len(prefix):]: p.value for name, p in self._parameters.items() if name.startswith(prefix)}
            hardware = load_backend(self.backend)(self.robot, settings)
            if unset and isinstance(getattr(hardware, "scene", None), Scene):
                scene = hardware.scene  # a simulated cell (a proxy cell) is the cell its commands are checked in
        limits = SafetyLimits.of(self.robot, velocity_scale=self._param("velocity_scale"),
                                 watchdog_s=self._param("watchdog_s"))
        try:
            self.driver = Driver(hardware, control_rate_hz=self._param("control_rate_hz") or None, limits=limits,
                                 cell=scene, collision_margin=collision_margin, log=self.get_logger())
        except ValueError as error:
            raise ValueError(f"parameter 'control_rate_hz': {error}") from None
        self.hardware = hardware
        self.simulated = hardware.simulated
        # A real robot keeps time on the host's monotonic clock (hardware.now), which steps never;
        # ROS stamps are on the system clock, as the cameras' and every other node's are. One offset,
        # taken at start, turns one into the other (the twin's clock is /clock itself).
        self.ros_time_offset = 0.0 if self.simulated else time.time() - time.monotonic()
        self.actions = ControllerActions(self, self.driver, tolerances, GripperSettings(
            *(self._param(f"gripper_action.{name}") for name in (
                "goal_tolerance", "stall_velocity_threshold", "stall_timeout", "allow_stalling"))),
            self._param("controller_state_rate_hz"), self.ros_time_offset)
        # Each executing goal holds an executor thread; two more keep topics and services answered.
        self.executor_threads = 2 + self.actions.executing_limit
        self.state_rate = self._param("state_rate_hz") or self.robot.state_rate_hz
        self.real_time_factor = self._param("real_time_factor")
        self._rtf = 0.0
        self._renderer = None

        self.pub_joints = self.create_publisher(JointState, Topics.JOINT_STATES, qos.STATE)
        self.pub_diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.pub_tf = self.create_publisher(tf.TFMessage, Topics.TF, qos.TF)
        self.pub_tf_static = self.create_publisher(tf.TFMessage, Topics.TF_STATIC, qos.TF_STATIC)
        self.pub_description = self.create_publisher(String, Topics.ROBOT_DESCRIPTION, qos.LATCHED)
        self.tf_period = 1.0 / self._param("tf_rate_hz") if self._param("tf_rate_hz") > 0 else float("inf")
        self._next_tf = float("-inf")
        self.driver.start()
        if self.driver.link_fault:
            self._publish_diagnostics()
        self._publish_description()
        self.camera_names = self._camera_names() if self.simulated else ()
        if self.simulated:
            self.pub_clock = self.create_publisher(Clock, Topics.CLOCK, qos.CLOCK)
            self.pub_objects = self.create_publisher(PoseArray, Topics.OBJECT_POSES, qos.TWIN)
            self.pub_sizes = self.create_publisher(String, Topics.OBJECT_SIZES, qos.TWIN)
            # Built once: a driver's twin keeps its scene, and this goes out with every /tf.
            self._sizes_msg = convert.object_sizes_msg(self.hardware.twin.object_sizes())
        self.publish_depth = self._param("publish_depth")
        self.pub_images = {c: self.create_publisher(Image, Topics.camera_image(c), qos.SENSOR) for c in self.camera_names}
        self.pub_infos = {c: self.create_publisher(CameraInfo, Topics.camera_info(c), qos.SENSOR) for c in self.camera_names}
        self.pub_depths = {c: self.create_publisher(Image, Topics.camera_depth(c), qos.SENSOR)
                           for c in self.camera_names} if self.publish_depth else {}
        for group in self.robot.group_names:
            self.create_subscription(Float64MultiArray, Topics.position_commands(group),
                                     lambda msg, g=group: self._on_positions(g, msg, False), qos.COMMAND)
            self.create_subscription(Float64MultiArray, Topics.streaming_commands(group),
                                     lambda msg, g=group: self._on_positions(g, msg, True), qos.COMMAND)
            self.create_subscription(JointTrajectory, Topics.joint_trajectory(group),
                                     lambda msg, g=group: self._on_trajectory(g, msg), qos.COMMAND)
        for gripper in self.robot.grippers:
            self.create_subscription(Float64MultiArray, Topics.gripper_commands(gripper.name),
                                     lambda msg, g=gripper.name: self._on_gripper(g, msg), qos.COMMAND)
        self.create_subscription(Bool, Topics.ESTOP, self._on_estop, qos.LATCHED)
        self.create_service(Trigger, Services.RESET, self._on_reset)
        self.create_service(Trigger, Services.HOME, self._on_home)
        self.create_service(SetBool, Services.ENABLE, self._on_enable)

        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run_loop, name="control-loop", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"{self.robot.name} on backend {self.backend}: groups {', '.join(self.robot.group_names)}, "
            f"grippers {', '.join(g.name for g in self.robot.grippers) or 'none'}, cameras "
            f"{', '.join(self.camera_names) or 'none'}; control {self.driver.control_rate:g} Hz, "
            f"state {self.state_rate:g} Hz")

    @property
    def loop(self):
        """The driver's control loop (None while a real robot has not been reached)."""
        return self.driver.loop

    def _param(self, name):
        value = self.get_parameter(name).value
        return DEFAULTS[name] if value is None else value

    def _tolerance_defaults(self) -> ToleranceDefaults:
        """joint_trajectory_controller's constraints.* parameters (per joint: .trajectory, .goal)."""
        per_joint = {}
        for kind in ("trajectory", "goal"):
            ranges = {f"constraints.{j}.{kind}": JOINT_TOLERANCE for j in self.robot.joint_names}
            for name in ranges:
                if not self.has_parameter(name):
                    self.declare_parameter(name, 0.0)
            check_ranges(self, ranges)
            per_joint[kind] = {j: float(self.get_parameter(f"constraints.{j}.{kind}").value)
                               for j in self.robot.joint_names}
        return ToleranceDefaults(per_joint["trajectory"], per_joint["goal"],
                                 float(self._param("constraints.goal_time")),
                                 float(self._param("constraints.stopped_velocity_tolerance")))

    def _camera_names(self) -> tuple[str, ...]:
        twin = self.hardware.twin
        wanted = [c for c in self._param("cameras") if c]
        unknown = [c for c in wanted if c not in twin.camera_names]
        if unknown:
            raise ValueError(f"parameter 'cameras' names {unknown}; the scene's cameras are "
                             f"{', '.join(twin.camera_names)}")
        if self._param("camera_rate_hz") <= 0:
            return ()
        return tuple(wanted) if wanted else twin.camera_names

    # -- topics and services onto the driver: bad input is reported, never raised into the executor --
    def _report(self, error: Exception) -> None:
        self.get_logger().error(f"rejected: {error}")
        self._publish_diagnostics()

    def _on_positions(self, group: str, msg: Float64MultiArray, streaming: bool) -> None:
        what = Topics.streaming_commands(group) if streaming else Topics.position_commands(group)
        try:
            self.driver.command_positions(group, convert.float_array(msg), what=what, streaming=streaming)
        except CommandError as error:
            self._report(error)

    def _on_trajectory(self, group: str, msg: JointTrajectory) -> None:
        what = Topics.joint_trajectory(group)
        try:
            self.driver.accepting(what)  # a refusal says why before the message is looked at
            names, stamp, times, pos, vel, acc = convert.trajectory_arrays(msg)
            self.driver.command_trajectory(group, names, self.actions.to_robot_clock(stamp), times, pos, vel, acc, what=what)
        except CommandError as error:
            self._report(error)

    def _on_gripper(self, gripper: str, msg: Float64MultiArray) -> None:
        try:
            self.driver.command_gripper(gripper, convert.float_array(msg), what=Topics.gripper_commands(gripper))
        except CommandError as error:
            self._report(error)

    def _on_estop(self, msg: Bool) -> None:
        if msg.data and self.driver.estop():
            self._publish_diagnostics()

    def _on_enable(self, request: SetBool.Request, response: SetBool.Response):
        response.success, response.message = self.driver.enable(bool(request.data))
        self._publish_diagnostics()
        return response

    def _on_reset(self, request, response: Trigger.Response):
        response.success, response.message = self.driver.reset()
        return response

    def _on_home(self, request, response: Trigger.Response):
        response.success, response.message = self.driver.home()
        if not response.success:
            self._report(CommandError(response.message))
        return response

    # -- the loop thread ----------------------------------------------------------------------------
    def _run_loop(self) -> None:
        driver = self.driver
        tick = 1.0 / self.state_rate
        next_diag = 0.0
        try:
            if self.camera_names:
                from r2s2r.sim.render import BackgroundRenderer
                self._renderer = BackgroundRenderer(self.hardware.twin, self.camera_names, self.pub_depths,
                                                    self._publish_images)
            camera_period = 1.0 / self._param("camera_rate_hz") if self.camera_names else float("inf")
            next_camera = self.hardware.now if self.simulated else 0.0
            wall0, clock0 = time.monotonic(), self.hardware.now if self.simulated else 0.0
            rtf_window = (wall0, clock0)
            while not self._stopping.is_set() and self.context.ok():
                if not driver.connected:  # retry with backoff, publish the fault once a second
                    driver.tick(tick, sleep=self._stopping.wait)
                    if driver.connected or time.monotonic() >= next_diag:
                        next_diag = time.monotonic() + 1.0
                        self._publish_diagnostics()
                    continue
                poses = []
                if self.simulated:
                    with driver.lock:  # the twin's state between the cycles and the frame handed over
                        sample = driver.tick(tick)
                        now = self.hardware.now
                        if sample is not None and self._renderer is not None:
                            if now + camera_period < next_camera:  # the scene was reset: time restarted
                                next_camera = now
                            if now >= next_camera:
                                next_camera = max(next_camera + camera_period, now)
                                self._renderer.offer()  # rendered and published on the render thread
                                poses = list(self.hardware.twin.object_poses().values())
                else:  # cycles paced by the host clock; the lock is taken for each cycle alone
                    sample = driver.tick(tick)
                    now = self.hardware.now
                if sample is None:  # the link was just lost
                    self._publish_diagnostics()
                    continue
                if self.simulated:
                    self.pub_clock.publish(convert.clock_msg(now))
                self.pub_joints.publish(convert.joint_state_msg(sample, self.ros_time_offset))
                self.actions.update(now, sample)
                if self.tf_period < float("inf") and (now >= self._next_tf or now + self.tf_period < self._next_tf):
                    self._next_tf = now + self.tf_period
                    self._publish_tf(now, sample)
                if poses:
                    self.pub_objects.publish(convert.pose_array_msg(poses, now, WORLD))
                wall = time.monotonic()
                if wall >= next_diag:
                    next_diag = wall + 1.0
                    clock = now if self.simulated else wall
                    self._rtf = (clock - rtf_window[1]) / max(wall - rtf_window[0], 1e-9)
                    rtf_window = (wall, clock)
                    self._publish_diagnostics()
                if self.simulated and self.real_time_factor > 0:
                    ahead = (now - clock0) / self.real_time_factor - (time.monotonic() - wall0)
                    if ahead > 0.5:  # the clock jumped forward (a reset onto a later time): pace on from here
                        wall0, clock0 = time.monotonic(), now
                    elif ahead > 0:
                        time.sleep(ahead)
                    elif ahead < -0.5:  # fell behind by more than half a second: do not try to catch up
                        wall0, clock0 = time.monotonic(), now
        except Exception as exc:  # the driver itself failed: say so and stop commanding
            if not self.context.ok():
                return  # shutting down: the publishers are gone, nothing failed
            driver.fault = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"control loop stopped: {driver.fault}")
            self._publish_diagnostics()
        finally:
            if self._renderer is not None:
                self._renderer.close()

    def _publish_description(self) -> None:
        """robot_description (the URDF) and /tf_static (the URDF's fixed joints, the robot's mount
        in the world, and the twin's cameras), latched, as robot_state_publisher publishes them."""
        self.pub_description.publish(convert.string_msg(Path(self.robot.urdf_path).read_text()))
        static = fixed_transforms(self.robot) + [mount_transform(self.robot, WORLD)]
        if self.simulated:
            static += camera_transforms(self.hardware.calibrated_view())
        stamp = self.hardware.now + self.ros_time_offset  # a real robot's now is the host's monotonic clock
        self.pub_tf_static.publish(tf.tf_message(static, stamp if np.isfinite(stamp) else 0.0))

    def _publish_tf(self, now: float, sample) -> None:
        """The moving joints' transforms at `sample`, and the twin's objects and fixtures (bowls,
        boxes, doors) in the world, with the objects' sizes: what a perception stack would give
        the policy."""
        moving = moving_transforms(self.robot, dict(zip(sample.names, sample.position)))
        if self.simulated:
            with self.driver.lock:
                poses = self.hardware.twin.object_poses() | self.hardware.twin.fixture_poses()
            moving += [Transform(WORLD, name, pos, np.array([q[1], q[2], q[3], q[0]]))
                       for name, (pos, q) in poses.items()]
            # With every pose update: a policy that forgets what it saw at a reset has them again at once.
            self.pub_sizes.publish(self._sizes_msg)
        self.pub_tf.publish(tf.tf_message(moving, now + self.ros_time_offset))

    def _publish_images(self, now: float, images) -> None:
        """Frames of the twin's state at `now` (its sim time: the capture time)."""
        if not self.context.ok():
            return
        twin = self.hardware.twin
        try:
            for cam, rgb, depth in images:
                rgb = self.hardware.camera_effects(cam, rgb)
                frame = camera_optical_frame(cam)
                self.pub_images[cam].publish(convert.image_msg(rgb, "rgb8", now, frame))
                fx, fy, cx, cy = twin.camera_intrinsics(cam)
                self.pub_infos[cam].publish(
                    convert.camera_info_msg(rgb.shape[1], rgb.shape[0], fx, fy, cx, cy, now, frame))
                if depth is not None:
                    self.pub_depths[cam].publish(convert.image_msg(depth, "32FC1", now, frame))
        except Exception:  # the context went away between the check and the publish
            if self.context.ok():
                raise

    def _publish_diagnostics(self) -> None:
        if not self.context.ok():
            return
        extra = {"real_time_factor": f"{self._rtf:.3f}"}
        if self._renderer is not None:  # frames the cameras could not keep up with, and why one failed
            extra["camera_frames_skipped"] = self._renderer.skipped
            if self._renderer.error:
                extra["camera_error"] = self._renderer.error
        snap = self.driver.snapshot(extra)
        status = convert.diagnostic_status(f"r2s2r/driver/{self.robot.name}", self.backend, LEVELS[snap.level],
                                           snap.message, snap.values)
        try:
            self.pub_diag.publish(convert.diagnostic_array([status], snap.time + self.ros_time_offset))
        except Exception:  # the context went away between the check and the publish
            if self.context.ok():
                raise

    def close(self) -> None:
        self.actions.close()
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        try:
            self.driver.shutdown()
        except Exception as exc:
            self.get_logger().warning(f"disconnect: {exc}")


# A camera's body frame (x forward, y left, z up) from its optical frame (z forward, x right, y down).
OPTICAL_TO_LINK = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])


def camera_transforms(twin) -> list[Transform]:
    """Each of the twin's cameras as <camera>_link on the body it is fixed to (the world for a
    cell camera), and <camera>_optical_frame on it, where the twin renders from now."""
    from scipy.spatial.transform import Rotation

    from r2s2r.camera.geometry import MUJOCO_TO_OPTICAL
    from r2s2r.contract.frames import camera_frame
    m, d = twin.model, twin.data
    out = []
    for i in range(m.ncam):
        name = m.camera(i).name
        body = int(m.cam_bodyid[i])
        optical = d.cam_xmat[i].reshape(3, 3) @ MUJOCO_TO_OPTICAL  # in the world
        link = optical @ OPTICAL_TO_LINK
        parent_rotation = d.xmat[body].reshape(3, 3)
        position = parent_rotation.T @ (d.cam_xpos[i] - d.xpos[body])
        parent = WORLD if body == 0 else m.body(body).name
        out.append(Transform(parent, camera_frame(name), position,
                             Rotation.from_matrix(parent_rotation.T @ link).as_quat()))
        out.append(Transform(camera_frame(name), camera_optical_frame(name), np.zeros(3),
                             Rotation.from_matrix(OPTICAL_TO_LINK.T).as_quat()))
    return out


def main(args=None) -> int:
    return run(DriverNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
