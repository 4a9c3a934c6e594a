"""camera_node over DDS, started by the stack runner: a video file published at its rate with its
capture stamps and calibration, a network stream that drops and comes back, a slow subscriber
that must not make the node hoard frames, and the twin camera stack that ships with r2s2r."""

import re
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from tests.camera_helpers import CameraListener, MjpegServer, frame_index, make_video
from r2s2r.waiting import wait_for
from r2s2r.camera.info import CameraCalibration, write_calibration
from r2s2r.contract import convert

REPO = Path(__file__).resolve().parents[1]
OK, WARN, ERROR = 0, 1, 2


def camera_stack(tmp_path: Path, cameras: list[dict]) -> Path:
    (tmp_path / "cameras.yaml").write_text(yaml.safe_dump({"cameras": cameras}))
    stack = tmp_path / "stack.yaml"
    stack.write_text(yaml.safe_dump({"name": "camera_test", "nodes": [
        {"name": "cameras", "executable": "camera_node", "parameters": [{"config": str(tmp_path / "cameras.yaml")}]}]}))
    return stack


@pytest.fixture
def listener():
    made = []

    def make(*cameras, delay=0.0):
        made.append(CameraListener(cameras, delay=delay, name=f"camera_listener_{len(made)}"))
        return made[-1]
    yield make
    for item in made:
        item.close()


def node_pid(stack) -> int:
    assert stack.wait_for_line("started cameras (camera_node), pid", 20), stack.output
    line = next(line for line in stack.lines if "started cameras (camera_node)" in line)
    return int(re.search(r"pid (\d+)", line).group(1))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_a_video_file_is_published_at_its_rate_with_capture_stamps_and_its_camera_info(
        tmp_path, stack_process, listener):
    frames, rate = 24, 15.0
    make_video(tmp_path / "clip.avi", frames)
    (tmp_path / "stills").mkdir()  # a second camera in the same node: a folder of five images
    for i in range(5):
        cv2.imwrite(str(tmp_path / "stills" / f"{i}.png"), np.full((30, 40, 3), 8 * i, np.uint8))
    calibration = CameraCalibration.pinhole(64, 48, 70.5, 70.25, 31.75, 23.5, (0.01, -0.02, 0.0, 0.001, 0.0),
                                            camera_name="clip")
    write_calibration(calibration, tmp_path / "clip_info.yaml")
    sub = listener("clip", "stills")
    stack = stack_process(camera_stack(tmp_path, [
        {"name": "clip", "source": "file:clip.avi", "rate": rate, "at_end": "end", "frame_id": "clip_optical",
         "camera_info": "clip_info.yaml", "encoding": "bgr8", "wait_for_subscribers": 1},
        {"name": "stills", "source": "folder:stills", "rate": 10.0, "at_end": "end", "wait_for_subscribers": 1}]))
    # The node ends once both cameras have published their last frame, and the stack with it.
    assert stack.proc.wait(60) == 0, stack.output
    assert wait_for(lambda: sub.count("clip") == frames and len(sub.infos["clip"]) == frames, 5), \
        f"{sub.count('clip')} images, {len(sub.infos['clip'])} infos\n{stack.output}"
    images = [m for _, m in sub.images["clip"]]
    assert [frame_index(convert.image_array(m)) for m in images] == list(range(frames))
    assert all(m.encoding == "bgr8" and m.header.frame_id == "clip_optical" and (m.width, m.height) == (64, 48)
               for m in images)
    stamps = np.array([convert.from_time(m.header.stamp) for m in images])
    assert np.all(np.diff(stamps) > 0)
    assert np.median(np.diff(stamps)) == pytest.approx(1 / rate, rel=0.25)
    arrivals = np.array([t for t, _ in sub.images["clip"]])
    assert np.all(arrivals >= stamps)  # stamped at capture, before it was sent
    for (_, info), image in zip(sub.infos["clip"], images):
        width, height, k, d, r, p, model = convert.camera_info_arrays(info)
        assert info.header.stamp == image.header.stamp and info.header.frame_id == "clip_optical"
        assert (width, height, model) == (64, 48, "plumb_bob")
        assert np.array_equal(k, calibration.K) and np.array_equal(d, calibration.D)
        assert np.array_equal(r, calibration.R) and np.array_equal(p, calibration.P)
    level, message, values = sub.status("clip")
    assert values["captured"] == str(frames) and values["published"] == str(frames)
    assert [frame_index(convert.image_array(m)) for _, m in sub.images["stills"]] == list(range(5))
    assert all(m.header.frame_id == "stills_optical_frame" and m.encoding == "rgb8" for _, m in sub.images["stills"])
    assert all(not convert.camera_info_arrays(m)[2].any() for _, m in sub.infos["stills"])  # uncalibrated: K = 0


