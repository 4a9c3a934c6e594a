"""The camera layer without ROS: sources, the latest-frame buffer, rate, reconnection with
backoff, camera config YAML, depth units and the RealSense conversions (no device needed)."""

import sys
import threading
import time
import types
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.camera_helpers import frame_index, make_video
from r2s2r.camera.config import CameraConfig, load_camera_config, make_source, parse_camera_config
from r2s2r.camera.info import CameraCalibration, write_calibration
from r2s2r.camera.sources import (Capture, EndOfStream, FolderSource, FrameSource, OpenCVSource, SourceError,
                                  TwinSource, device_stamp)
from r2s2r.camera.stream import (ENDED, RECONNECTING, STREAMING, Backoff, CameraStream, LatestFrame,
                                 encode_depth)
from r2s2r.config import ConfigError

REPO = Path(__file__).resolve().parents[1]


def config(**overrides) -> CameraConfig:
    values = dict(name="cam", source="device:0", frame_id="cam_optical_frame", rate=200.0,
                  reconnect_initial=0.01, reconnect_max=0.04)
    values.update(overrides)
    return CameraConfig(**values)


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


class CountingSource(FrameSource):
    """A live source that makes numbered frames; it can be unplugged and plugged back in."""

    def __init__(self, period=0.002, size=(8, 6)):
        super().__init__("fake:counting")
        self.period, self.size = period, size
        self.count = 0
        self.present = threading.Event()
        self.present.set()
        self.opens = 0

    def open(self):
        if not self.present.is_set():
            raise SourceError("fake camera unplugged")
        self.opens += 1

    def read(self):
        time.sleep(self.period)
        if not self.present.is_set():
            raise SourceError("fake camera stopped sending")
        self.count += 1
        image = np.zeros((self.size[1], self.size[0], 3), np.uint8)
        high, low = divmod(self.count, 256)
        image[1:, 1:] = (high, low, high)  # the frame's number, whichever way round the channels go
        image[0, 0] = (1, 2, 3)
        return Capture(time.time(), image, "bgr8")

    def close(self):
        pass


def test_latest_frame_keeps_one_frame_and_counts_what_it_replaced():
    box = LatestFrame()
    for i in range(5):
        box.put(i)
    assert box.take(0) == 4 and box.dropped == 4
    assert box.take(0.01) is None


def test_backoff_doubles_up_to_its_maximum_and_resets():
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_a_slow_consumer_gets_the_newest_frames_and_the_rest_are_counted_as_dropped():
    source = CountingSource(period=0.001)
    stream = CameraStream(config(rate=1000.0), source)
    stream.start()
    taken = []
    try:
        for _ in range(8):
            produced = source.count
            assert wait_until(lambda produced=produced: source.count >= produced + 10)  # a consumer ten frames behind
            frame = stream.take(timeout=1.0)
            taken.append(256 * int(frame.image[1, 1, 0]) + int(frame.image[1, 1, 1]))
            assert taken[-1] >= produced + 9  # one of the newest, not the oldest waiting
    finally:
        stream.stop()
    stats = stream.stats()
    assert taken == sorted(set(taken))
    assert stats.delivered == 8
    assert stats.dropped >= 8 * 8  # of the ten or more frames per take, one was taken and one may wait
    assert stats.captured - stats.delivered - stats.dropped in (0, 1)  # at most one still waiting


def test_frames_are_converted_to_the_configured_size_and_encoding():
    source = CountingSource()
    stream = CameraStream(config(width=16, height=12, encoding="rgb8", name="wrist", frame_id="wrist_optical"), source)
    stream.start()
    try:
        frame = stream.take(timeout=5.0)
    finally:
        stream.stop()
    assert frame.image.shape == (12, 16, 3) and frame.encoding == "rgb8"
    assert frame.camera == "wrist" and frame.frame_id == "wrist_optical"
    assert tuple(frame.image[0, 0]) == (3, 2, 1)  # bgr (1, 2, 3) turned to rgb; corner pixel survives INTER_LINEAR
    assert abs(frame.stamp - time.time()) < 5.0
    info = stream.calibration(frame)
    assert (info.width, info.height, info.calibrated) == (16, 12, False)


