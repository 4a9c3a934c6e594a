"""One camera's ingestion: a capture thread that reads its source at the configured rate, turns
captures into CameraFrames (size, encoding, depth units) and leaves only the newest one for the
consumer, counting the ones it replaced; a failing source is reopened with exponential backoff.
No ROS here: camera_node publishes what `take()` returns.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import cv2
import numpy as np

from r2s2r.camera.config import CameraConfig
from r2s2r.camera.info import CameraCalibration
from r2s2r.camera.sources import Capture, EndOfStream, FrameSource, SourceError
from r2s2r.contract.types import CameraFrame

# States a stream reports (diagnostics say them as they are).
WAITING, CONNECTING, STREAMING, RECONNECTING, ENDED, STOPPED = (
    "waiting for subscribers", "connecting", "streaming", "reconnecting", "ended", "stopped")
# Depth a 16UC1 image can hold: millimetres in a uint16.
MAX_DEPTH_MM = 65535


def encode_depth(depth_m: np.ndarray, encoding: str) -> np.ndarray:
    """Metres -> a ROS depth image (REP 118): 16UC1 millimetres with 0 for no reading, or 32FC1
    metres with NaN for no reading."""
    depth_m = np.asarray(depth_m, dtype=np.float32)
    valid = np.isfinite(depth_m) & (depth_m > 0)
    if encoding == "32FC1":
        return np.where(valid, depth_m, np.float32(np.nan)).astype(np.float32)
    if encoding == "16UC1":
        mm = np.rint(np.where(valid, depth_m, 0.0) * 1000.0)
        return np.where(mm <= MAX_DEPTH_MM, mm, 0).astype(np.uint16)
    raise ValueError(f"depth encoding {encoding!r}; expected 16UC1 or 32FC1")


class LatestFrame:
    """A one-frame mailbox: a new frame replaces one nobody took, and that counts as a drop."""

    def __init__(self):
        self._condition = threading.Condition()
        self._frame = None
        self._closed = False
        self.dropped = 0

    def put(self, frame) -> None:
        with self._condition:
            if self._frame is not None:
                self.dropped += 1
            self._frame = frame
            self._condition.notify_all()

    def take(self, timeout: float | None = None):
        """The newest frame not yet taken, waiting up to `timeout` s; None if none came or it closed."""
        with self._condition:
            self._condition.wait_for(lambda: self._frame is not None or self._closed, timeout)
            frame, self._frame = self._frame, None
            return frame

    @property
    def pending(self) -> bool:
        with self._condition:
            return self._frame is not None

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()


class Backoff:
    """Delays between reconnection attempts: initial, doubling, at most `maximum`; reset on success."""

    def __init__(self, initial: float = 0.5, maximum: float = 5.0, factor: float = 2.0):
        self.initial, self.maximum, self.factor = initial, maximum, factor
        self._next = initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * self.factor, self.maximum)
        return delay

    def reset(self) -> None:
        self._next = self.initial


@dataclass(frozen=True)
class StreamStats:
    state: str
    captured: int  # frames read from the source and offered to the consumer
    delivered: int  # frames the consumer took
    dropped: int  # frames replaced before the consumer took them
    skipped: int  # frames a live source sent faster than the configured rate
    reconnects: int  # successful reopenings after a failure
    failures: int  # failed opens and reads
    fps: float  # delivered frames per second over the last few seconds
    last_error: str
    last_stamp: float  # capture time of the newest frame
    retry_in: float  # seconds to the next reconnection attempt (when reconnecting)
    retry_delay: float  # the backoff delay chosen after the latest failure, seconds


class CameraStream:
    """Reads one camera on its own thread; `take()` hands out the newest frame."""

    FPS_WINDOW_S = 2.0

    def __init__(self, config: CameraConfig, source: FrameSource,
                 on_event: Callable[["CameraStream", str], None] | None = None):
        self.config = config
        self.source = source
        self.on_event = on_event  # called from the capture thread on failures, reconnections and the end
        self._mailbox = LatestFrame()
        self._backoff = Backoff(config.reconnect_initial, config.reconnect_max)
        self._stop = threading.Event()
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._state = WAITING if config.wait_for_subscribers else CONNECTING
        self._counts = dict(captured=0, delivered=0, skipped=0, reconnects=0, failures=0)
        self._last_error = ""
        self._last_stamp = 0.0
        self._retry_at = 0.0
        self._retry_delay = 0.0
        self._delivered_at: deque[float] = deque(maxlen=1000)
        self._calibration: CameraCalibration | None = config.calibration
        self._thread = threading.Thread(target=self._run, name=f"camera-{config.name}", daemon=True)

    # -- the consumer's side -----------------------------------------------------------------
    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            with self._lock:
                self._state = CONNECTING
            self._thread.start()

    def take(self, timeout: float | None = None) -> CameraFrame | None:
        frame = self._mailbox.take(timeout)
        if frame is not None:
            with self._lock:
                self._counts["delivered"] += 1
                self._delivered_at.append(time.monotonic())
        return frame

    @property
    def ended(self) -> bool:
        """The source ran out (at_end: end) and its last frame has been taken."""
        return self._ended.is_set() and not self._mailbox.pending

    def calibration(self, frame: CameraFrame) -> CameraCalibration:
        """camera_info for a frame of this stream: the configured file, else what the source knows
        (scaled to the frame's size), else uncalibrated."""
        with self._lock:
            calibration = self._calibration
        height, width = frame.image.shape[:2]
        if calibration is None:
            return CameraCalibration.uncalibrated(width, height, self.config.name)
        return calibration.scaled(width, height)

    def stats(self) -> StreamStats:
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._delivered_at if t > now - self.FPS_WINDOW_S]
            fps = (len(recent) - 1) / (recent[-1] - recent[0]) if len(recent) > 1 and recent[-1] > recent[0] else 0.0
            return StreamStats(state=self._state, dropped=self._mailbox.dropped, fps=fps, last_error=self._last_error,
                               last_stamp=self._last_stamp, retry_in=max(0.0, self._retry_at - now),
                               retry_delay=self._retry_delay, **self._counts)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._mailbox.close()
        if self._thread.is_alive():
            self._thread.join(timeout)
        with self._lock:
            if self._state != ENDED:
                self._state = STOPPED

    # -- the capture thread ------------------------------------------------------------------
    def _set(self, state: str, event: str | None = None, error: str | None = None) -> None:
        with self._lock:
            self._state = state
            if error is not None:
                self._last_error = error
                self._counts["failures"] += 1
            if event == "reconnected":
                self._counts["reconnects"] += 1
        if event and self.on_event is not None:
            self.on_event(self, event)

    def _fail(self, error: Exception) -> None:
        delay = self._backoff.next()
        with self._lock:
            self._retry_at = time.monotonic() + delay
            self._retry_delay = delay
        # A SourceError says what failed in its own words; anything else is named by its type.
        message = str(error) if isinstance(error, SourceError) else f"{type(error).__name__}: {error}"
        self._set(RECONNECTING, "failed", message)
        self._stop.wait(delay)

    def _run(self) -> None:
        failed_before = False
        try:
            while not self._stop.is_set():
                try:
                    self.source.open()
                except Exception as error:  # any failure to open is retried; it may come back
                    failed_before = True
                    self._fail(error)
                    continue
                source_calibration = self.source.calibration()
                if source_calibration is not None and self.config.calibration is None:
                    with self._lock:
                        self._calibration = source_calibration
                self._set(STREAMING, "reconnected" if failed_before else "connected")
                try:
                    finished = self._stream()
                except Exception as error:
                    failed_before = True
                    self.source.close()
                    self._fail(error)
                    continue
                self.source.close()
                if finished:
                    self._ended.set()
                    self._set(ENDED, "ended")
                    return
        finally:
            self.source.close()

    def _stream(self) -> bool:
        """Read until stopped (False) or the source ends with at_end: end (True); raises on failure."""
        period = 1.0 / self.config.rate
        due = time.monotonic()
        first = True
        while not self._stop.is_set():
            if not self.source.live:  # recorded or rendered: read on the configured schedule
                wait = due - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    return False
            try:
                capture = self.source.read()
            except EndOfStream:
                if self.config.at_end == "end":
                    return True
                self.source.rewind()
                continue
            now = time.monotonic()
            if first:
                self._backoff.reset()  # a frame came through: the next failure starts the backoff over
                first = False
            if self.source.live:
                # Decimate a source faster than the rate; a quarter period of slack absorbs jitter.
                if now < due - 0.25 * period:
                    with self._lock:
                        self._counts["skipped"] += 1
                    continue
                due = max(due + period, now)
            else:
                due = due + period if now - due < period else now + period  # late by a period: no burst
            frame = self._frame(capture)
            with self._lock:
                self._counts["captured"] += 1
                self._last_stamp = capture.stamp
            self._mailbox.put(frame)
        return False

    def _frame(self, capture: Capture) -> CameraFrame:
        c = self.config
        image = capture.image
        size = (c.width, c.height) if c.width else (image.shape[1], image.shape[0])
        if (image.shape[1], image.shape[0]) != size:
            shrinking = size[0] < image.shape[1]
            image = cv2.resize(image, size, interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)
        if capture.encoding != c.encoding:
            image = image[..., ::-1]  # rgb8 <-> bgr8
        depth = None
        if c.depth and capture.depth is not None:
            depth = capture.depth
            if (depth.shape[1], depth.shape[0]) != size:
                depth = cv2.resize(depth, size, interpolation=cv2.INTER_NEAREST)  # no blending across edges
            depth = encode_depth(depth, c.depth_encoding)
        return CameraFrame(c.name, capture.stamp, np.ascontiguousarray(image), c.encoding, c.frame_id, depth)


__all__ = ["CameraStream", "StreamStats", "LatestFrame", "Backoff", "encode_depth", "WAITING", "CONNECTING",
           "STREAMING", "RECONNECTING", "ENDED", "STOPPED"]
