"""driver_node: one robot behind the identical interface, whatever the backend.

`backend: sim` is the MuJoCo twin; `franka`, `xarm`, `flexiv`, `rby1`, `aloha` drive real arms
through their vendor SDKs. The ROS side is this one file for all of them.

Parameters (config/robots/<robot>.yaml sets them, a stack may override):
  robot            registered robot name (required)
  backend          sim | franka | xarm | flexiv | rby1 | aloha
  <backend>.<key>  the backend's connection settings (ip, serial number, port, ...)
  scene            scene YAML: the twin's, and on every backend the cell the collision check
                   models (default: the robot on its table, no objects)
  collision_margin_m  how close (m) the arm may come to the cell's fixed geometry and to itself
  seed             twin seed
  watchdog_s       streaming targets older than this: brake and hold (0 disables)
  velocity_scale   fraction of the datasheet velocity limits the safety filter allows
  control_rate_hz  command cycle rate (default: the robot's)
  state_rate_hz    joint_states rate (default: the robot's)
  camera_rate_hz   image rate of the twin's cameras, 0 disables them
  cameras          camera names to publish (default: all of the scene's)
  publish_depth    also publish cameras/<name>/depth/image_raw (32FC1, metres)
  real_time_factor 1.0 paces the twin to the wall clock; 0 runs as fast as it can
"""


from __future__ import annotations

import collections
import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseArray
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory

from r2s2r.contract import CommandError, Services, Topics
from r2s2r.contract import convert, qos
from r2s2r.contract.frames import WORLD, camera_optical_frame
from r2s2r.hardware.backends import backend_names, load_backend
from r2s2r.hardware.base import HardwareError, Lifecycle, LinkLost
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.safety import SafetyLimits
from r2s2r.hardware.sim import SimHardware
from r2s2r.nodes.runtime import run
from r2s2r.robots import get_robot
from r2s2r.sim.collision import DEFAULT_MARGIN_M
from r2s2r.sim.scene import Scene, load_scene

# A trajectory stamped further ahead than this is almost surely on another clock (use_sim_time).
MAX_FUTURE_STAMP_S = 10.0
# Moves the driver plans itself (~/home) use this fraction of the velocity limits.
HOMING_SPEED = 0.3
RECONNECT_BACKOFF_S = (0.1, 2.0)  # first retry, longest wait between retries

DEFAULTS = {
    "robot": "", "backend": "sim", "scene": "", "seed": 0, "control_rate_hz": 0.0, "state_rate_hz": 0.0,
    "camera_rate_hz": 30.0, "cameras": [""], "publish_depth": False, "real_time_factor": 1.0,
    "watchdog_s": 0.5, "velocity_scale": 1.0, "collision_margin_m": DEFAULT_MARGIN_M,
}


# Numeric parameters: (lowest, highest, what is expected); POSITIVE ones may not be 0 either.
RANGES = {
    "control_rate_hz": (0.0, 10000.0, "0 (the robot's own rate) or a rate up to 10 kHz"),
    "state_rate_hz": (0.0, 10000.0, "0 (the robot's own rate) or a rate up to 10 kHz"),
    "camera_rate_hz": (0.0, 1000.0, "0 (no twin cameras) or a rate up to 1 kHz"),
    "real_time_factor": (0.0, 1000.0, "0 (as fast as the CPU allows) or a factor of the wall clock up to 1000"),
    "watchdog_s": (0.0, 60.0, "a positive time up to 60 s"),
    "velocity_scale": (0.0, 1.0, "a share of the datasheet velocities in (0, 1]"),
    "seed": (0, 2**32 - 1, "an integer from 0 to 2^32 - 1"),
}
POSITIVE = {"watchdog_s", "velocity_scale"}