def test_a_live_source_faster_than_the_rate_is_decimated():
    source = CountingSource(period=0.001)
    stream = CameraStream(config(rate=20.0), source)
    start = time.monotonic()
    stream.start()
    try:
        assert wait_until(lambda: stream.stats().captured >= 5)
    finally:
        stream.stop()
    elapsed = time.monotonic() - start
    stats = stream.stats()
    assert stats.captured <= 20.0 * elapsed + 2  # never faster than the rate
    assert stats.skipped > stats.captured  # the source offered far more


def test_a_source_that_disappears_is_reopened_with_backoff_and_reported():
    source = CountingSource()
    events, delays = [], []

    def on_event(stream, event):
        events.append(event)
        if event == "failed":
            delays.append(stream.stats().retry_delay)
    stream = CameraStream(config(), source, on_event=on_event)
    stream.start()
    try:
        assert wait_until(lambda: stream.stats().captured > 3)
        source.present.clear()
        assert wait_until(lambda: len(delays) >= 5)
        stats = stream.stats()
        assert stats.state == RECONNECTING and "unplugged" in stats.last_error and stats.failures >= 5
        assert delays[:5] == [0.01, 0.02, 0.04, 0.04, 0.04]  # doubling from reconnect.initial up to .max
        source.present.set()
        assert wait_until(lambda: stream.stats().reconnects == 1 and stream.stats().state == STREAMING)
        before = stream.stats().captured
        assert wait_until(lambda: stream.stats().captured > before + 3)
        source.present.clear()  # a second outage starts the backoff over: the first frame reset it
        assert wait_until(lambda: len(delays) >= 6)
        assert delays[5] == 0.01
    finally:
        stream.stop()
    assert events[0] == "connected" and "failed" in events and "reconnected" in events


def test_a_video_file_plays_once_with_at_end_end_and_the_stream_ends(tmp_path):
    video = make_video(tmp_path / "clip.avi", 12, size=(32, 24))
    cameras = parse_camera_config({"cameras": [{"name": "clip", "source": "file:clip.avi", "rate": 100.0,
                                                "at_end": "end"}]}, str(tmp_path / "cams.yaml"))
    stream = CameraStream(cameras[0], make_source(cameras[0]))
    assert cameras[0].source == f"file:{video}"
    stream.start()
    frames = []
    try:
        while not stream.ended:
            frame = stream.take(timeout=0.5)
            if frame is not None:
                frames.append(frame)
    finally:
        stream.stop()
    stats = stream.stats()
    assert stats.state == ENDED and stats.captured == 12 and stats.delivered + stats.dropped == 12
    indices = [frame_index(f.image) for f in frames]
    assert indices == sorted(set(indices)) and indices[-1] == 11  # in order, and the last one is never dropped
    stamps = [f.stamp for f in frames]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))


def test_a_video_file_loops_with_at_end_loop(tmp_path):
    make_video(tmp_path / "clip.avi", 5, size=(32, 24))
    cameras = parse_camera_config({"cameras": [{"name": "clip", "source": "file:clip.avi", "rate": 100.0}]},
                                  str(tmp_path / "cams.yaml"))
    stream = CameraStream(cameras[0], make_source(cameras[0]))
    stream.start()
    try:
        assert wait_until(lambda: stream.stats().captured >= 13)
        seen = [frame_index(stream.take(timeout=2.0).image) for _ in range(10)]
    finally:
        stream.stop()
    assert set(seen) <= set(range(5)) and stream.stats().state != ENDED
    assert sum(b < a for a, b in zip(seen, seen[1:])) >= 1  # back to the start: it looped


