"""Camera ingestion: four 640x480 sources at 30 Hz in one camera_node (ALOHA's layout), read by a
subscriber in this process over DDS.

Prints, per camera and overall: the delivered frame rate at the subscriber, the capture-to-
receive latency p50 / p99 (receive wall time minus the image's header stamp, which is its
capture time), the node's drops, and the node's CPU time per camera (% of one core).

The sources are MJPEG video files made here (what USB cameras send with fourcc MJPG), paced at
the configured rate, so the node decodes, converts and publishes as it would for devices.

Usage: python bench/camera_ingest.py [--cameras 4] [--width 640] [--height 480] [--rate 30] [--seconds 10]
"""

import argparse
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import yaml

from _machine import machine_line
from _ros import REPO, isolate_ros_domain

ALOHA = ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")


def make_clip(path: Path, width: int, height: int, rate: float, frames: int = 90) -> None:
    rng = np.random.default_rng(len(str(path)))
    background = cv2.GaussianBlur(rng.integers(0, 255, (height, width, 3), dtype=np.uint8), (0, 0), 3)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), rate, (width, height))
    for i in range(frames):  # a moving bar over a textured background: realistic JPEG sizes
        frame = background.copy()
        x = int((i / frames) * width)
        frame[:, max(0, x - 20):x + 20] = (40, 200, 90)
        writer.write(frame)
    writer.release()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cameras", type=int, default=4)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--large-shm", action="store_true",
                        help="run both processes with config/cameras/fastdds_large_images.xml (Fast DDS shared "
                             "memory large enough for whole images)")
    parser.add_argument("--raw", action="store_true",
                        help="read only each message's stamp from its CDR bytes (no Python deserialisation), "
                             "to separate transport from the subscriber's own cost")
    args = parser.parse_args()
    isolate_ros_domain()
    if args.large_shm:  # before rclpy loads: every participant of both processes takes the profile
        os.environ["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(REPO / "config" / "cameras" / "fastdds_large_images.xml")
    sys.path.insert(0, str(REPO / "src"))
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.node import Node
    from sensor_msgs.msg import Image

    from r2s2r.contract import Topics, convert, qos

    names = [ALOHA[i] if i < len(ALOHA) else f"cam_{i}" for i in range(args.cameras)]
    work = Path(tempfile.mkdtemp(prefix="r2s2r-bench-cameras-"))
    cameras = []
    for name in names:
        make_clip(work / f"{name}.avi", args.width, args.height, args.rate)
        cameras.append({"name": name, "source": f"file:{work / name}.avi", "rate": args.rate})
    config = work / "cameras.yaml"
    config.write_text(yaml.safe_dump({"cameras": cameras}))

    rclpy.init()
    node = Node("bench_camera_subscriber")
    lock = threading.Lock()
    received = {n: [] for n in names}  # (receive time, capture stamp)
    diagnostics = {}
    published = {n: [] for n in names}  # (arrival, frames published so far) while recording
    recording = threading.Event()

    def on_image(name, msg):
        now = time.time()
        if recording.is_set():
            if args.raw:  # CDR: 4-byte encapsulation header, then header.stamp (int32 sec, uint32 nanosec)
                sec, nanosec = struct.unpack_from("<iI", msg, 4)
                stamp = sec + nanosec * 1e-9
            else:
                stamp = convert.from_time(msg.header.stamp)
            with lock:
                received[name].append((now, stamp))

    def on_diagnostics(msg):
        now = time.monotonic()
        for status in msg.status:
            name = status.name.rsplit("/", 1)[-1]
            diagnostics[name] = {kv.key: kv.value for kv in status.values}
            if recording.is_set() and name in published:
                published[name].append((now, int(diagnostics[name]["published"])))

    for name in names:
        node.create_subscription(Image, Topics.camera_image(name), lambda m, n=name: on_image(n, m), qos.SENSOR,
                                 raw=args.raw)
    node.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, on_diagnostics, qos.DIAGNOSTICS)
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()

    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "r2s2r.nodes.camera_node", "--ros-args", "-p", f"config:={config}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not all(diagnostics.get(n, {}).get("state") == "streaming" for n in names):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"camera_node did not start streaming (exit code {proc.poll()})")
            time.sleep(0.1)
        time.sleep(args.warmup)
        start_diag = {n: dict(diagnostics[n]) for n in names}
        cpu0, wall0 = cpu_seconds(proc.pid), time.monotonic()
        recording.set()
        time.sleep(args.seconds)
        recording.clear()
        cpu1, wall1 = cpu_seconds(proc.pid), time.monotonic()
        end_diag = {n: dict(diagnostics[n]) for n in names}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(15)
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown()

    duration = wall1 - wall0
    cpu = (cpu1 - cpu0) / duration * 100
    print(machine_line())
    print(f"{args.cameras} x {args.width}x{args.height} MJPEG files at {args.rate:g} Hz in one camera_node, "
          f"{duration:.1f} s measured, subscriber {'reading raw CDR' if args.raw else 'deserialising'}")
    print(f"{'camera':16s} {'sent fps':>9s} {'got fps':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'dropped':>8s}")
    latencies = []
    for name in names:
        rows = np.array(received[name])
        latency = (rows[:, 0] - rows[:, 1]) * 1e3 if len(rows) else np.array([np.nan])
        latencies.append(latency)
        dropped = int(end_diag[name]["dropped"]) - int(start_diag[name]["dropped"])
        (t0, n0), (t1, n1) = published[name][0], published[name][-1]  # the node's count, once a second
        sent = (n1 - n0) / (t1 - t0)
        print(f"{name:16s} {sent:9.2f} {len(rows) / duration:8.2f} {np.percentile(latency, 50):8.2f} "
              f"{np.percentile(latency, 99):8.2f} {dropped:8d}")
    every = np.concatenate(latencies)
    total = sum(len(received[n]) for n in names)
    print(f"{'all':16s} {'':9s} {total / duration:8.2f} {np.percentile(every, 50):8.2f} "
          f"{np.percentile(every, 99):8.2f}")
    print(f"node CPU: {cpu:.1f} % of one core in all, {cpu / args.cameras:.1f} % per camera")


if __name__ == "__main__":
    main()
