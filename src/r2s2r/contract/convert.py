"""Message <-> numpy conversions for the interface's message types. ROS side: nodes only."""

from __future__ import annotations

import json
import math
from typing import Mapping, Sequence

import numpy as np
from builtin_interfaces.msg import Duration, Time
from rosgraph_msgs.msg import Clock
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Pose, PoseArray
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension, String
from trajectory_msgs.msg import JointTrajectory

from r2s2r.contract.types import CameraFrame, CommandError, JointSample

# Level names of diagnostic_msgs/DiagnosticStatus, as bytes the message takes.
OK, WARN, ERROR, STALE = (bytes([v]) for v in (0, 1, 2, 3))


def to_time(seconds: float) -> Time:
    sec = math.floor(seconds)
    return Time(sec=int(sec), nanosec=min(int(round((seconds - sec) * 1e9)), 999_999_999))



def clock_msg(seconds: float) -> Clock:
    """rosgraph_msgs/Clock of a simulated time (what /clock carries)."""
    return Clock(clock=to_time(seconds))

def to_duration(seconds: float) -> Duration:
    sec = math.floor(seconds)
    return Duration(sec=int(sec), nanosec=min(int(round((seconds - sec) * 1e9)), 999_999_999))


def from_time(stamp: Time | Duration) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def joint_state_msg(sample: JointSample, stamp_offset: float = 0.0) -> JointState:
    """`stamp_offset`: added to the sample's stamp (a robot clock onto ROS time)."""
    msg = JointState()
    msg.header.stamp = to_time(sample.stamp + stamp_offset)
    msg.name = list(sample.names)
    msg.position = sample.position.tolist()
    msg.velocity = sample.velocity.tolist()
    msg.effort = sample.effort.tolist()
    return msg


def joint_sample(msg: JointState) -> JointSample:
    n = len(msg.name)
    def field(values):
        return np.asarray(values, dtype=float) if len(values) == n else np.full(n, np.nan)
    return JointSample(from_time(msg.header.stamp), tuple(msg.name), field(msg.position),
                       field(msg.velocity), field(msg.effort))


def string_msg(text: str) -> String:
    return String(data=text)


def object_sizes_msg(sizes: Mapping[str, Sequence[float]]) -> String:
    """twin/object_sizes: each object's bounding-box extents along its own axes (m), as JSON
    (no standard message carries a named size; vision_msgs is not among the wheels)."""
    return String(data=json.dumps({name: [float(v) for v in extents] for name, extents in sizes.items()}))


def object_sizes(msg: String) -> dict[str, np.ndarray]:
    """The sizes of a twin/object_sizes message; ValueError says what is wrong with a bad one."""
    expected = "a JSON object of object names to [x, y, z] extents in metres"
    try:
        data = json.loads(msg.data)
    except ValueError:
        raise ValueError(f"not JSON; expected {expected}") from None
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}; expected {expected}")
    sizes = {}
    for name, extents in data.items():
        values = np.asarray(extents, float) if isinstance(extents, list) and len(extents) == 3 else None
        if values is None or not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise ValueError(f"{name!r}: {extents!r}; expected {expected}, each positive")
        sizes[name] = values
    return sizes


def float_array_msg(values: Sequence[float], label: str = "") -> Float64MultiArray:
    msg = Float64MultiArray()
    values = [float(v) for v in values]
    msg.layout.dim = [MultiArrayDimension(label=label, size=len(values), stride=len(values))]
    msg.data = values
    return msg


def float_array(msg: Float64MultiArray) -> np.ndarray:
    return np.asarray(msg.data, dtype=float)


def trajectory_msg(names: Sequence[str], times: Sequence[float], positions,
                   velocities=None, accelerations=None, stamp: float = 0.0) -> JointTrajectory:
    from trajectory_msgs.msg import JointTrajectoryPoint
    msg = JointTrajectory()
    msg.header.stamp = to_time(stamp)
    msg.joint_names = list(names)
    for i, t in enumerate(times):
        point = JointTrajectoryPoint()
        point.positions = [float(v) for v in positions[i]]
        if velocities is not None:
            point.velocities = [float(v) for v in velocities[i]]
        if accelerations is not None:
            point.accelerations = [float(v) for v in accelerations[i]]
        point.time_from_start = to_duration(t)
        msg.points.append(point)
    return msg


def trajectory_arrays(msg: JointTrajectory):
    """(names, stamp, times, positions, velocities | None, accelerations | None).

    Raises CommandError for points whose fields have inconsistent lengths; value checks
    (finite, within limits) belong to the command path that knows the robot.
    """
    names = tuple(msg.joint_names)
    n = len(names)
    if not msg.points:
        raise CommandError("trajectory has no points; expected at least one JointTrajectoryPoint")
    times, positions, velocities, accelerations = [], [], [], []
    for i, point in enumerate(msg.points):
        if len(point.positions) != n:
            raise CommandError(f"trajectory point {i} has {len(point.positions)} positions, "
                               f"expected {n} (one per joint name)")
        for label, values, sink in (("velocities", point.velocities, velocities),
                                    ("accelerations", point.accelerations, accelerations)):
            if len(values) not in (0, n):
                raise CommandError(f"trajectory point {i} has {len(values)} {label}, expected 0 or {n}")
            sink.append(list(values) if len(values) == n else None)
        times.append(from_time(point.time_from_start))
        positions.append(list(point.positions))
    def stack(rows):
        return np.asarray(rows, dtype=float) if all(r is not None for r in rows) else None
    return (names, from_time(msg.header.stamp), np.asarray(times), np.asarray(positions, dtype=float),
            stack(velocities), stack(accelerations))