def test_a_folder_source_skips_files_that_are_not_images(tmp_path, caplog):
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.full((6, 8, 3), 8 * i, np.uint8))
    (tmp_path / "1b_notes.txt").write_text("not an image")
    source = FolderSource("folder:x", tmp_path)
    source.open()
    indices = []
    with pytest.raises(EndOfStream):
        while True:
            indices.append(int(source.read().image.mean() / 8))
    assert indices == [0, 1, 2]
    assert "1b_notes.txt" in caplog.text
    empty = tmp_path / "junk"
    empty.mkdir()
    (empty / "a.txt").write_text("x")
    junk = FolderSource("folder:junk", empty)
    junk.open()
    with pytest.raises(SourceError, match="no image OpenCV can read"):
        junk.read()


def test_a_missing_network_stream_or_device_is_a_source_error_not_a_crash():
    with pytest.raises(SourceError, match="cannot open network stream"):
        OpenCVSource("http://127.0.0.1:9/none.mjpg", "network", "http://127.0.0.1:9/none.mjpg", timeout_s=0.5).open()
    with pytest.raises(SourceError, match="cannot open camera device"):
        OpenCVSource("device:/dev/video_r2s2r_absent", "device", "/dev/video_r2s2r_absent").open()


def test_device_stamps_use_the_driver_buffer_time_when_it_is_plausible():
    assert device_stamp(buffer_ms=99_950.0, wall=1_000.0, monotonic=100.0) == pytest.approx(999.95)
    assert device_stamp(buffer_ms=0.0, wall=1_000.0, monotonic=100.0) == 1_000.0  # no timestamp
    assert device_stamp(buffer_ms=1.7e12, wall=1_000.0, monotonic=100.0) == 1_000.0  # another clock


def test_depth_images_follow_rep_118():
    depth = np.array([[0.0, 0.5], [np.nan, 70.0]], np.float32)
    mm = encode_depth(depth, "16UC1")
    assert mm.dtype == np.uint16 and mm.tolist() == [[0, 500], [0, 0]]  # 70 m does not fit in a uint16 of mm
    metres = encode_depth(depth, "32FC1")
    assert metres.dtype == np.float32 and np.isnan(metres[0, 0]) and metres[0, 1] == 0.5 and metres[1, 1] == 70.0


def test_a_twin_camera_source_renders_with_the_twin_intrinsics_and_depth():
    scene = REPO / "config" / "scenes" / "franka_table.yaml"
    cameras = parse_camera_config({"cameras": [{"name": "scene", "source": f"twin:{scene}#scene", "rate": 100.0,
                                                "depth": True, "depth_encoding": "32FC1", "width": 160,
                                                "height": 120}]}, "<test>")
    stream = CameraStream(cameras[0], make_source(cameras[0]))
    assert isinstance(stream.source, TwinSource)
    stream.start()
    try:
        frame = stream.take(timeout=30.0)
    finally:
        stream.stop()
    assert frame.image.shape == (120, 160, 3) and frame.depth.shape == (120, 160) and frame.depth.dtype == np.float32
    assert 0.5 < float(np.nanmedian(frame.depth)) < 5.0  # the table and floor, metres away
    info = stream.calibration(frame)
    native = CameraCalibration.pinhole(320, 240, *_twin_intrinsics(scene, "scene"), camera_name="scene")
    assert info == native.scaled(160, 120) and info.cx == pytest.approx(79.5)


def _twin_intrinsics(scene, camera):
    from r2s2r.sim.scene import load_scene
    from r2s2r.sim.twin import Twin
    twin = Twin(load_scene(scene))
    assert twin.camera_resolution(camera) == (320, 240)
    return twin.camera_intrinsics(camera)


# -- camera config YAML ------------------------------------------------------------------------
def test_example_camera_configs_load():
    paths = sorted((REPO / "config" / "cameras").glob("*.yaml"))
    assert paths
    for path in paths:
        cameras = load_camera_config(path)
        assert cameras and all(c.frame_id for c in cameras)
        for camera in cameras:
            make_source(camera)  # every URI maps to a source without opening it


