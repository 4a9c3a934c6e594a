"""Episodes: what a robot did, as recorded in an MCAP ROS 2 bag, on one time base.

An episode bag holds the driver's topics (joint_states, diagnostics), every command topic of
the robot's groups and grippers, the cameras' image_raw, depth/image_raw and camera_info, and
one std_msgs/String on `/r2s2r/episode` with the recording's facts (robot, namespace, stack) as
JSON. `EpisodeWriter` writes one (the recorder node and in-process recorders alike),
`load_episode` reads it back for reconstruction, replay and alignment.

Time base: the robot's state clock (joint_states header stamps), in seconds from the first
joint state. Commands carry no header, so they are placed by the time the recorder logged
them, moved onto the state clock by the median gap between the log times and the header
stamps of joint_states (the recorder's clock is not the robot's: a real driver stamps with its
own monotonic clock). Camera frames are placed by their header stamps, moved by the same
median gap taken for each camera's own topic. What this cannot see, the robot's command
latency, is what `real2sim.sysid.estimate_offset` measures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from r2s2r.camera.info import INTRINSICS_EXPECTED, CameraCalibration
from r2s2r.contract.names import Topics
from r2s2r.robots import RobotSpec, UnknownRobotError, get_robot, registry

META_TOPIC = "/r2s2r/episode"
FORMAT = 1


class EpisodeError(ValueError):
    """An episode bag is unusable for what was asked; the message names the bag and what is wrong."""


def _absolute(namespace: str, topic: str) -> str:
    if topic.startswith("/"):
        return topic
    namespace = namespace.strip("/")
    return f"/{namespace}/{topic}" if namespace else f"/{topic}"


# -- writing ----------------------------------------------------------------------------------------
class EpisodeWriter:
    """Writes an episode bag. `write(topic, msg, stamp)` takes any ROS 2 message on a topic
    relative to the robot's namespace; the helpers build the interface's messages from numpy.

    `stamp` is the recorder's log time (seconds on its own clock): when the message was
    received or, recording in-process, when it was issued.
    """

    def __init__(self, path: str | Path, robot: str, namespace: str = "", meta: Mapping[str, Any] | None = None,
                 stamp: float = 0.0):
        from r2s2r.contract.convert import string_msg
        from r2s2r.data.mcap_io import BagWriter
        get_robot(robot)  # UnknownRobotError lists the robots
        self.path = Path(path)
        self.robot = robot
        self.namespace = namespace.strip("/")
        self._bag = BagWriter(self.path)
        info = {"format": FORMAT, "robot": robot, "namespace": self.namespace, **dict(meta or {})}
        self._bag.write(META_TOPIC, string_msg(json.dumps(info, sort_keys=True)), stamp)

    @property
    def count(self) -> int:
        return self._bag.count

    def write(self, topic: str, msg: Any, stamp: float) -> None:
        self._bag.write(_absolute(self.namespace, topic), msg, stamp)

    def write_serialized(self, topic: str, type_name: str, data: bytes, stamp: float,
                         offered_qos_profiles: str | None = None) -> None:
        """A message as its CDR bytes (mcap_io.BagWriter.write_serialized), on a relative topic."""
        self._bag.write_serialized(_absolute(self.namespace, topic), type_name, data, stamp, offered_qos_profiles)

    # Helpers for recorders that hold numpy rather than messages (the proxy cell, tests).
    def joint_sample(self, sample, stamp: float) -> None:
        from r2s2r.contract import convert
        self.write(Topics.JOINT_STATES, convert.joint_state_msg(sample), stamp)

    def positions(self, group: str, values, stamp: float) -> None:
        from r2s2r.contract import convert
        self.write(Topics.position_commands(group), convert.float_array_msg(values, group), stamp)

    def gripper(self, gripper: str, opening: float, stamp: float) -> None:
        from r2s2r.contract import convert
        self.write(Topics.gripper_commands(gripper), convert.float_array_msg([opening], gripper), stamp)

    def trajectory(self, group: str, names, times, positions, stamp: float, header_stamp: float = 0.0,
                   velocities=None) -> None:
        from r2s2r.contract import convert
        msg = convert.trajectory_msg(names, times, positions, velocities, stamp=header_stamp)
        self.write(Topics.joint_trajectory(group), msg, stamp)

    def image(self, camera: str, rgb: np.ndarray, header_stamp: float, stamp: float) -> None:
        from r2s2r.contract import convert
        from r2s2r.contract.frames import camera_optical_frame
        self.write(Topics.camera_image(camera),
                   convert.image_msg(rgb, "rgb8", header_stamp, camera_optical_frame(camera)), stamp)

    def depth(self, camera: str, depth_m: np.ndarray, header_stamp: float, stamp: float) -> None:
        """Depth as a RealSense publishes it: 16UC1 millimetres, 0 where nothing was seen."""
        from r2s2r.contract import convert
        from r2s2r.contract.frames import camera_optical_frame
        mm = np.where(np.isfinite(depth_m) & (depth_m > 0), np.round(depth_m * 1000.0), 0)
        self.write(Topics.camera_depth(camera),
                   convert.image_msg(np.clip(mm, 0, 65535).astype(np.uint16), "16UC1", header_stamp,
                                     camera_optical_frame(camera)), stamp)

    def camera_info(self, camera: str, calibration: CameraCalibration, header_stamp: float, stamp: float) -> None:
        from r2s2r.contract import convert
        from r2s2r.contract.frames import camera_optical_frame
        c = calibration
        self.write(Topics.camera_info(camera),
                   convert.camera_info_full_msg(c.width, c.height, c.K, c.D, c.R, c.P, header_stamp,
                                                camera_optical_frame(camera), c.distortion_model or "plumb_bob"),
                   stamp)

    def diagnostics(self, name: str, level: int, message: str, values: Mapping[str, object], header_stamp: float,
                    stamp: float) -> None:
        from r2s2r.contract import convert
        status = convert.diagnostic_status(name, self.robot, bytes([level]), message, dict(values))
        self.write(Topics.DIAGNOSTICS, convert.diagnostic_array([status], header_stamp), stamp)

    def close(self) -> None:
        self._bag.close()

    def __enter__(self) -> "EpisodeWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- the episode in memory --------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class JointStream:
    """joint_states on the episode's time base: one row per message, columns in `names` order."""

    times: np.ndarray
    names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray

    def columns(self, names: Iterable[str]) -> np.ndarray:
        index = {n: i for i, n in enumerate(self.names)}
        missing = [n for n in names if n not in index]
        if missing:
            raise EpisodeError(f"joint_states lacks joints {missing}; it has {', '.join(self.names)}")
        return np.array([index[n] for n in names])

    def at(self, t: float, names: Iterable[str]) -> np.ndarray:
        """Positions of `names` at time t (linear interpolation)."""
        cols = self.columns(list(names))
        return np.array([np.interp(t, self.times, self.position[:, c]) for c in cols])