_ENCODINGS = {"rgb8": (np.uint8, 3), "bgr8": (np.uint8, 3), "mono8": (np.uint8, 1),
              "16UC1": (np.uint16, 1), "32FC1": (np.float32, 1)}


def image_msg(image: np.ndarray, encoding: str, stamp: float, frame_id: str) -> Image:
    dtype, channels = _ENCODINGS[encoding]
    image = np.ascontiguousarray(image, dtype=dtype)
    msg = Image()
    msg.header.stamp = to_time(stamp)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(image.shape[0]), int(image.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = msg.width * channels * image.dtype.itemsize
    msg.data = image.tobytes()
    return msg


def image_array(msg: Image) -> np.ndarray:
    """The pixels of an Image, H x W x C (H x W for one channel), rows read `step` bytes apart.
    An encoding this does not know, a size of 0, a step shorter than a row or data that is not
    height x step bytes is a ValueError that says what the message holds and what was expected."""
    if msg.encoding not in _ENCODINGS:
        raise ValueError(f"image encoding {msg.encoding!r}; expected one of {', '.join(_ENCODINGS)}")
    kind, channels = _ENCODINGS[msg.encoding]
    dtype = np.dtype(kind).newbyteorder(">" if msg.is_bigendian else "<")
    image = f"a {msg.width}x{msg.height} {msg.encoding} image"
    if msg.width < 1 or msg.height < 1:
        raise ValueError(f"{image}; expected a width and height of at least 1 pixel")
    row = msg.width * channels * dtype.itemsize
    if msg.step < row:
        raise ValueError(f"{image} with step {msg.step}; expected a step of at least {row} bytes (width x "
                         f"{channels * dtype.itemsize} bytes a pixel)")
    if len(msg.data) != msg.height * msg.step:
        raise ValueError(f"{image} with step {msg.step} and {len(msg.data)} bytes of data; expected "
                         f"{msg.height * msg.step} bytes (height x step)")
    pixels = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.step)[:, :row].view(dtype)
    pixels = pixels.astype(dtype.newbyteorder("="), copy=False)
    return pixels.reshape(msg.height, msg.width, channels) if channels > 1 else pixels


def camera_frame(msg: Image, camera: str) -> CameraFrame:
    return CameraFrame(camera, from_time(msg.header.stamp), image_array(msg), msg.encoding, msg.header.frame_id)


def camera_info_msg(width: int, height: int, fx: float, fy: float, cx: float, cy: float,
                    stamp: float, frame_id: str, distortion: Sequence[float] = (0, 0, 0, 0, 0),
                    model: str = "plumb_bob") -> CameraInfo:
    """CameraInfo of an ideal pinhole camera (R identity, P = [K | 0])."""
    k = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
    return camera_info_full_msg(width, height, k, distortion, np.eye(3), np.hstack([k, np.zeros((3, 1))]),
                                stamp, frame_id, model)


def camera_info_full_msg(width: int, height: int, k, d: Sequence[float], r, p, stamp: float, frame_id: str,
                         model: str = "plumb_bob") -> CameraInfo:
    """CameraInfo from a full calibration: K (3x3), D, R (3x3), P (3x4), row-major as the message holds them."""
    msg = CameraInfo()
    msg.header.stamp = to_time(stamp)
    msg.header.frame_id = frame_id
    msg.width, msg.height = int(width), int(height)
    msg.distortion_model = model
    msg.d = [float(v) for v in d]
    msg.k = [float(v) for v in np.asarray(k, float).reshape(9)]
    msg.r = [float(v) for v in np.asarray(r, float).reshape(9)]
    msg.p = [float(v) for v in np.asarray(p, float).reshape(12)]
    return msg


def camera_info_arrays(msg: CameraInfo) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """(width, height, K 3x3, D, R 3x3, P 3x4, distortion model) of a CameraInfo."""
    return (msg.width, msg.height, np.asarray(msg.k, float).reshape(3, 3), np.asarray(msg.d, float),
            np.asarray(msg.r, float).reshape(3, 3), np.asarray(msg.p, float).reshape(3, 4), msg.distortion_model)


def pose_array_msg(poses: Sequence[tuple[np.ndarray, np.ndarray]], stamp: float, frame_id: str) -> PoseArray:
    """Poses as (position xyz, quaternion wxyz as MuJoCo gives it)."""
    msg = PoseArray()
    msg.header.stamp = to_time(stamp)
    msg.header.frame_id = frame_id
    for pos, quat in poses:
        pose = Pose()
        pose.position.x, pose.position.y, pose.position.z = (float(v) for v in pos)
        pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = (float(v) for v in quat)
        msg.poses.append(pose)
    return msg


def diagnostic_status(name: str, hardware_id: str, level: bytes, message: str,
                      values: dict[str, object]) -> DiagnosticStatus:
    status = DiagnosticStatus()
    status.name = name
    status.hardware_id = hardware_id
    status.level = level
    status.message = message
    status.values = [KeyValue(key=str(k), value=str(v)) for k, v in values.items()]
    return status


def diagnostic_array(statuses: Sequence[DiagnosticStatus], stamp: float) -> DiagnosticArray:
    msg = DiagnosticArray()
    msg.header.stamp = to_time(stamp)
    msg.status = list(statuses)
    return msg