def test_camera_info_sets_the_output_size_and_must_match_an_explicit_one(tmp_path):
    write_calibration(CameraCalibration.pinhole(640, 480, 500, 500, 319.5, 239.5), tmp_path / "cam.yaml")
    cameras = parse_camera_config({"cameras": [{"name": "a", "source": "device:0", "camera_info": "cam.yaml"}]},
                                  str(tmp_path / "cams.yaml"))
    assert (cameras[0].width, cameras[0].height) == (640, 480) and cameras[0].calibration.fx == 500
    with pytest.raises(ConfigError, match=r"cameras\[0\] \(a\).camera_info: expected a calibration for the configured "
                                          r"320x240 image.*is for 640x480"):
        parse_camera_config({"cameras": [{"name": "a", "source": "device:0", "camera_info": "cam.yaml",
                                          "width": 320, "height": 240}]}, str(tmp_path / "cams.yaml"))


@pytest.mark.parametrize("camera, match", [
    ({"name": "a", "source": "webcam0"}, r"cameras\[0\] \(a\).source: expected device:INDEX\|PATH"),
    ({"name": "a", "source": "file:missing.mp4"}, "file:PATH naming an existing video file"),
    ({"name": "a", "source": "folder:missing"}, "folder:DIR naming an existing folder"),
    ({"name": "a", "source": "device:zero"}, r"device:INDEX \(0, 1, ...\)"),
    ({"name": "a", "source": "device:0", "depth": True}, "only realsense: and twin: sources measure depth"),
    ({"name": "a", "source": "rtsp://cam/live", "at_end": "end"}, "only file: and folder: sources end"),
    ({"name": "a", "source": "device:0", "rate": 0}, r"cameras\[0\] \(a\).rate: expected a number greater than 0"),
    ({"name": "a", "source": "device:0", "width": 640}, "width and height given together"),
    ({"name": "a", "source": "device:0", "encoding": "yuv422"}, "expected one of rgb8, bgr8"),
    ({"name": "cam/high", "source": "device:0"}, "letters, digits and underscores"),
    ({"name": "a", "source": "device:0", "exposure": 3}, "unknown key"),
    ({"name": "a", "source": "twin:config/scenes/franka_table.yaml#nope"}, "a camera of .*: scene, wrist"),
])
def test_bad_camera_configs_name_the_key_and_what_was_expected(tmp_path, camera, match):
    with pytest.raises(ConfigError, match=match):
        parse_camera_config({"cameras": [camera]}, str(tmp_path / "cams.yaml"))


def test_duplicate_camera_names_are_rejected(tmp_path):
    with pytest.raises(ConfigError, match="unique camera names"):
        parse_camera_config({"cameras": [{"name": "a", "source": "device:0"}, {"name": "a", "source": "device:1"}]},
                            str(tmp_path / "c.yaml"))


# -- RealSense, without a device ----------------------------------------------------------------
def test_realsense_conversions():
    from r2s2r.camera.realsense import calibration_from_intrinsics, capture_stamp, depth_in_metres
    assert capture_stamp(1_000_500.0, True, arrival=1000.6) == pytest.approx(1000.5)
    assert capture_stamp(123.0, False, arrival=1000.6) == 1000.6  # the camera's own clock
    assert capture_stamp(5_000_000.0, True, arrival=1000.6) == 1000.6  # implausible: arrival time
    z16 = np.array([[0, 1000], [2500, 65535]], np.uint16)
    assert np.allclose(depth_in_metres(z16, 0.001), [[0.0, 1.0], [2.5, 65.535]])
    assert encode_depth(depth_in_metres(z16, 0.001), "16UC1").tolist() == z16.tolist()  # exact round trip
    intrinsics = types.SimpleNamespace(width=640, height=480, fx=615.0, fy=615.5, ppx=321.2, ppy=238.9,
                                       coeffs=[0.1, -0.2, 0.001, 0.002, 0.03])
    cal = calibration_from_intrinsics(intrinsics, "inverse_brown_conrady", "d435")
    assert (cal.fx, cal.fy, cal.cx, cal.cy) == (615.0, 615.5, 321.2, 238.9)
    assert cal.D.tolist() == [0.1, -0.2, 0.001, 0.002, 0.03] and cal.distortion_model == "plumb_bob"
    with pytest.raises(SourceError, match="no camera_info equivalent"):
        calibration_from_intrinsics(intrinsics, "ftheta", "t265")