@dataclass(frozen=True, eq=False)
class Command:
    """One command message on the episode's time base.

    kind: "positions" (a group's target, held), "streaming" (one of a group's streamed targets,
    which the watchdog stops once they stop coming), "gripper" (an opening, metres) or
    "trajectory" (a joint_trajectory_controller goal: `names`, `times` from its start,
    `values` one row per point; `start` the header stamp on the episode's time base, or None
    for "start on receipt").
    """

    time: float
    kind: str
    target: str
    values: np.ndarray
    names: tuple[str, ...] = ()
    times: np.ndarray | None = None
    velocities: np.ndarray | None = None
    start: float | None = None


@dataclass(frozen=True, eq=False)
class CameraStream:
    name: str
    calibration: CameraCalibration | None
    frame_id: str
    rgb_times: np.ndarray
    rgb: tuple[np.ndarray, ...]
    depth_times: np.ndarray
    depth: tuple[np.ndarray, ...]  # float32 metres, NaN where the sensor saw nothing
    calibration_problem: str = ""  # why camera_info gives no usable calibration ('' when it does)

    def rgb_at(self, t: float) -> tuple[float, np.ndarray]:
        i = int(np.argmin(np.abs(self.rgb_times - t)))
        return float(self.rgb_times[i]), self.rgb[i]

    def depth_at(self, t: float) -> tuple[float, np.ndarray]:
        if not self.depth:
            raise EpisodeError(f"camera {self.name} recorded no depth (cameras/{self.name}/depth/image_raw)")
        i = int(np.argmin(np.abs(self.depth_times - t)))
        return float(self.depth_times[i]), self.depth[i]


