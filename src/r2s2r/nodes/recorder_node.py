"""recorder_node: one robot's episode into an MCAP ROS 2 bag (data.episode.EpisodeWriter).

It subscribes to everything the robot's driver publishes and accepts (contract.interface:
joint_states, diagnostics, /tf, /tf_static, robot_description, every group's and gripper's
command topics, estop) and each camera's
image_raw, depth/image_raw and camera_info, and logs every message as it arrives, stamped
with this node's clock (ROS time: the twin's /clock under use_sim_time).

Parameters:
  robot       registered robot name (required)
  out         the bag to write (required)
  cameras     camera names to record (default none)
  depth       also record cameras/<name>/depth/image_raw (default true)
  duration_s  stop after this long (0: until stopped; at most 30 days)
  stack       the stack the robot runs in (recorded in the bag's /r2s2r/episode)

Parameters are checked before the bag is created. A recording is raw: every message that
arrives is written as it came (a bad image or camera_info is refused by whoever reads the
bag, naming the topic); a message that cannot be written is counted and named, never raised.
"""

from __future__ import annotations

import threading
from pathlib import Path

import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter

from r2s2r.contract import qos
from r2s2r.contract.names import CAMERA_NAME, CAMERA_NAME_EXPECTED, Topics
from r2s2r.data.episode import EpisodeWriter, episode_topics
from r2s2r.data.mcap_io import message_class
from r2s2r.nodes.runtime import check_ranges, run
from r2s2r.processes import return_large_blocks_to_the_os
from r2s2r.robots import get_robot


RANGES = {"duration_s": (0.0, 30 * 86400.0, "0 (until stopped) or a positive time in seconds, up to 30 days")}


def _qos_for(topic: str):
    if topic.startswith("cameras/"):
        return qos.SENSOR
    if topic in (Topics.ESTOP, Topics.ROBOT_DESCRIPTION):
        return qos.LATCHED
    if topic == Topics.TF_STATIC:
        return qos.TF_STATIC
    if topic == Topics.TF:
        return qos.TF
    if topic == Topics.DIAGNOSTICS:
        return qos.DIAGNOSTICS
    return qos.COMMAND if topic != Topics.JOINT_STATES else qos.STATE


class RecorderNode(Node):
    def __init__(self, **node_options):
        super().__init__("recorder", **node_options)  # options: a test's context and parameter_overrides
        self.declare_parameters("", [("robot", ""), ("out", ""), ("cameras", Parameter.Type.STRING_ARRAY),
                                     ("depth", True), ("duration_s", 0.0), ("stack", "")])
        robot = self.get_parameter("robot").value
        out = self.get_parameter("out").value
        if not robot:
            raise ValueError("parameter 'robot' is required: one of the registered robots")
        if not out:
            raise ValueError("parameter 'out' is required: the MCAP bag to write")
        if Path(out).is_dir():
            raise ValueError(f"parameter 'out' is {out!r}, a folder; expected the MCAP bag to write (a file path)")
        check_ranges(self, RANGES)  # NaN too; before the bag is created
        duration = self.get_parameter("duration_s").value
        self.robot = get_robot(robot)
        try:
            cameras = [c for c in self.get_parameter("cameras").value if c]
        except rclpy.exceptions.ParameterUninitializedException:
            cameras = []
        bad = [c for c in cameras if not CAMERA_NAME.fullmatch(c)]
        if bad:
            raise ValueError(f"parameter 'cameras' holds {bad}; expected camera names of {CAMERA_NAME_EXPECTED}")
        topics = episode_topics(self.robot, cameras, depth=self.get_parameter("depth").value)
        namespace = self.get_namespace().strip("/")
        self._lock = threading.Lock()  # callbacks run on the executor's threads; the writer is not thread-safe
        self.writer = None  # created last: nothing that can fail comes after it
        self.counts = {t: 0 for t in topics}
        self.failed: dict[str, int] = {}  # messages that could not be written, by topic
        for topic, kind in topics.items():
            self.create_subscription(message_class(kind), topic, lambda msg, t=topic: self._on_message(t, msg),
                                     _qos_for(topic))
        if duration > 0:
            self._stop_timer = self.create_timer(duration, self._stop)
        self.writer = EpisodeWriter(out, self.robot.name, namespace,
                                    meta={"stack": self.get_parameter("stack").value, "cameras": cameras},
                                    stamp=self._now())
        self.get_logger().info(f"recording {self.robot.name} ({len(topics)} topics, cameras "
                               f"{', '.join(cameras) or 'none'}) into {out}")

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_message(self, topic: str, msg) -> None:
        error = None
        with self._lock:
            if self.writer is None:
                return
            try:
                self.writer.write(topic, msg, self._now())
            except Exception as exc:  # a full disk, say: counted and named, the recording goes on
                self.failed[topic] = self.failed.get(topic, 0) + 1
                error = exc if self.failed[topic] == 1 else None
                first = False
            else:
                self.counts[topic] += 1
                first = self.counts[topic] == 1
        if error is not None:
            self.get_logger().error(f"cannot write a message on {topic} into the bag ({type(error).__name__}: "
                                    f"{error}); recording the other messages, counting those lost")
        if first:  # which topics are live, as soon as they are (an operator's first question)
            self.get_logger().info(f"first message on {topic}")

    def _stop(self) -> None:
        self.get_logger().info("duration reached; closing the bag")
        self.close()
        rclpy.try_shutdown()  # ends the executor's spin; runtime.run exits cleanly

    def close(self) -> None:
        with self._lock:
            if self.writer is not None:
                self.writer.close()
                self.writer = None
                recorded = ", ".join(f"{t} {n}" for t, n in self.counts.items() if n)
                lost = ", ".join(f"{t} {n}" for t, n in self.failed.items())
                print(f"[recorder] closed the bag: {recorded or 'no messages'}"
                      f"{'; not written: ' + lost if lost else ''}", flush=True)


def main(args=None) -> int:
    # Every MCAP chunk the writer finishes (about 1 MiB of messages, every 8 s at an FR3's 250 Hz
    # joint states and 100 Hz commands) allocates and frees megabytes on whichever executor thread
    # filled it; with glibc's default those blocks stay in its arenas and fragment them: the
    # recorder's resident memory crept up 3 MiB in 8 minutes. Blocks of 128 KiB and up are
    # unmapped when freed instead (processes.return_large_blocks_to_the_os), which also keeps
    # the recorder about 5 MiB smaller.
    return_large_blocks_to_the_os()
    return run(RecorderNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
