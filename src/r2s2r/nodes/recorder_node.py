"""recorder_node: one robot's episode into an MCAP ROS 2 bag (data.episode.EpisodeWriter).

It subscribes to everything the robot's driver publishes and accepts (contract.interface:
joint_states, diagnostics, /tf, /tf_static, robot_description, every group's and gripper's
command topics, estop) and each camera's
image_raw, depth/image_raw and camera_info, and logs every message at the time it arrived: its
DDS reception time, as rosbag2 logs it, not the moment the executor got round to it (a
recorder held up by a loaded machine would smear a steady stream of commands by tens of
milliseconds, and a fit of the latency with it). Under use_sim_time the reception time is moved
onto the twin's /clock, read between the /clock messages received around it (SimClockMap).

Parameters:
  robot       registered robot name (required)
  out         the bag to write (required)
  cameras     camera names to record (default none)
  depth       also record cameras/<name>/depth/image_raw (default true)
  duration_s  stop after this long (0: until stopped; at most 30 days)
  stack       the stack the robot runs in (recorded in the bag's /r2s2r/episode)

Parameters are checked before the bag is created. A recording is raw: every message is taken
as its CDR bytes (a raw subscription: nothing is deserialised) and written as it came (a bad
image or camera_info is refused by whoever reads the bag, naming the topic); a message that
cannot be written is counted and named, never raised. The reader queues are deep, so a
recorder held up for a moment by a loaded machine catches up rather than losing messages, and
each channel carries its publishers' QoS as rosbag2 writes it (`offered_qos_profiles`).
`duration_s` counts on the node's clock from its first reading: under use_sim_time, from the
first /clock, however far along the twin already is.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import deque
from pathlib import Path

import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock as ClockMessage

from r2s2r.contract import qos
from r2s2r.contract.names import CAMERA_NAME, CAMERA_NAME_EXPECTED, Topics
from r2s2r.data.episode import EpisodeWriter, episode_topics
from r2s2r.data.mcap_io import message_class, type_name
from r2s2r.nodes.runtime import check_ranges, run
from r2s2r.processes import return_large_blocks_to_the_os
from r2s2r.robots import get_robot


RANGES = {"duration_s": (0.0, 30 * 86400.0, "0 (until stopped) or a positive time in seconds, up to 30 days")}
# Reader queues: 4 s of joint_states at 250 Hz; a second of frames (a colour frame is up to a
# few MB: deeper would let a stalled recorder hold hundreds of MB).
QUEUE_DEPTH = 1000
CAMERA_QUEUE_DEPTH = 30
DURATION_POLL_S = 0.02  # how often the duration is checked, on the steady clock


def _qos_for(topic: str):
    if topic.startswith("cameras/"):
        return qos.for_recording(qos.SENSOR, CAMERA_QUEUE_DEPTH)
    return qos.for_recording(_offered_qos(topic), QUEUE_DEPTH)


def _offered_qos(topic: str):
    """What the interface's publishers offer on `topic` (the reliability and durability to match)."""
    if topic in (Topics.ESTOP, Topics.ROBOT_DESCRIPTION):
        return qos.LATCHED
    if topic == Topics.TF_STATIC:
        return qos.TF_STATIC
    if topic == Topics.TF:
        return qos.TF
    if topic == Topics.DIAGNOSTICS:
        return qos.DIAGNOSTICS
    return qos.COMMAND if topic != Topics.JOINT_STATES else qos.STATE


