"""Real-time factor of the twin node: 1 kHz physics, joint_states at 250 Hz, cameras at 30 Hz.

For each robot, the driver node runs twice in its own process: paced to the wall clock
(real_time_factor 1.0: the figure a user sees, at most 1.0) and unpaced (real_time_factor 0:
how many times faster than real time the physics can run; the cameras render on their own
thread from copies of the state and skip frames they cannot keep up with). A subscriber in this
process measures /clock against the wall clock and counts the frames of every camera that
arrive per second of sim time (30 means every frame was delivered).

Usage: python bench/twin_node.py [--robot NAME ...] [--seconds S]
Default robots: every registered robot; the Franka with its one 320x240 scene camera, the
others with all their default cameras (ALOHA: four 320x240 at 30 Hz). Target: >= 1.0.
"""

import argparse
import signal
import subprocess
import sys
import time

from _machine import machine_line
from _ros import driver_stack, isolate_ros_domain


def measure(robot: str, cameras, rtf: float, seconds: float) -> tuple[float, float]:
    params = {"real_time_factor": rtf, "state_rate_hz": 250.0, "camera_rate_hz": 30.0}
    if cameras:
        params["cameras"] = list(cameras)
    stack = driver_stack(robot, **params)
    proc = subprocess.Popen([sys.executable, "-m", "r2s2r.cli", "up", str(stack)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    from sensor_msgs.msg import Image
    from r2s2r.contract import Topics, qos
    from r2s2r.nodes.client import RobotClient
    client = RobotClient(f"bench_twin_{robot}")
    frames = {c: 0 for c in cameras}

    def count(camera):
        def on_image(_msg):
            frames[camera] += 1
        return on_image
    for cam in cameras:
        client.node.create_subscription(Image, Topics.camera_image(cam), count(cam), qos.SENSOR)
    try:
        client.wait_for_joint_states(60)
        time.sleep(1.0)  # past start-up
        s0, w0, n0, f0 = client.joints.stamp, time.monotonic(), client.joint_state_count, dict(frames)
        time.sleep(seconds)
        s1, w1, n1, f1 = client.joints.stamp, time.monotonic(), client.joint_state_count, dict(frames)
        camera_rate = min((f1[c] - f0[c]) / (s1 - s0) for c in cameras) if cameras else 0.0
        return (s1 - s0) / (w1 - w0), (n1 - n0) / (s1 - s0), camera_rate
    finally:
        client.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--robot", action="append")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    isolate_ros_domain()
    from r2s2r.robots import get_robot, robot_names
    robots = args.robot or robot_names()
    print(machine_line())
    print(f"{'robot':14s} {'cameras @30 Hz':>52s} {'paced RTF':>10s} {'frames/sim-s':>13s} "
          f"{'joint_states/sim-s':>19s} {'unpaced RTF':>12s}")
    for robot in robots:
        spec = get_robot(robot)
        cameras = ["scene"] if robot == "franka_fr3" else [c.name for c in spec.cameras]
        paced, state_rate, camera_rate = measure(robot, cameras, 1.0, args.seconds)
        unpaced, _, _ = measure(robot, cameras, 0.0, args.seconds)
        label = ", ".join(cameras)
        print(f"{robot:14s} {label:>52s} {paced:10.3f} {camera_rate:13.1f} {state_rate:19.1f} {unpaced:12.2f}",
              flush=True)


if __name__ == "__main__":
    main()