@dataclass(frozen=True, eq=False)
class Episode:
    source: str
    robot: RobotSpec
    namespace: str
    joints: JointStream
    commands: tuple[Command, ...]
    cameras: dict[str, CameraStream]
    diagnostics: tuple[tuple[float, tuple[dict, ...]], ...] = ()
    meta: dict = field(default_factory=dict)
    start_stamp: float = 0.0  # the first joint state's header stamp (seconds on the robot's clock)

    @property
    def duration(self) -> float:
        return float(self.joints.times[-1])

    def camera(self, name: str) -> CameraStream:
        if name not in self.cameras:
            raise EpisodeError(f"{self.source}: no camera {name!r}; recorded cameras: "
                               f"{', '.join(self.cameras) or 'none'}")
        return self.cameras[name]

    def calibrated_camera(self, name: str) -> CameraStream:
        """A camera whose calibration is known; a missing camera_info is an EpisodeError."""
        cam = self.camera(name)
        problem = cam.calibration_problem or ("has no message on it" if cam.calibration is None else "")
        if problem:
            topic = _absolute(self.namespace, Topics.camera_info(name))
            raise EpisodeError(f"{self.source}: camera {name} has images but {topic} {problem}; reconstruction and "
                               "image alignment need the camera's calibration (record camera_info, or calibrate "
                               "with `r2s2r calibrate`)")
        return cam


# -- reading ------------------------------------------------------------------------------------------------
def _stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def _robot_for(meta: dict, names: tuple[str, ...], source: str) -> RobotSpec:
    if meta.get("robot"):
        try:
            return get_robot(meta["robot"])
        except UnknownRobotError as exc:
            raise EpisodeError(f"{source}: recorded for robot {meta['robot']!r}, which is not registered "
                               f"(known: {', '.join(exc.known)})") from None
    for spec in registry().values():
        if set(spec.joint_names) <= set(names):
            return spec
    raise EpisodeError(f"{source}: no {META_TOPIC} and no registered robot has the joints {list(names)}")


def _read_messages(path: Path):
    from r2s2r.data.mcap_io import BagError, read_bag
    try:
        return list(read_bag(path))
    except BagError as exc:
        raise EpisodeError(str(exc)) from None
    except Exception as exc:  # the mcap reader's own errors on a cut-off or foreign file
        raise EpisodeError(f"{path}: not a complete MCAP bag ({type(exc).__name__}: {exc}); was the recording "
                           "stopped before the bag was closed, or the file cut short?") from None