class DriverNode(Node):
    def __init__(self, scene: Scene | None = None, **node_options):
        """`scene`: the twin's scene as an object (the evaluation engine's perturbed scenes),
        instead of the `scene` parameter; `node_options`: rclpy Node options (context, parameter_overrides)."""
        # Backend settings (`franka.ip`, ...) are whatever the robot's config file holds.
        super().__init__("driver", automatically_declare_parameters_from_overrides=True, **node_options)
        for name, default in DEFAULTS.items():
            if not self.has_parameter(name):
                self.declare_parameter(name, default)
        self._check_ranges()
        robot_name = self._param("robot")
        if not robot_name:
            raise ValueError("parameter 'robot' is required: one of the registered robots")
        self.robot = get_robot(robot_name)  # UnknownRobotError lists the known robots
        self.backend = self._param("backend")
        if scene is None:
            scene_path = self._param("scene")
            scene = load_scene(scene_path) if scene_path else Scene(robot=self.robot.name)
        if scene.robot != self.robot.name:
            raise ValueError(f"scene {scene.source} is for robot {scene.robot!r}, but parameter 'robot' is "
                             f"{self.robot.name!r}")
        self.cell = scene  # what the collision check models, on every backend
        self.collision_margin = self._param("collision_margin_m")
        if not self.collision_margin > 0:
            raise ValueError(f"parameter 'collision_margin_m' is {self.collision_margin}; expected a positive "
                             "distance in metres")
        if self.backend == "sim":
            self.hardware = SimHardware(scene, seed=self._param("seed"))
        else:
            if self.backend not in backend_names():
                raise ValueError(f"parameter 'backend' is {self.backend!r}; expected one of "
                                 f"{', '.join(backend_names())}")
            prefix = f"{self.backend}."
            settings = {name[len(prefix):]: p.value for name, p in self._parameters.items() if name.startswith(prefix)}
            self.hardware = load_backend(self.backend)(self.robot, settings)
        self.simulated = isinstance(self.hardware, SimHardware)
        self.limits = SafetyLimits.of(self.robot, velocity_scale=self._param("velocity_scale"),
                                      watchdog_s=self._param("watchdog_s"))
        self.control_rate = self._param("control_rate_hz") or self.robot.control_rate_hz
        required = self.hardware.required_control_rate_hz
        if required is not None and abs(self.control_rate - required) > 1e-6:
            raise ValueError(f"parameter 'control_rate_hz' is {self.control_rate:g}; backend {self.backend} "
                             f"plays one setpoint per robot cycle and needs {required:g}")
        self.state_rate = self._param("state_rate_hz") or self.robot.state_rate_hz
        self.real_time_factor = self._param("real_time_factor")
        self.loop: ControlLoop | None = None
        self._link_fault = ""
        self._fault = ""
        self._estopped = False
        self._estop_time = float("nan")  # robot time the estop latched
        self._enabled = True
        self._lock = threading.Lock()  # serialises the control loop with the services
        self._rtf = 0.0
        self._link_losses = 0
        self._periods = collections.deque(maxlen=2000)  # real hardware: control-cycle periods, seconds
        self._last_cycle_start = None
        self._next_cycle = None  # real hardware: when the next control cycle is due (host clock)
        self._periods_lock = threading.Lock()

        self.pub_joints = self.create_publisher(JointState, Topics.JOINT_STATES, qos.STATE)
        self.pub_diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos.DIAGNOSTICS)
        self._connect_first()
        self.camera_names = self._camera_names() if self.simulated else ()
        if self.simulated:
            self.pub_clock = self.create_publisher(Clock, Topics.CLOCK, qos.CLOCK)
            self.pub_objects = self.create_publisher(PoseArray, Topics.OBJECT_POSES, qos.TWIN)
        self.publish_depth = self._param("publish_depth")
        self.pub_images = {c: self.create_publisher(Image, Topics.camera_image(c), qos.SENSOR) for c in self.camera_names}
        self.pub_infos = {c: self.create_publisher(CameraInfo, Topics.camera_info(c), qos.SENSOR) for c in self.camera_names}
        self.pub_depths = {c: self.create_publisher(Image, Topics.camera_depth(c), qos.SENSOR)
                           for c in self.camera_names} if self.publish_depth else {}
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
        self._thread = threading.Thread(target=self._run_loop, name="control-loop", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"{self.robot.name} on backend {self.backend}: groups {', '.join(self.robot.group_names)}, "
            f"grippers {', '.join(g.name for g in self.robot.grippers) or 'none'}, cameras "
            f"{', '.join(self.camera_names) or 'none'}; control {self.control_rate:g} Hz, state {self.state_rate:g} Hz")

    def _param(self, name):
        value = self.get_parameter(name).value
        return DEFAULTS[name] if value is None else value

    def _check_ranges(self) -> None:
        """Every numeric parameter within its range, or the node does not start (and says which)."""
        for name, (low, high, meaning) in RANGES.items():
            value = self._param(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high \
                    or (name in POSITIVE and value == 0):
                raise ValueError(f"parameter {name!r} is {value!r}; expected {meaning}")

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

    # -- connection ------------------------------------------------------------------------------
    def _connect_first(self) -> None:
        """The twin always connects; a real robot that is not there yet is retried by the loop."""
        try:
            self._connect()
        except HardwareError as error:
            if self.simulated:
                raise
            self._link_fault = f"not connected: {error}"
            self.get_logger().error(f"{self.backend}: {self._link_fault}; retrying")
            self._publish_diagnostics()

    def _connect(self) -> None:
        self.hardware.connect()
        self.hardware.activate()
        if self.loop is None:
            self.loop = ControlLoop(self.hardware, self.control_rate, self.limits, cell=self.cell,
                                    collision_margin=self.collision_margin)
            if self._estopped:  # latched while the robot could not be reached
                self.loop.estop()
        else:
            self.loop.hold_here()  # commands received while the link was down are dropped
        self._link_fault = ""

    def _on_hardware_fault(self, error: Exception) -> None:
        self._link_losses += 1
        self._last_cycle_start = None  # the gap until reconnection is not a cycle period
        self._next_cycle = None
        self._link_fault = f"link lost: {error}" if isinstance(error, LinkLost) else f"fault: {error}"
        self.hardware.state = Lifecycle.ERROR
        self.get_logger().error(f"{self.backend}: {self._link_fault}; holding, reconnecting")
        self._publish_diagnostics()
        try:
            self.hardware.disconnect()
        except Exception as exc:  # the link is already gone; closing it may complain
            self.get_logger().debug(f"disconnect after link loss: {exc}")

    # -- command callbacks: bad input is reported, never raised into the executor ----------------
    def _report(self, error: Exception) -> None:
        self.get_logger().error(f"rejected: {error}")
        self._publish_diagnostics()

    def _accepting(self, what: str) -> bool:
        reason = None
        if self.loop is None or self._link_fault:
            reason = f"the robot is not connected ({self._link_fault})"
        elif self._estopped:
            reason = "estop is latched (clear it with ~/enable)"
        elif not self._enabled:
            reason = "output is disabled (~/enable)"
        if reason is not None:
            error = CommandError(f"{what}: dropped, {reason}")
            if self.loop is not None:  # a robot unreachable since start-up has no loop yet
                self.loop.controller.stats.rejected["not_accepting"] += 1
                self.loop.controller.stats.last_error = str(error)
            self._report(error)
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
            self._estop_time = self.hardware.now
            if self.loop is not None:
                self.loop.estop()
            self.get_logger().warning("estop: braking to a stop and holding until ~/enable is called with true")
            self._publish_diagnostics()

    def _on_enable(self, request: SetBool.Request, response: SetBool.Response):
        if self.loop is None or self._link_fault:
            response.success = False
            response.message = f"the robot is not connected ({self._link_fault})"
            return response
        with self._lock:
            try:
                if request.data:
                    self.hardware.activate()
                    self.loop.enable()  # brakes to a stop where it is, then takes commands
                    self._estopped = False
                else:
                    self.loop.controller.brake()
                self._enabled = bool(request.data)
                response.success = True
                response.message = "enabled" if request.data else "disabled: braking and holding"
            except HardwareError as error:
                response.success = False
                response.message = str(error)
        self._publish_diagnostics()
        return response

    def _on_reset(self, request, response: Trigger.Response):
        if self.loop is None or self._link_fault:
            response.success, response.message = False, f"the robot is not connected ({self._link_fault})"
            return response
        if not self.simulated:  # a real robot is never teleported: clear faults, then drive home
            try:
                with self._lock:
                    self.hardware.reset()
                    self.loop.hold_here()  # from where it stands, not from a setpoint before the fault
            except HardwareError as error:
                response.success, response.message = False, str(error)
                return response
            return self._on_home(request, response)
        with self._lock:
            self.hardware.reset()
            self.loop.hold_here()
        response.success = True
        response.message = f"scene reset at t={self.hardware.now:.3f} s"
        return response

    def _on_home(self, request, response: Trigger.Response):
        if not self._accepting("~/home"):
            response.success, response.message = False, "not accepting commands (see diagnostics)"
            return response
        try:
            current = self.loop.positions()
            for group in self.robot.groups:
                index = [self.robot.joint_names.index(j) for j in group.joints]
                home = np.array([self.robot.home[j] for j in group.joints])
                duration = max(float(np.max(np.abs(home - current[index]) /
                                            (HOMING_SPEED * self.limits.velocity[index]))), 0.5)
                self.loop.controller.command_trajectory(group.name, group.joints, 0.0, [duration], [home],
                                                        None, None, self.hardware.now)
            response.success = True
            response.message = "moving home"
        except (CommandError, HardwareError) as error:
            response.success = False
            response.message = str(error)
        return response

    # -- the loop thread ----------------------------------------------------------------------------
    def _run_loop(self) -> None:
        renderer = None
        tick = 1.0 / self.state_rate
        next_diag = 0.0
        backoff = RECONNECT_BACKOFF_S[0]
        try:
            if self.camera_names:
                from r2s2r.sim.render import BackgroundRenderer
                renderer = self._renderer = BackgroundRenderer(self.hardware.twin, self.camera_names,
                                                               self.pub_depths, self._publish_images)
            camera_period = 1.0 / self._param("camera_rate_hz") if self.camera_names else float("inf")
            next_camera = self.hardware.now if self.simulated else 0.0
            wall0, clock0 = time.monotonic(), self.hardware.now if self.simulated else 0.0
            rtf_window = (wall0, clock0)
            while self._running and self.context.ok():
                if self._link_fault:  # not connected: retry with backoff, publish the fault
                    time.sleep(backoff)
                    try:
                        with self._lock:
                            self._connect()
                        backoff = RECONNECT_BACKOFF_S[0]
                        self.get_logger().info(f"{self.backend}: connected; holding the measured position")
                        self._publish_diagnostics()
                    except HardwareError as error:
                        backoff = min(backoff * 2, RECONNECT_BACKOFF_S[1])
                        self._link_fault = f"not connected: {error}"
                        if time.monotonic() >= next_diag:
                            next_diag = time.monotonic() + 1.0
                            self._publish_diagnostics()
                    continue
                poses = []
                try:
                    if self.simulated:
                        with self._lock:
                            self.loop.run_until(self.hardware.now + tick)
                            now = self.hardware.now
                            sample = self.loop.sample()
                            if now + camera_period < next_camera:  # the scene was reset: time restarted
                                next_camera = now
                            if renderer is not None and now >= next_camera:
                                next_camera = max(next_camera + camera_period, now)
                                renderer.offer()  # rendered and published on the render thread
                                poses = list(self.hardware.twin.object_poses().values())
                    else:
                        sample = self._run_real_cycles(tick)
                        now = self.hardware.now
                except HardwareError as error:  # LinkLost, or a fault the backend cannot ride out
                    self._on_hardware_fault(error)
                    continue
                if self.simulated:
                    self.pub_clock.publish(convert.clock_msg(now))
                self.pub_joints.publish(convert.joint_state_msg(sample))
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
                    if ahead > 0:
                        time.sleep(ahead)
                    elif ahead < -0.5:  # fell behind by more than half a second: do not try to catch up
                        wall0, clock0 = time.monotonic(), now
        except Exception as exc:  # the driver itself failed: say so and stop commanding
            if not self.context.ok():
                return  # shutting down: the publishers are gone, nothing failed
            self._fault = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"control loop stopped: {self._fault}")
            self._publish_diagnostics()
        finally:
            if renderer is not None:
                renderer.close()

    def _run_real_cycles(self, tick: float):
        """Control cycles at the control rate for one state tick, on a schedule of the host clock
        that carries over from tick to tick (a late cycle is caught up once, never in a burst)."""
        dt = 1.0 / self.control_rate
        if self._next_cycle is None:
            self._next_cycle = time.monotonic()
        end = self._next_cycle + tick
        while self._next_cycle < end - 1e-9:
            now = time.monotonic()
            if self._next_cycle > now:
                time.sleep(self._next_cycle - now)
            elif now - self._next_cycle > 10 * dt:  # late by many cycles: resynchronise
                self._next_cycle = end = now
            start = time.monotonic()
            if self._last_cycle_start is not None:
                with self._periods_lock:
                    self._periods.append(start - self._last_cycle_start)
            self._last_cycle_start = start
            with self._lock:
                self.loop.cycle()
            self._next_cycle += dt
        return self.loop.last_sample

    def _publish_images(self, now: float, images) -> None:
        """Frames of the twin's state at `now` (its sim time: the capture time)."""
        if not self.context.ok():
            return
        twin = self.hardware.twin
        try:
            for cam, rgb, depth in images:
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
        level, message = convert.OK, "running"
        stats = self.loop.controller.stats if self.loop is not None else None
        if self._fault:
            level, message = convert.ERROR, f"fault: {self._fault}"
        elif self._link_fault:
            level, message = convert.ERROR, self._link_fault
        elif self._estopped:
            level, message = convert.WARN, "estop latched: holding position"
        elif not self._enabled:
            level, message = convert.WARN, "disabled: holding position"
        elif stats is not None and stats.last_error:
            level, message = convert.WARN, f"last command rejected: {stats.last_error}"
        elif stats is not None and stats.last_stop_short:
            level, message = convert.WARN, f"last motion stopped short: {stats.last_stop_short}"
        values = {"robot": self.robot.name, **self.hardware.describe(),
                  "mode": "estop" if self._estopped else ("enabled" if self._enabled else "disabled"),
                  "estop_latched_at": f"{self._estop_time:.6f}" if self._estopped else "",
                  "link": "lost" if self._link_fault else "up", "link_losses": self._link_losses,
                  "time": f"{self.hardware.now:.3f}", "real_time_factor": f"{self._rtf:.3f}"}
        renderer = getattr(self, "_renderer", None)
        if renderer is not None:  # frames the cameras could not keep up with, and why one failed
            values["camera_frames_skipped"] = renderer.skipped
            if renderer.error:
                values["camera_error"] = renderer.error
        if stats is not None:
            safety = self.loop.safety.report()
            values.update({
                "commands_accepted": sum(stats.accepted.values()), "commands_rejected": sum(stats.rejected.values()),
                "last_rejection": stats.last_error, "watchdog_stops": stats.watchdog_stops,
                "stopped_short": stats.stopped_short, "last_stop_short": stats.last_stop_short,
                "last_command_at": f"{stats.last_accepted_time:.6f}",
                "safety_interventions": sum(safety.values()),
                "active_trajectories": ",".join(self.loop.controller.active_trajectories()),
            })
            values.update({f"rejected.{k}": v for k, v in stats.rejected.items()})
            with self._periods_lock:
                periods = np.array(self._periods) * 1e6
            if periods.size:  # how steadily the control loop runs on this host
                values.update({"cycle_period_us.p50": f"{np.percentile(periods, 50):.0f}",
                               "cycle_period_us.p99": f"{np.percentile(periods, 99):.0f}",
                               "cycle_period_us.max": f"{periods.max():.0f}"})
            values.update({f"safety.{k}": v for k, v in safety.items()})
        status = convert.diagnostic_status(f"r2s2r/driver/{self.robot.name}", self.backend, level, message, values)
        try:
            self.pub_diag.publish(convert.diagnostic_array([status], self.hardware.now))
        except Exception:  # the context went away between the check and the publish
            if self.context.ok():
                raise

    def close(self) -> None:
        self._running = False
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        try:
            self.hardware.disconnect()
        except Exception as exc:
            self.get_logger().warning(f"disconnect: {exc}")


def main(args=None) -> int:
    return run(DriverNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