def test_a_network_stream_that_disappears_is_reported_and_reconnected(tmp_path, stack_process, listener):
    server = MjpegServer().start()
    sub = listener("ip")
    stack = stack_process(camera_stack(tmp_path, [
        {"name": "ip", "source": server.url, "rate": 30.0, "timeout": 1.0, "reconnect": {"initial": 0.2, "max": 1.0}}]))
    try:
        assert wait_for(lambda: sub.count("ip") >= 10, 30), stack.output
        server.stop()
        assert wait_for(lambda: (sub.status("ip") or (OK,))[0] == ERROR, 15), stack.output
        level, message, values = sub.status("ip")
        assert values["state"] == "reconnecting" and int(values["failures"]) >= 1
        assert server.url in message  # "no frame from URL ..." or "cannot open network stream URL"
        time.sleep(1.5)  # a few refused attempts, with backoff
        server.start()
        before = sub.count("ip")
        assert wait_for(lambda: sub.count("ip") >= before + 10, 20), stack.output
        assert wait_for(lambda: sub.status("ip")[0] == OK and sub.status("ip")[2]["reconnects"] == "1", 5)
    finally:
        server.stop()
    stamps = [convert.from_time(m.header.stamp) for _, m in sub.images["ip"]]
    assert stamps == sorted(stamps)
    assert "reconnected to http://127.0.0.1" in stack.output


def test_a_slow_subscriber_does_not_grow_the_node(tmp_path, stack_process, listener, monkeypatch):
    """640x480 frames at 30 Hz for a reader that takes 0.25 s per frame: the node must not queue
    what the reader cannot take (4 s of frames is over 100 MB).

    Both ends use the large shared-memory segment, as config/cameras/fastdds_large_images.xml
    says every process of such a graph should: over fragmented best-effort UDP a loaded host
    lost a fragment of every 0.9 MiB frame for 30 s (fresh45, fresh46), and nothing arrived."""
    monkeypatch.setenv("FASTRTPS_DEFAULT_PROFILES_FILE", str(REPO / "config" / "cameras" / "fastdds_large_images.xml"))
    rng = np.random.default_rng(0)
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(3):  # noisy, so PNG keeps them big, and each decode does real work
        cv2.imwrite(str(folder / f"{i}.png"), rng.integers(0, 255, (480, 640, 3), dtype=np.uint8))
    slow = listener("big", delay=0.25)
    watcher = listener()  # reads diagnostics; the slow one's executor is busy sleeping
    stack = stack_process(camera_stack(tmp_path, [{"name": "big", "source": f"folder:{folder}", "rate": 30.0}]))
    pid = node_pid(stack)
    assert wait_for(lambda: slow.count("big") >= 2, 30), stack.output

    def published() -> int:
        status = watcher.status("big")  # diagnostics, once a second
        return int(status[2]["published"]) if status is not None else 0
    assert wait_for(lambda: published() >= 30, 60), stack.output  # past start-up allocations
    start_rss, start_published, start_read = rss_kib(pid), published(), slow.count("big")
    # 60 more frames (2 s at its rate; 54 MiB if they queued for the reader), however long a busy host takes.
    assert wait_for(lambda: published() >= start_published + 60, 60), stack.output
    grown_mib = (rss_kib(pid) - start_rss) / 1024
    sent = published() - start_published
    assert grown_mib < 20, f"node grew {grown_mib:.1f} MiB while publishing {sent} frames of 0.9 MiB"
    assert slow.count("big") - start_read < sent / 2  # the reader really was slower


def test_the_twin_camera_stack_publishes_images_depth_and_the_twin_intrinsics(stack_process, listener):
    sub = listener("scene")
    stack = stack_process("config/stacks/cameras_franka_twin.yaml")
    assert wait_for(lambda: sub.count("scene") >= 3 and len(sub.depths["scene"]) >= 3, 60), stack.output
    # camera_node's own status, so the images are its and not a driver's twin cameras on the same topics
    assert wait_for(lambda: sub.status("scene") is not None and int(sub.status("scene")[2]["published"]) >= 3, 10)
    assert sub.status("scene")[2]["source"].startswith("twin:") and sub.status("scene")[2]["source"].endswith(
        "franka_table.yaml#scene")

    def by_stamp(store):
        return {convert.from_time(m.header.stamp): m for _, m in list(store)}

    def matched():  # an image with its depth and camera_info: one frame, one stamp (they arrive separately)
        images, depths, infos = (by_stamp(sub.images["scene"]), by_stamp(sub.depths["scene"]),
                                 by_stamp(sub.infos["scene"]))
        common = sorted(set(images) & set(depths) & set(infos))
        return (images[common[-1]], depths[common[-1]], infos[common[-1]]) if common else None
    assert wait_for(lambda: matched() is not None, 10)
    image, depth, info = matched()
    assert image.encoding == "rgb8" and depth.encoding == "32FC1" and image.header.frame_id == "scene_optical_frame"
    metres = convert.image_array(depth)
    assert 0.5 < float(np.nanmedian(metres)) < 5.0
    width, height, k, *_ = convert.camera_info_arrays(info)
    assert (width, height) == (image.width, image.height)
    assert k[0, 2] == (width - 1) / 2 and k[1, 2] == (height - 1) / 2 and k[0, 0] == k[1, 1] > 0