def load_episode(path: str | Path, robot: str | None = None, require_commands: bool = True) -> Episode:
    """Read an episode bag. Missing joint_states, commands (unless `require_commands` is
    False) or a bag cut short are EpisodeErrors naming the bag and what is missing."""
    path = Path(path)
    if not path.is_file():
        raise EpisodeError(f"{path}: no such episode bag")
    messages = _read_messages(path)
    source = str(path)
    meta: dict = {}
    for m in messages:
        if m.topic == META_TOPIC:
            try:
                meta = json.loads(m.msg.data)
            except ValueError:
                raise EpisodeError(f"{source}: {META_TOPIC} does not hold JSON: {m.msg.data[:80]!r}") from None
            break
    namespace = str(meta.get("namespace", "")).strip("/")
    topics = sorted({m.topic for m in messages})

    def rel(topic: str) -> str | None:
        prefix = f"/{namespace}/" if namespace else "/"
        return topic[len(prefix):] if topic.startswith(prefix) else None

    joint_topic = _absolute(namespace, Topics.JOINT_STATES)
    states = [m for m in messages if m.topic == joint_topic]
    if not states:
        raise EpisodeError(f"{source}: no messages on {joint_topic}; the bag has topics {', '.join(topics) or 'none'} "
                           "(record the driver's joint_states)")
    first = states[0].msg
    names = tuple(first.name)
    spec = _robot_for(meta, names, source) if robot is None else get_robot(robot)
    rows = [s for s in states if tuple(s.msg.name) == names]
    if len(rows) != len(states):
        raise EpisodeError(f"{source}: {joint_topic} changes its joint names mid-episode")
    header = np.array([_stamp(s.msg) for s in rows])
    order = np.argsort(header, kind="stable")
    header = header[order]
    rows = [rows[i] for i in order]
    t0 = float(header[0])
    clock_gap = float(np.median([s.stamp - _stamp(s.msg) for s in rows]))

    def field_rows(attr: str) -> np.ndarray:
        out = np.full((len(rows), len(names)), np.nan)
        for i, s in enumerate(rows):
            values = getattr(s.msg, attr)
            if len(values) == len(names):
                out[i] = values
        return out

    joints = JointStream(header - t0, names, field_rows("position"), field_rows("velocity"), field_rows("effort"))

    def on_state_clock(log_time: float) -> float:
        return log_time - clock_gap - t0

    commands: list[Command] = []
    by_topic = {Topics.position_commands(g): ("positions", g) for g in spec.group_names}
    by_topic |= {Topics.streaming_commands(g): ("streaming", g) for g in spec.group_names}
    by_topic |= {Topics.gripper_commands(g.name): ("gripper", g.name) for g in spec.grippers}
    by_topic |= {Topics.joint_trajectory(g): ("trajectory", g) for g in spec.group_names}
    for m in messages:
        kind_target = by_topic.get(rel(m.topic) or "")
        if kind_target is None:
            continue
        kind, target = kind_target
        t = on_state_clock(m.stamp)
        if kind == "trajectory":
            from r2s2r.contract.types import CommandError
            try:
                from r2s2r.contract.convert import trajectory_arrays
                traj_names, stamp, times, positions, velocities, _ = trajectory_arrays(m.msg)
            except CommandError as exc:
                raise EpisodeError(f"{source}: {m.topic} at {t:.3f} s: {exc}") from None
            commands.append(Command(t, kind, target, positions, traj_names, times, velocities,
                                    None if stamp == 0 else stamp - t0))
        else:
            commands.append(Command(t, kind, target, np.asarray(m.msg.data, float)))
    commands.sort(key=lambda c: c.time)
    if require_commands and not commands:
        expected = sorted(_absolute(namespace, t) for t in by_topic)
        raise EpisodeError(f"{source}: no command messages; replay needs the commands the robot executed on "
                           f"{', '.join(expected)} (the bag has {', '.join(topics)})")

    cameras = _cameras(messages, rel, clock_gap, t0, source)
    diagnostics = []
    diag_topic = _absolute(namespace, Topics.DIAGNOSTICS)
    for m in messages:
        if m.topic == diag_topic:
            statuses = tuple({"name": s.name, "level": int.from_bytes(bytes(s.level), "little") if isinstance(
                s.level, (bytes, bytearray)) else int(s.level), "message": s.message,
                "values": {kv.key: kv.value for kv in s.values}} for s in m.msg.status)
            diagnostics.append((on_state_clock(m.stamp), statuses))
    return Episode(source, spec, namespace, joints, tuple(commands), cameras, tuple(diagnostics), meta, t0)


def _cameras(messages, rel, clock_gap: float, t0: float, source: str) -> dict[str, CameraStream]:
    found: dict[str, dict] = {}
    for m in messages:
        topic = rel(m.topic) or ""
        parts = topic.split("/")
        if len(parts) < 3 or parts[0] != "cameras":
            continue
        name, what = parts[1], "/".join(parts[2:])
        entry = found.setdefault(name, {"rgb": [], "depth": [], "info": None, "gaps": {}})
        if what == "image_raw":
            entry["rgb"].append(m)
        elif what == "depth/image_raw":
            entry["depth"].append(m)
        elif what == "camera_info" and entry["info"] is None:
            entry["info"] = m.msg

    def frames(ms, convert_image):
        if not ms:
            return np.zeros(0), ()
        gap = float(np.median([m.stamp - _stamp(m.msg) for m in ms]))
        # A camera's own clock maps onto the recorder's by its median gap, then onto the state clock.
        times = np.array([_stamp(m.msg) + gap - clock_gap - t0 for m in ms])
        order = np.argsort(times, kind="stable")
        images = []
        for i in order:
            try:
                images.append(convert_image(ms[i].msg))
            except ValueError as exc:  # a recording is raw: what the camera sent is refused where it is read
                raise EpisodeError(f"{source}: {ms[i].topic}, message {i + 1} of {len(ms)}: {exc}") from None
        return times[order], tuple(images)

    cameras = {}
    for name, entry in found.items():
        rgb_times, rgb = frames(entry["rgb"], _rgb_image)
        depth_times, depth = frames(entry["depth"], _depth_image)
        frame_id = (entry["rgb"] or entry["depth"])[0].msg.header.frame_id if (entry["rgb"] or entry["depth"]) else ""
        sizes = {ms[0].topic: images[0].shape[:2] for ms, images in ((entry["rgb"], rgb), (entry["depth"], depth))
                 if images}
        calibration, problem = _calibration(entry["info"], name, sizes)
        cameras[name] = CameraStream(name, calibration, frame_id, rgb_times, rgb, depth_times, depth, problem)
    return cameras


