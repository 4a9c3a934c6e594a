"""Frame sources behind one interface: OpenCV devices, video files, network streams, folders of
images, Intel RealSense (camera/realsense.py) and cameras rendered by the MuJoCo twin.

A source is opened, read and closed on one thread (the stream's capture thread): OpenGL
contexts and some camera SDKs insist on it. Every Capture carries the time the frame was
captured, on the wall clock ROS stamps messages with, not the time anyone publishes it.

URIs:
  device:0 | device:/dev/video2     a V4L2 (or other OpenCV) camera
  file:/path/clip.mp4               a video file
  rtsp://host/path | http(s)://...  a network stream (RTSP, MJPEG over HTTP, HLS, ...)
  folder:/path/dir                  the images of a folder, in name order
  realsense: | realsense:SERIAL     an Intel RealSense (pyrealsense2, optional extra)
  twin:SCENE.yaml#CAMERA            a camera of a scene, rendered by the MuJoCo twin
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from r2s2r.camera.info import CameraCalibration

log = logging.getLogger("r2s2r.camera")

SCHEMES = ("device:", "file:", "folder:", "rtsp://", "rtsps://", "http://", "https://", "realsense:", "twin:")
URI_FORMS = ("device:INDEX|PATH, file:PATH, folder:DIR, rtsp://..., http(s)://..., realsense:[SERIAL], "
             "twin:SCENE.yaml#CAMERA")


class SourceError(RuntimeError):
    """A source could not open or deliver a frame; the stream reports it and reconnects."""


class EndOfStream(Exception):
    """A finite source (a video file, a folder) has delivered its last frame."""


@dataclass(frozen=True)
class Capture:
    stamp: float  # capture time, seconds since the epoch (the clock ROS stamps with)
    image: np.ndarray  # H x W x 3 uint8
    encoding: str  # rgb8 | bgr8
    depth: np.ndarray | None = None  # H x W float32 metres along the optical axis, aligned to image; 0 or NaN: none


class FrameSource(ABC):
    live = True  # delivers frames at its own pace; otherwise the stream paces reads to its rate
    finite = False  # runs out of frames (EndOfStream); finite sources also have rewind()
    has_depth = False

    def __init__(self, uri: str):
        self.uri = uri

    @abstractmethod
    def open(self) -> None:
        """Connect; SourceError if the source is not there (the stream retries with backoff)."""

    @abstractmethod
    def read(self) -> Capture:
        """The next frame; blocks until a live source delivers one. SourceError, EndOfStream."""

    @abstractmethod
    def close(self) -> None:
        ...

    def calibration(self) -> CameraCalibration | None:
        """Intrinsics the source itself knows (a twin camera, a RealSense), at its own resolution."""
        return None

    def __repr__(self):
        return f"{type(self).__name__}({self.uri!r})"


def device_stamp(buffer_ms: float, wall: float, monotonic: float) -> float:
    """The capture time of a V4L2 frame on the wall clock.

    V4L2 stamps each buffer on the monotonic clock when the driver filled it, which OpenCV
    reports as CAP_PROP_POS_MSEC; frames waiting in the driver's queue are older than the
    moment we dequeue them. A timestamp that is not plausibly recent on the monotonic clock
    (another clock, or none) falls back to the time the frame was dequeued.
    """
    age = monotonic - buffer_ms / 1000.0
    return wall - age if 0.0 <= age < 1.0 else wall


class OpenCVSource(FrameSource):
    """A cv2.VideoCapture: a device (`device:`), a video file (`file:`) or a network stream."""

    def __init__(self, uri: str, kind: str, target: int | str, width: int | None = None, height: int | None = None,
                 rate: float | None = None, fourcc: str | None = None, timeout_s: float = 5.0):
        super().__init__(uri)
        self.kind = kind  # device | file | network
        self.target = target
        self.width, self.height, self.rate, self.fourcc = width, height, rate, fourcc
        self.timeout_s = timeout_s
        self.live = kind != "file"
        self.finite = kind == "file"
        self._capture: cv2.VideoCapture | None = None

    def open(self) -> None:
        timeouts = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, int(self.timeout_s * 1000),
                    cv2.CAP_PROP_READ_TIMEOUT_MSEC, int(self.timeout_s * 1000)]
        if self.kind == "network":
            capture = cv2.VideoCapture(self.target, cv2.CAP_FFMPEG, timeouts)
        elif self.kind == "device":
            capture = cv2.VideoCapture(self.target, cv2.CAP_ANY, timeouts)
        else:
            capture = cv2.VideoCapture(self.target)
        if not capture.isOpened():
            capture.release()
            what = {"device": "camera device", "file": "video file", "network": "network stream"}[self.kind]
            raise SourceError(f"cannot open {what} {self.target}")
        if self.kind == "device":
            # Ask; the driver picks the nearest mode it has (the stream resizes the rest).
            if self.fourcc:
                capture.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*self.fourcc))
            if self.width and self.height:
                capture.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
                capture.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
            if self.rate:
                capture.set(cv2.CAP_PROP_FPS, self.rate)
            capture.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # the newest frame, not a queue of old ones
        self._capture = capture

    def read(self) -> Capture:
        if self._capture is None:
            raise SourceError(f"{self.uri} is not open")
        grabbed = self._capture.grab()
        wall, monotonic = time.time(), time.monotonic()  # before decoding: decode time is not capture time
        if not grabbed:
            if self.kind == "file":
                raise EndOfStream(self.uri)
            raise SourceError(f"no frame from {self.target} (disconnected or timed out)")
        ok, image = self._capture.retrieve()
        if not ok or image is None:
            raise SourceError(f"could not decode a frame from {self.target}")
        stamp = wall
        if self.kind == "device":
            stamp = device_stamp(self._capture.get(cv2.CAP_PROP_POS_MSEC), wall, monotonic)
        if image.ndim == 2:
            image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        return Capture(stamp, image, "bgr8")

    def rewind(self) -> None:
        # Reopening is the one rewind every container and codec supports.
        self.close()
        self.open()

    def close(self) -> None:
        if self._capture is not None:
            self._capture.release()
            self._capture = None


class FolderSource(FrameSource):
    """The images of a folder in name order; files OpenCV cannot read are skipped with a warning."""

    live = False
    finite = True

    def __init__(self, uri: str, folder: Path):
        super().__init__(uri)
        self.folder = folder
        self._files: list[Path] = []
        self._index = 0
        self._warned: set[str] = set()

    def open(self) -> None:
        if not self.folder.is_dir():
            raise SourceError(f"folder {self.folder} does not exist")
        self._files = sorted(p for p in self.folder.iterdir() if p.is_file())
        if not self._files:
            raise SourceError(f"folder {self.folder} has no files")
        self._index = 0

    def read(self) -> Capture:
        while self._index < len(self._files):
            path = self._files[self._index]
            self._index += 1
            stamp = time.time()
            image = cv2.imread(str(path), cv2.IMREAD_COLOR)
            if image is not None:
                return Capture(stamp, image, "bgr8")
            if path.name not in self._warned:
                self._warned.add(path.name)
                log.warning("%s: skipping %s, not an image OpenCV can read", self.uri, path.name)
        if not any(p.name not in self._warned for p in self._files):
            raise SourceError(f"folder {self.folder} has no image OpenCV can read")
        raise EndOfStream(self.uri)

    def rewind(self) -> None:
        self._index = 0

    def close(self) -> None:
        self._files = []


class TwinSource(FrameSource):
    """A camera of a scene rendered by the MuJoCo twin (the scene at its initial state)."""

    live = False
    has_depth = True

    def __init__(self, uri: str, scene_path: Path, camera: str, depth: bool = False):
        super().__init__(uri)
        self.scene_path, self.camera, self.depth = scene_path, camera, depth
        self._twin = None
        self._renderer = None

    def open(self) -> None:
        from r2s2r.sim.render import TwinRenderer
        from r2s2r.sim.scene import load_scene
        from r2s2r.sim.twin import Twin
        self._twin = Twin(load_scene(self.scene_path))
        self._renderer = TwinRenderer(self._twin)  # its GL context belongs to this thread

    def read(self) -> Capture:
        stamp = time.time()
        rgb = self._renderer.rgb(self.camera)
        depth = self._renderer.depth(self.camera) if self.depth else None
        return Capture(stamp, rgb, "rgb8", depth)

    def calibration(self) -> CameraCalibration | None:
        if self._twin is None:
            return None
        width, height = self._twin.camera_resolution(self.camera)
        return CameraCalibration.pinhole(width, height, *self._twin.camera_intrinsics(self.camera),
                                         camera_name=self.camera)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
        self._renderer = self._twin = None


def parse_uri(uri: str) -> tuple[str, str]:
    """(scheme, rest) of a source URI; ValueError naming the accepted forms."""
    for scheme in SCHEMES:
        if uri.startswith(scheme):
            rest = uri[len(scheme):]
            if scheme.endswith("://"):
                return "network", uri
            if not rest and scheme != "realsense:":
                break
            return scheme[:-1], rest
    raise ValueError(f"camera source {uri!r}; expected one of {URI_FORMS}")


__all__ = ["Capture", "FrameSource", "SourceError", "EndOfStream", "OpenCVSource", "FolderSource", "TwinSource",
           "parse_uri", "device_stamp", "SCHEMES", "URI_FORMS"]