def test_a_realsense_source_without_pyrealsense2_says_what_to_install(monkeypatch):
    from r2s2r.camera.realsense import RealSenseSource
    monkeypatch.setitem(sys.modules, "pyrealsense2", None)  # import fails as if not installed
    with pytest.raises(SourceError, match="pip install pyrealsense2"):
        RealSenseSource("realsense:", "").open()


def fake_pyrealsense2():
    """Enough of pyrealsense2's API to drive RealSenseSource: one colour + depth frame set."""
    rs = types.ModuleType("pyrealsense2")
    rs.stream = types.SimpleNamespace(color="color", depth="depth")
    rs.format = types.SimpleNamespace(rgb8="rgb8", z16="z16")
    rs.timestamp_domain = types.SimpleNamespace(global_time="global", hardware_clock="hardware")
    rs.calls = []

    class Frame:
        def __init__(self, data, stamp_ms):
            self.data, self.stamp_ms = data, stamp_ms

        def __bool__(self):
            return True

        def get_data(self):
            return self.data

        def get_timestamp(self):
            return self.stamp_ms

        def get_frame_timestamp_domain(self):
            return rs.timestamp_domain.global_time

    class FrameSet:
        def __init__(self, aligned):
            self.aligned = aligned

        def get_color_frame(self):
            return Frame(np.full((4, 6, 3), 7, np.uint8), time.time() * 1000 - 20)

        def get_depth_frame(self):
            return Frame(np.full((4, 6), 750 if self.aligned else 1, np.uint16), 0.0)

    class Config:
        def enable_device(self, serial):
            rs.calls.append(("device", serial))

        def enable_stream(self, *args):
            rs.calls.append(("stream",) + args)

    class Pipeline:
        def start(self, config):
            intrinsics = types.SimpleNamespace(width=6, height=4, fx=5.0, fy=5.0, ppx=2.5, ppy=1.5,
                                               coeffs=[0, 0, 0, 0, 0], model=types.SimpleNamespace(name="brown_conrady"))
            stream = types.SimpleNamespace(as_video_stream_profile=lambda: types.SimpleNamespace(
                get_intrinsics=lambda: intrinsics))
            sensor = types.SimpleNamespace(get_depth_scale=lambda: 0.002)
            return types.SimpleNamespace(get_device=lambda: types.SimpleNamespace(first_depth_sensor=lambda: sensor),
                                         get_stream=lambda kind: stream)

        def wait_for_frames(self, timeout_ms):
            return FrameSet(aligned=False)

        def stop(self):
            rs.calls.append(("stop",))

    class Align:
        def __init__(self, to):
            rs.calls.append(("align", to))

        def process(self, frames):
            return FrameSet(aligned=True)

    rs.config, rs.pipeline, rs.align = Config, Pipeline, Align
    return rs


def test_a_realsense_source_aligns_depth_to_colour_and_scales_it(monkeypatch):
    from r2s2r.camera.realsense import RealSenseSource
    rs = fake_pyrealsense2()
    monkeypatch.setitem(sys.modules, "pyrealsense2", rs)
    source = RealSenseSource("realsense:123", "123", 6, 4, 30.0, depth=True)
    source.open()
    capture = source.read()
    source.close()
    assert ("device", "123") in rs.calls and ("align", "color") in rs.calls and ("stop",) in rs.calls
    assert ("stream", "color", 6, 4, "rgb8", 30) in rs.calls and ("stream", "depth", 6, 4, "z16", 30) in rs.calls
    assert capture.encoding == "rgb8" and capture.image.shape == (4, 6, 3)
    assert np.allclose(capture.depth, 1.5)  # 750 units of 2 mm, from the aligned frame set
    assert abs(capture.stamp - (time.time() - 0.02)) < 0.5  # the exposure time, not arrival
    assert source.calibration().fx == 5.0