def _rgb_image(msg) -> np.ndarray:
    from r2s2r.contract.convert import image_array
    if msg.encoding not in ("rgb8", "bgr8", "mono8"):
        raise ValueError(f"encoding {msg.encoding!r}; expected rgb8, bgr8 or mono8")
    image = image_array(msg)
    if msg.encoding == "bgr8":
        return np.ascontiguousarray(image[:, :, ::-1])
    if msg.encoding == "mono8":
        return np.repeat(image[:, :, None], 3, axis=2)
    return image


def _depth_image(msg) -> np.ndarray:
    """Metres as float32, NaN where the sensor saw nothing."""
    from r2s2r.contract.convert import image_array
    if msg.encoding not in ("16UC1", "32FC1"):
        raise ValueError(f"encoding {msg.encoding!r}; expected 16UC1 (millimetres) or 32FC1 (metres) depth")
    image = image_array(msg)
    if msg.encoding == "16UC1":  # millimetres, 0 = no return
        out = image.astype(np.float32) / 1000.0
        out[image == 0] = np.nan
        return out
    out = image.astype(np.float32)
    out[~np.isfinite(out) | (out <= 0)] = np.nan
    return out


def _calibration(info, name: str, sizes: Mapping[str, tuple[int, int]]) -> tuple[CameraCalibration | None, str]:
    """A camera's calibration from its first camera_info, and what makes it unusable ('' if nothing):
    a size of 0, a K or D that is not a calibration, or a size other than the recorded images'."""
    from r2s2r.contract.convert import camera_info_arrays
    if info is None:
        return None, "has no message on it"
    width, height, k, d, r, p, model = camera_info_arrays(info)
    if width < 1 or height < 1:
        return None, (f"is for a {width}x{height} image; expected the calibrated image's width and height, at least "
                      "1 pixel each")
    calibration = CameraCalibration(width, height, k, d, r, p, model or "plumb_bob", name)
    problem = calibration.intrinsics_problem()
    if problem:
        return calibration, f"has {problem}; expected {INTRINSICS_EXPECTED}"
    for topic, (rows, cols) in sizes.items():
        if (cols, rows) != (width, height):
            return calibration, (f"is for {width}x{height} images, while {topic} carries {cols}x{rows} ones; "
                                 "expected the calibration of the recorded images' size")
    return calibration, ""


def episode_topics(robot: RobotSpec, cameras: Iterable[str] = (), depth: bool = True) -> dict[str, str]:
    """Relative topic -> ROS type of everything an episode records for `robot`: the driver's
    joint_states and diagnostics, /tf, /tf_static and robot_description (a viewer shows the robot
    from the bag alone), every command topic, and each camera's images and camera_info."""
    from r2s2r.contract.interface import driver_interface
    iface = driver_interface(robot.group_names, [g.name for g in robot.grippers], simulated=False)
    # The controllers' state follows from what is recorded (joint_states and the commands).
    out = {topic: kind for topic, kind in iface.publishers.items() if not topic.endswith("/controller_state")}
    out |= iface.subscriptions  # every command topic, estop included
    for cam in cameras:
        out[Topics.camera_image(cam)] = "sensor_msgs/msg/Image"
        out[Topics.camera_info(cam)] = "sensor_msgs/msg/CameraInfo"
        if depth:
            out[Topics.camera_depth(cam)] = "sensor_msgs/msg/Image"
    return out


__all__ = ["Episode", "EpisodeError", "EpisodeWriter", "JointStream", "Command", "CameraStream", "load_episode",
           "episode_topics", "META_TOPIC"]
