"""Intel RealSense colour and depth, depth aligned to colour (pyrealsense2, an optional extra).

pyrealsense2 is imported when a RealSense source opens, so the package imports and runs
without it; opening one without it installed is a SourceError that says what to install.
The helpers below hold the conversions (timestamps, depth units, intrinsics) and are tested
without a device.
"""

from __future__ import annotations

import time

import numpy as np

from r2s2r.camera.info import CameraCalibration
from r2s2r.camera.sources import Capture, FrameSource, SourceError

INSTALL_HINT = "pip install pyrealsense2 (the RealSense SDK's Python wrapper)"
# librealsense distortion models -> sensor_msgs ones: the Brown-Conrady variants carry plumb_bob's
# five coefficients (k1, k2, p1, p2, k3), Kannala-Brandt 4 is the equidistant model.
DISTORTION = {"none": "plumb_bob", "brown_conrady": "plumb_bob", "modified_brown_conrady": "plumb_bob",
              "inverse_brown_conrady": "plumb_bob", "kannala_brandt4": "equidistant"}


def import_pyrealsense2():
    try:
        import pyrealsense2
    except ImportError as exc:
        raise SourceError(f"a realsense: source needs pyrealsense2, which is not installed ({exc}); "
                          f"{INSTALL_HINT}") from None
    return pyrealsense2


def capture_stamp(timestamp_ms: float, on_host_clock: bool, arrival: float) -> float:
    """A RealSense frame's capture time on the wall clock.

    With the global-time domain the SDK maps the camera's clock onto the host's, so the frame
    timestamp is the exposure time in host milliseconds; the hardware-clock domain is the
    camera's own clock and only the arrival time is comparable. A host timestamp more than a
    second from arrival is not trusted either.
    """
    stamp = timestamp_ms / 1000.0
    return stamp if on_host_clock and abs(arrival - stamp) < 1.0 else arrival


def depth_in_metres(z16: np.ndarray, depth_scale: float) -> np.ndarray:
    """Raw z16 depth units -> float32 metres (0 stays 0: no depth)."""
    return z16.astype(np.float32) * np.float32(depth_scale)


def calibration_from_intrinsics(intrinsics, distortion_name: str, camera_name: str) -> CameraCalibration:
    """A CameraCalibration from an rs.intrinsics (width, height, fx, fy, ppx, ppy, coeffs)."""
    model = DISTORTION.get(distortion_name)
    if model is None:
        raise SourceError(f"RealSense distortion model {distortion_name!r} has no camera_info equivalent; "
                          f"expected one of {', '.join(DISTORTION)}")
    coeffs = list(intrinsics.coeffs)
    coeffs = coeffs[:4] if model == "equidistant" else (coeffs + [0.0] * 5)[:5]
    return CameraCalibration.pinhole(intrinsics.width, intrinsics.height, intrinsics.fx, intrinsics.fy,
                                     intrinsics.ppx, intrinsics.ppy, coeffs, camera_name, model)


class RealSenseSource(FrameSource):
    """`realsense:` (the first device) or `realsense:SERIAL`; colour as rgb8, depth aligned to it."""

    has_depth = True

    def __init__(self, uri: str, serial: str = "", width: int = 640, height: int = 480, rate: float = 30.0,
                 depth: bool = False, timeout_s: float = 5.0):
        super().__init__(uri)
        self.serial, self.width, self.height, self.rate = serial, width, height, rate
        self.depth, self.timeout_s = depth, timeout_s
        self._rs = None
        self._pipeline = None
        self._align = None
        self._depth_scale = 0.0
        self._calibration: CameraCalibration | None = None

    def open(self) -> None:
        rs = self._rs = import_pyrealsense2()
        config = rs.config()
        if self.serial:
            config.enable_device(self.serial)
        fps = int(round(self.rate))
        config.enable_stream(rs.stream.color, self.width, self.height, rs.format.rgb8, fps)
        if self.depth:
            config.enable_stream(rs.stream.depth, self.width, self.height, rs.format.z16, fps)
        pipeline = rs.pipeline()
        try:
            profile = pipeline.start(config)
        except RuntimeError as exc:
            which = f"serial {self.serial}" if self.serial else "any serial"
            raise SourceError(f"cannot start RealSense ({which}) at {self.width}x{self.height} {fps} fps: {exc}") from None
        self._pipeline = pipeline
        if self.depth:
            self._depth_scale = profile.get_device().first_depth_sensor().get_depth_scale()
            self._align = rs.align(rs.stream.color)
        stream = profile.get_stream(rs.stream.color).as_video_stream_profile()
        intrinsics = stream.get_intrinsics()
        self._calibration = calibration_from_intrinsics(intrinsics, intrinsics.model.name, self.serial or "realsense")

    def read(self) -> Capture:
        rs = self._rs
        try:
            frames = self._pipeline.wait_for_frames(int(self.timeout_s * 1000))
        except RuntimeError as exc:
            raise SourceError(f"no frame from RealSense {self.serial or ''} within {self.timeout_s:g} s: {exc}") from None
        arrival = time.time()
        if self._align is not None:
            frames = self._align.process(frames)
        color = frames.get_color_frame()
        if not color:
            raise SourceError("RealSense frame set without a colour frame")
        on_host = color.get_frame_timestamp_domain() == rs.timestamp_domain.global_time
        stamp = capture_stamp(color.get_timestamp(), on_host, arrival)
        depth = None
        if self._align is not None:
            depth_frame = frames.get_depth_frame()
            if depth_frame:
                depth = depth_in_metres(np.asanyarray(depth_frame.get_data()), self._depth_scale)
        return Capture(stamp, np.asanyarray(color.get_data()).copy(), "rgb8", depth)

    def calibration(self) -> CameraCalibration | None:
        return self._calibration

    def close(self) -> None:
        if self._pipeline is not None:
            try:
                self._pipeline.stop()
            finally:
                self._pipeline = None


__all__ = ["RealSenseSource", "capture_stamp", "depth_in_metres", "calibration_from_intrinsics",
           "import_pyrealsense2", "INSTALL_HINT"]
