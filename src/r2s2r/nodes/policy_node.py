"""policy_node: a Policy in front of any driver_node (twin or real), over the identical interface.

Parameters:
  robot                 registered robot name (required): names the joints, groups and grippers
  policy                a policy URI (torch:PATH, torchscript:PATH, export:PATH, onnx:PATH, lerobot:DIR,
                        openpi://HOST:PORT, scripted:NAME[?KEY=VALUE&...]) or a policy config YAML (required)
  policy_params         a YAML mapping merged over the policy's params (e.g. "{goal: {arm: [...]}}")
  task                  task text for policies that take it
  command_rate_hz       rate of the published commands (chunks are interpolated to it)
  sync_tolerance_s      how far apart joint states and images may be to form one observation
  autostart             start acting without a call to ~/start
  privileged_poses      fill the observation's object poses from the world-frame transforms on /tf
                        (the twin's driver publishes its objects and fixtures there), and their
                        sizes from twin/object_sizes: for scripted experts and policies trained on
                        privileged state, in front of the twin; ~/start and ~/reset forget them
                        until /tf (and, for a policy whose rules perceive sizes, twin/object_sizes)
                        gives them again
  max_observation_age_s, deadline_s, on_deadline_miss, ensemble_coefficient, replan_steps,
  max_action_age_s      override the policy config's `runtime` settings
Set use_sim_time with the twin, so observation ages are measured on the twin's clock.

Subscribes joint_states and cameras/<name>/image_raw (the policy's cameras), and /tf and
twin/object_sizes with privileged_poses; publishes
<group>_position_controller/commands and <gripper>_controller/commands; serves ~/start,
~/stop and ~/reset (std_srvs/Trigger), in any order, each answering what it did; reports
inference latency, deadline misses and staleness on diagnostics once a second. Commands go out
only while started and once joint states (and images) have formed an observation.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import yaml
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger

from r2s2r.contract import Topics
from r2s2r.contract import convert, qos
from r2s2r.contract.frames import WORLD
from r2s2r.nodes.runtime import check_ranges, run
from r2s2r.policy import (JointLayout, ObservationAssembler, PolicyError, PolicyMetadata, PolicyRuntime,
                          RuntimeConfig, load_policy, read_policy_config)
from r2s2r.robots import get_robot

CLOCK_MISMATCH_S = 60.0  # an observation this old is on another clock, not late
RANGES = {
    "command_rate_hz": (0.1, 10000.0, "a rate in Hz from 0.1 up to 10 kHz"),  # 1/rate is a timer's period
    "sync_tolerance_s": (0.0, 60.0, "a time in seconds from 0 to 60 that joint states and images may lie apart"),
}

RUNTIME_PARAMETERS = {
    "max_observation_age_s": Parameter.Type.DOUBLE, "deadline_s": Parameter.Type.DOUBLE,
    "on_deadline_miss": Parameter.Type.STRING, "ensemble_coefficient": Parameter.Type.DOUBLE,
    "replan_steps": Parameter.Type.INTEGER, "max_action_age_s": Parameter.Type.DOUBLE,
}


class WithObjectPoses:
    """An observation assembler with privileged object poses (name -> (position, quaternion
    wxyz), from `poses()`) and sizes (name -> extents, from `sizes()`) added to each observation
    it forms; the objects in `needs_sizes` (the policy's observation.object_sizes) must have one."""

    def __init__(self, assembler: ObservationAssembler, poses: Callable[[], dict],
                 sizes: Callable[[], dict] = dict, needs_sizes: tuple[str, ...] = ()):
        self._assembler = assembler
        self._poses, self._sizes, self.needs_sizes = poses, sizes, needs_sizes

    def latest(self):
        """The observation with the poses and sizes; None until there are poses and the sizes
        needed (after a reset, say)."""
        observation = self._assembler.latest()
        poses = self._poses()
        if observation is None or not poses:
            return None
        sizes = self._sizes()
        if any(name not in sizes for name in self.needs_sizes):
            return None
        return replace(observation, objects=poses, object_sizes=sizes)

    def __getattr__(self, name):
        return getattr(self._assembler, name)


class PolicyNode(Node):
    def __init__(self, **node_options):
        super().__init__("policy", **node_options)  # options: a test's context and parameter_overrides
        # Its callbacks share the node's default (mutually exclusive) group, and inference runs in
        # the runtime's own thread: a second executor thread would only add rclpy's overhead.
        self.executor_threads = 1
        self.declare_parameters("", [
            ("robot", Parameter.Type.STRING), ("policy", Parameter.Type.STRING), ("policy_params", ""),
            ("task", ""), ("command_rate_hz", 100.0), ("sync_tolerance_s", 0.05), ("autostart", False),
            ("privileged_poses", False),
            *RUNTIME_PARAMETERS.items(),
        ])
        robot_name, source = self._param("robot", ""), self._param("policy", "")
        if not robot_name or not source:
            raise ValueError("parameters 'robot' (a registered robot) and 'policy' (a policy URI or config file) "
                             "are required")
        check_ranges(self, RANGES)  # NaN too; before the policy loads
        overrides = {k: v for k in RUNTIME_PARAMETERS if (v := self._param(k, None)) is not None}
        RuntimeConfig.from_dict(overrides, f"{self.get_name()} parameters")  # an error names the parameter
        self.robot = get_robot(robot_name)
        config = read_policy_config(source)
        params = self._policy_params()
        self.policy = load_policy(config, PolicyMetadata.for_robot(self.robot), params)
        self.runtime = PolicyRuntime(self.policy, RuntimeConfig.from_dict({**config.runtime, **overrides},
                                                                          f"{config.source}: runtime"))
        metadata = self.policy.metadata
        self.assembler = ObservationAssembler(metadata.observation, JointLayout.from_robot(self.robot),
                                              self._param("sync_tolerance_s", 0.05), self._param("task", "") or None)
        self.source = config.uri
        self.running = False
        self._observation_error = ""
        self._reason = ""  # why the last command held ('' while following the policy)

        self.create_subscription(JointState, Topics.JOINT_STATES, self._on_joints, qos.STATE)
        self._poses: dict = {}  # privileged object poses from /tf, forgotten at every reset
        self._sizes: dict = {}  # and their sizes, from twin/object_sizes
        if self._param("privileged_poses", False):
            from r2s2r.contract import tf
            self.create_subscription(tf.TFMessage, Topics.TF, self._on_tf, qos.TF)
            self.create_subscription(String, Topics.OBJECT_SIZES, self._on_sizes, qos.TWIN)
            self.assembler = WithObjectPoses(self.assembler, lambda: self._poses, lambda: self._sizes,
                                             metadata.observation.object_sizes)
        for camera in metadata.observation.cameras:
            self.create_subscription(Image, Topics.camera_image(camera),
                                     lambda msg, c=camera: self._on_image(c, msg), qos.SENSOR)
        self.pub_groups = {g: self.create_publisher(Float64MultiArray, Topics.streaming_commands(g), qos.COMMAND)
                           for g in metadata.action.joints}
        self.pub_grippers = {g: self.create_publisher(Float64MultiArray, Topics.gripper_commands(g), qos.COMMAND)
                             for g in metadata.action.grippers}
        self.pub_diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.create_service(Trigger, "~/start", self._on_start)
        self.create_service(Trigger, "~/stop", self._on_stop)
        self.create_service(Trigger, "~/reset", self._on_reset)
        rate = self._param("command_rate_hz", 100.0)
        self.create_timer(1.0 / rate, self._tick)
        self.create_timer(1.0, self._publish_diagnostics)
        if self._param("autostart", False):
            started, message = self._start()
            (self.get_logger().info if started else self.get_logger().error)(f"autostart: {message}")
        self.get_logger().info(
            f"policy {self.source} for {self.robot.name}: observes {metadata.observation.describe()}"
            f"{', cameras ' + ', '.join(metadata.observation.cameras) if metadata.observation.cameras else ''}; "
            f"commands {metadata.action.describe()} at {rate:g} Hz from chunks of {metadata.chunk_length} at "
            f"{metadata.control_rate_hz:g} Hz; {'running' if self.running else 'waiting for ~/start'}")

    def _param(self, name, default):
        try:
            value = self.get_parameter(name).value
        except ParameterUninitializedException:
            return default
        return default if value is None else value

    def _policy_params(self) -> dict:
        text = self._param("policy_params", "")
        if not text:
            return {}
        params = yaml.safe_load(text)
        if not isinstance(params, dict):
            raise ValueError(f"parameter 'policy_params' is {text!r}; expected a YAML mapping, e.g. "
                             "\"{goal: {arm: [0, 0, 0, -2, 0, 2, 0.8]}}\"")
        return params

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    # -- inputs: bad data is reported, never raised into the executor ------------------------------
    def _observation_failed(self, error: Exception | str) -> None:
        if str(error) != self._observation_error:
            self._observation_error = str(error)
            self.get_logger().error(f"observation rejected: {error}")

    def _on_joints(self, msg: JointState) -> None:
        try:
            if len(msg.position) != len(msg.name):
                raise PolicyError(f"{Topics.JOINT_STATES} has {len(msg.name)} names and {len(msg.position)} "
                                  "positions; expected one position per name")
            self.assembler.add_joints(convert.joint_sample(msg))  # its errors name joint_states
        except PolicyError as error:
            self._observation_failed(error)

    def _on_tf(self, msg) -> None:
        from r2s2r.contract import tf
        # One assignment: a tick reads a whole dict, never a half-merged one.
        self._poses = {**self._poses, **tf.poses_in(msg, WORLD)}

    def _on_sizes(self, msg: String) -> None:
        try:
            self._sizes = {**self._sizes, **convert.object_sizes(msg)}
        except ValueError as error:
            self._observation_failed(f"{Topics.OBJECT_SIZES}: {error}")

    def _on_image(self, camera: str, msg: Image) -> None:
        try:
            if msg.encoding not in ("rgb8", "bgr8"):
                raise PolicyError(f"encoding {msg.encoding!r}; expected rgb8 or bgr8")
            image = convert.image_array(msg)
            self.assembler.add_image(camera, convert.from_time(msg.header.stamp),
                                     image[..., ::-1] if msg.encoding == "bgr8" else image)
        except (PolicyError, ValueError) as error:  # named by its topic: a policy may watch several cameras
            self._observation_failed(f"{Topics.camera_image(camera)}: {error}")

    # -- services: any order, any number of times; each answers what it did -------------------------
    def _reset(self) -> str:
        """Clear chunks, the policy's episode state and the observations so far (a reset twin
        teleports the robot and may restart its clock: nothing from before is acted on); '' or
        what failed (the node then stops). Object poses are forgotten too: the last episode's
        would place the new one's objects where the old ones ended."""
        self.assembler.clear()
        self._poses, self._sizes = {}, {}
        try:
            self.runtime.reset()
        except Exception as exc:  # a policy's own reset (a remote server, say) failing must not end the node
            self.running = False
            return (f"resetting the policy failed ({type(exc).__name__}: {exc}); stopped: no commands are sent "
                    "until ~/start succeeds, and the driver holds its last target")
        return ""

    def _waiting(self) -> str:
        if self.assembler.latest() is not None:
            return ""
        cameras = self.policy.metadata.observation.cameras
        return ("; no command until joint_states" + "".join(f" and {Topics.camera_image(c)}" for c in cameras)
                + (f" and the objects' poses on {Topics.TF}" if isinstance(self.assembler, WithObjectPoses) else "")
                + (f" and the sizes of {', '.join(self.assembler.needs_sizes)} on {Topics.OBJECT_SIZES}"
                   if getattr(self.assembler, "needs_sizes", ()) else "")
                + " form an observation")

    def _start(self) -> tuple[bool, str]:
        was = self.running
        failed = self._reset()
        if failed:
            return False, f"not started: {failed}"
        self.running = True
        return True, f"{'restarted' if was else 'started'} {self.source} from a fresh episode{self._waiting()}"

    def _on_start(self, request, response: Trigger.Response):
        response.success, response.message = self._start()
        return response

    def _on_stop(self, request, response: Trigger.Response):
        was, self.running = self.running, False
        response.success = True
        response.message = (f"{'stopped' if was else 'already stopped'}: no commands are sent; the driver holds its "
                            "last target")
        return response

    def _on_reset(self, request, response: Trigger.Response):
        failed = self._reset()
        response.success = not failed
        response.message = f"reset failed: {failed}" if failed else (
            "policy reset: chunks and episode state cleared; "
            + (f"running{self._waiting()}" if self.running else "stopped (call ~/start to act)"))
        return response

    # -- the control tick ---------------------------------------------------------------------------
    def _tick(self) -> None:
        if not self.running:
            return
        try:
            command = self.runtime.step(self._now(), self.assembler.latest())
        except PolicyError as error:  # sends nothing (the driver holds its last target); never raised into the executor
            if str(error) != self._reason:
                self.get_logger().error(f"no command sent: {error}")
            self._reason = str(error)
            return
        if command is None:
            return
        for group, values in command.joints.items():
            self.pub_groups[group].publish(convert.float_array_msg(values, group))
        for gripper, opening in command.grippers.items():
            self.pub_grippers[gripper].publish(convert.float_array_msg([opening], gripper))
        self._reason = command.reason

    def _publish_diagnostics(self) -> None:
        stats = self.runtime.stats
        p50, p99 = stats.latency_percentiles()
        level, message = convert.OK, "running" if self.running else "stopped (call ~/start)"
        if self.running and self._reason:
            level = convert.ERROR if self.runtime.fault else convert.WARN
            message = f"holding: {self._reason}"
        elif self._observation_error:
            level, message = convert.WARN, f"observation rejected: {self._observation_error}"
        if abs(stats.observation_age_s) > CLOCK_MISMATCH_S:
            level = convert.ERROR
            message = (f"observations are {stats.observation_age_s:.0f} s old: joint_states are stamped on another "
                       "clock (set use_sim_time in front of the twin)")
        values = {
            "policy": self.source, "robot": self.robot.name, "running": self.running,
            "inferences": stats.inferences, "latency_p50_ms": f"{p50 * 1e3:.2f}", "latency_p99_ms": f"{p99 * 1e3:.2f}",
            "deadline_misses": stats.deadline_misses, "discarded_late_results": stats.discarded,
            "stale_observations": stats.stale_observations, "observation_age_ms": f"{stats.observation_age_s * 1e3:.1f}",
            "errors": stats.errors, "last_error": stats.last_error, "sync_dropped": self.assembler.dropped,
        }
        status = convert.diagnostic_status(f"r2s2r/policy/{self.get_name()}", self.source, level, message, values)
        self.pub_diag.publish(convert.diagnostic_array([status], self._now()))

    def close(self) -> None:
        self.runtime.close()


def main(args=None) -> int:
    return run(PolicyNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