class SimClockMap:
    """The twin's /clock as a function of the wall clock, from the last /clock messages' reception
    times: a time between two of them is interpolated, one after the last goes on from it at real
    time. A message received just before a /clock, and handled after it (another topic, so in no
    order with it), is stamped before that /clock's value, never after it, and never before the
    /clock before it."""

    def __init__(self, keep: int = 256):
        self.received: deque[float] = deque(maxlen=keep)
        self.clock: deque[float] = deque(maxlen=keep)
        # Its own lock: /clock comes at the twin's state rate, and must not wait behind a bag write.
        self._lock = threading.Lock()

    def add(self, received: float, clock: float) -> None:
        with self._lock:
            if self.received and (received < self.received[-1] or clock < self.clock[-1]):
                # Out of order, or the twin was reset (its clock set back): a new timeline starts here.
                self.received.clear()
                self.clock.clear()
            self.received.append(received)
            self.clock.append(clock)

    def at(self, received: float) -> float | None:
        """The /clock reading at wall time `received`; None before any /clock."""
        with self._lock:
            if not self.received:
                return None
            if received >= self.received[-1]:
                return self.clock[-1] + (received - self.received[-1])
            i = bisect.bisect_right(self.received, received)
            if i == 0:
                return self.clock[0]  # older than what is kept: the earliest reading kept
            r0, r1, c0, c1 = self.received[i - 1], self.received[i], self.clock[i - 1], self.clock[i]
            return c0 + (c1 - c0) * (received - r0) / (r1 - r0) if r1 > r0 else c0


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
        self.types = {topic: type_name(message_class(kind)) for topic, kind in topics.items()}
        self._resolved: dict[str, str] = {}
        self._clock_times = SimClockMap()  # under use_sim_time: wall reception times onto /clock
        self._last_arrival: dict[str, float] = {}
        self._use_sim_time = bool(self.get_parameter("use_sim_time").value)
        if self._use_sim_time:
            self.create_subscription(ClockMessage, Topics.CLOCK, self._on_clock, qos.CLOCK)
        for topic, kind in topics.items():
            # Two arguments: rclpy hands the callback each message's info (its reception time) too.
            sub = self.create_subscription(message_class(kind), topic,
                                           lambda data, info, t=topic: self._on_message(t, data, info),
                                           _qos_for(topic), raw=True)
            self._resolved[topic] = sub.topic_name
        self.duration = duration
        self.elapsed = 0.0  # seconds on the node's clock since its first reading
        self._last_reading: float | None = None
        self._clock_lock = threading.Lock()  # the timer and the message callbacks both count
        self._stopping = False
        if duration > 0:
            self._stop_timer = self.create_timer(DURATION_POLL_S, self._count_duration,
                                                 clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.writer = EpisodeWriter(out, self.robot.name, namespace,
                                    meta={"stack": self.get_parameter("stack").value, "cameras": cameras},
                                    stamp=self._now())
        self.get_logger().info(f"recording {self.robot.name} ({len(topics)} topics, cameras "
                               f"{', '.join(cameras) or 'none'}) into {out}")

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_clock(self, msg, info) -> None:
        received = info.get("received_timestamp") or 0
        if received > 0:
            self._clock_times.add(received * 1e-9, msg.clock.sec + msg.clock.nanosec * 1e-9)

    def _arrival(self, info) -> float:
        """When a message arrived, on this node's clock: its DDS reception time (the wall clock),
        under use_sim_time moved onto /clock; the node's clock now where the middleware gives none."""
        received = (info or {}).get("received_timestamp") or 0
        if received <= 0:
            return self._now()
        if self._use_sim_time:
            sim = self._clock_times.at(received * 1e-9)
            return self._now() if sim is None else sim
        return received * 1e-9

    def _on_message(self, topic: str, data: bytes, info=None) -> None:
        """One message as its CDR bytes (a raw subscription's), written as it came, logged at its arrival."""
        error = None
        if self.duration > 0 and self._count_duration():
            return  # past the duration: not part of the recording
        # The publishers' QoS, looked up once per topic, when its first message shows one exists.
        offered = None if self.counts.get(topic) else self._offered_profiles(topic)
        with self._lock:
            if self.writer is None:
                return
            # In order on each topic, as DDS delivers it, though /clock's offset moved in between.
            arrived = self._last_arrival[topic] = max(self._arrival(info), self._last_arrival.get(topic, -math.inf))
            try:
                self.writer.write_serialized(topic, self.types[topic], data, arrived, offered)
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

    def _offered_profiles(self, topic: str) -> str | None:
        try:
            infos = self.get_publishers_info_by_topic(self._resolved[topic])
        except Exception as exc:  # a graph query that fails costs the metadata, never the message
            self.get_logger().warning(f"cannot read the publishers' QoS on {topic} ({exc}); recording without it")
            return None
        return qos.offered_qos_profiles(info.qos_profile for info in infos)

    def _count_duration(self) -> bool:
        """Count the node clock's time since the last reading; True once `duration_s` has passed
        (the first caller to see it closes the bag). Checked on every message as well as on the
        timer, so that nothing after the duration is written, however late the timer runs."""
        with self._clock_lock:
            now = self._now()
            if now == 0.0:
                return False  # use_sim_time and no /clock yet: the recording has not begun
            if self._last_reading is not None:
                self.elapsed += max(0.0, now - self._last_reading)  # a clock set back (a reset) adds nothing
            self._last_reading = now
            if self.elapsed < self.duration:
                return False
            stopping, self._stopping = self._stopping, True
        if not stopping:
            self._stop_timer.cancel()
            self._stop()
        return True

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
