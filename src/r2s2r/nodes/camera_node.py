"""camera_node: cameras into the graph, each on cameras/<name>/image_raw, camera_info and (with
depth) depth/image_raw, stamped with the frame's capture time.

Parameters:
  config   camera config YAML (config/cameras/*.yaml): the cameras, their sources, rates and sizes
  cameras  names of the config's cameras to run (default: all)

Each camera has a capture thread (camera.stream.CameraStream) and a publishing thread; the
stream keeps only the newest frame, so a slow publisher drops frames (counted) instead of
queueing them. Status goes to `diagnostics` once a second and at once on a failure, a
reconnection or the end of a file; the node exits when every camera configured with
`at_end: end` has published its last frame.
"""

from __future__ import annotations

import threading
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import CameraInfo, Image

from r2s2r.camera.config import load_camera_config, make_source
from r2s2r.camera.stream import ENDED, STREAMING, WAITING, CameraStream
from r2s2r.contract import Topics
from r2s2r.contract import convert, qos
from r2s2r.nodes.runtime import run

DISCOVERY_SETTLE_S = 0.5


class CameraNode(Node):
    def __init__(self, **node_options):
        super().__init__("camera", **node_options)  # options: a test's context and parameter_overrides
        self.declare_parameters("", [("config", ""), ("cameras", Parameter.Type.STRING_ARRAY)])
        path = self.get_parameter("config").value
        if not path:
            raise ValueError("parameter 'config' is required: a camera config YAML (see config/cameras/)")
        configs = load_camera_config(path)
        try:
            wanted = self.get_parameter("cameras").value
        except ParameterUninitializedException:
            wanted = None
        if wanted:
            unknown = sorted(set(wanted) - {c.name for c in configs})
            if unknown:
                raise ValueError(f"parameter 'cameras' names {unknown}; expected cameras of {path}: "
                                 f"{', '.join(c.name for c in configs)}")
            configs = tuple(c for c in configs if c.name in wanted)
        self.streams = [CameraStream(c, make_source(c), on_event=self._on_event) for c in configs]
        self.pub_image = {s.config.name: self.create_publisher(Image, Topics.camera_image(s.config.name), qos.SENSOR)
                          for s in self.streams}
        self.pub_info = {s.config.name: self.create_publisher(CameraInfo, Topics.camera_info(s.config.name),
                                                              qos.SENSOR) for s in self.streams}
        self.pub_depth = {s.config.name: self.create_publisher(Image, Topics.camera_depth(s.config.name), qos.SENSOR)
                          for s in self.streams if s.config.depth}
        self.pub_diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos.DIAGNOSTICS)
        self._diag_lock = threading.Lock()
        self._running = True
        self._shutdown_requested = False
        self._publish_threads = [threading.Thread(target=self._publish_loop, args=(s,), name=f"publish-{s.config.name}",
                                             daemon=True) for s in self.streams]
        for thread in self._publish_threads:
            thread.start()
        self._waiting = [s for s in self.streams if s.config.wait_for_subscribers]
        self._subscribed_at: dict[str, float] = {}
        for stream in self.streams:
            if stream not in self._waiting:
                stream.start()
        if self._waiting:
            self.create_timer(0.05, self._start_when_subscribed)
        self.create_timer(1.0, self._publish_diagnostics)
        self.get_logger().info("cameras " + "; ".join(
            f"{s.config.name} <- {s.config.source} at {s.config.rate:g} Hz" for s in self.streams))

    def _start_when_subscribed(self) -> None:
        now = time.monotonic()
        for stream in list(self._waiting):
            if self.pub_image[stream.config.name].get_subscription_count() < stream.config.wait_for_subscribers:
                self._subscribed_at.pop(stream.config.name, None)
                continue
            # Discovery finishes on each side on its own: the reader may not know this writer yet when
            # the writer already counts it, and a best-effort sample sent then is lost. Give it a moment.
            since = self._subscribed_at.setdefault(stream.config.name, now)
            if now - since >= DISCOVERY_SETTLE_S:
                self._waiting.remove(stream)
                stream.start()

    # -- publishing ---------------------------------------------------------------------------
    def _publish_loop(self, stream: CameraStream) -> None:
        name = stream.config.name
        while self._running:
            frame = stream.take(timeout=0.2)
            if frame is None:
                if stream.ended:
                    self._check_all_ended()
                    return
                continue
            calibration = stream.calibration(frame)
            self.pub_image[name].publish(convert.image_msg(frame.image, frame.encoding, frame.stamp, frame.frame_id))
            self.pub_info[name].publish(convert.camera_info_full_msg(
                calibration.width, calibration.height, calibration.K, calibration.D, calibration.R, calibration.P,
                frame.stamp, frame.frame_id, calibration.distortion_model))
            if frame.depth is not None and name in self.pub_depth:
                encoding = "16UC1" if frame.depth.dtype.kind == "u" else "32FC1"
                self.pub_depth[name].publish(convert.image_msg(frame.depth, encoding, frame.stamp, frame.frame_id))

    def _check_all_ended(self) -> None:
        ending = [s for s in self.streams if s.config.at_end == "end"]
        if ending and all(s.ended for s in ending) and not self._shutdown_requested:
            self._shutdown_requested = True
            self._publish_diagnostics()
            self.get_logger().info("every camera with at_end: end has published its last frame; exiting")
            rclpy.try_shutdown(context=self.context)

    # -- diagnostics --------------------------------------------------------------------------
    def _on_event(self, stream: CameraStream, event: str) -> None:
        stats = stream.stats()
        if event == "failed":
            self.get_logger().warning(f"{stream.config.name}: {stats.last_error}; retrying in {stats.retry_in:.1f} s")
        elif event == "reconnected":
            self.get_logger().info(f"{stream.config.name}: reconnected to {stream.config.source}")
        self._publish_diagnostics()

    def _status(self, stream: CameraStream):
        stats = stream.stats()
        c = stream.config
        if stats.state == STREAMING:
            level, message = convert.OK, f"streaming at {stats.fps:.1f} fps"
        elif stats.state in (ENDED, WAITING):
            level, message = convert.OK, stats.state
        elif stats.failures:
            level, message = convert.ERROR, f"{stats.state} in {stats.retry_in:.1f} s: {stats.last_error}"
        else:
            level, message = convert.WARN, stats.state
        values = {"state": stats.state, "source": c.source, "frame_id": c.frame_id, "rate": f"{c.rate:g}",
                  "fps": f"{stats.fps:.2f}", "captured": stats.captured, "published": stats.delivered,
                  "dropped": stats.dropped, "skipped": stats.skipped, "reconnects": stats.reconnects,
                  "failures": stats.failures, "last_error": stats.last_error, "last_stamp": f"{stats.last_stamp:.6f}",
                  "camera_info": c.camera_info or ""}
        return convert.diagnostic_status(f"r2s2r/camera/{c.name}", c.source, level, message, values)

    def _publish_diagnostics(self) -> None:
        with self._diag_lock:  # the timer and the capture threads both publish
            if not rclpy.ok(context=self.context):
                return
            stamp = self.get_clock().now().nanoseconds * 1e-9
            self.pub_diag.publish(convert.diagnostic_array([self._status(s) for s in self.streams], stamp))

    def close(self) -> None:
        self._running = False
        for stream in self.streams:
            stream.stop()
        for thread in self._publish_threads:
            thread.join(timeout=1.0)


def main(args=None) -> int:
    return run(CameraNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
