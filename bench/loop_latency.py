"""Command-to-state latency over DDS: publish a position command, time until `joint_states`
shows the arm responding. p50 / p99 over many commands.

"Responding" is the first joint_states message in which the commanded joint has moved more
than 1 microradian toward the new target, so the figure includes DDS transport both ways, the
driver's cycle (commands are applied at the next 1 kHz cycle, joint_states go out at 250 Hz)
and the first millisecond of physical motion.

Usage: python bench/loop_latency.py [--samples N]
"""

import argparse
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from _machine import machine_line
from _ros import driver_stack, isolate_ros_domain

THRESHOLD_RAD = 1e-6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    isolate_ros_domain()
    from sensor_msgs.msg import JointState
    from r2s2r.contract import Topics, qos
    from r2s2r.nodes.client import RobotClient
    from r2s2r.robots import get_robot

    robot = get_robot("franka_fr3")
    joints = robot.group("arm").joints
    stack = driver_stack(robot.name, camera_rate_hz=0.0)
    proc = subprocess.Popen([sys.executable, "-m", "r2s2r.cli", "up", str(stack)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    client = RobotClient("bench_latency")
    seen = threading.Event()
    watch = {}

    def on_state(msg: JointState):  # runs on the client's executor thread, timestamps on arrival
        if "index" in watch and abs(msg.position[watch["index"]] - watch["start"]) > THRESHOLD_RAD:
            if not seen.is_set():
                watch["arrived"] = time.perf_counter()
                seen.set()
    client.node.create_subscription(JointState, Topics.JOINT_STATES, on_state, qos.STATE)
    latencies = []
    try:
        client.wait_for_joint_states(60)
        client.wait_for_subscriber(Topics.position_commands("arm"), timeout=30)
        target = robot.home_positions.copy()
        for i in range(args.samples):
            time.sleep(0.05)  # settled: the arm stands still between commands
            current = client.positions(joints)
            j = i % 7
            target = current.copy()
            target[j] += 0.01 if (i // 7) % 2 == 0 else -0.01
            seen.clear()
            watch.update(index=j, start=current[j])
            sent = time.perf_counter()
            client.send_positions("arm", target)
            if seen.wait(1.0):
                latencies.append((watch["arrived"] - sent) * 1e3)
            watch.pop("index")
    finally:
        client.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(15)
    lat = np.array(latencies)
    print(machine_line())
    print(f"command -> joint_states response over DDS, {len(lat)} of {args.samples} commands answered")
    print(f"p50 {np.percentile(lat, 50):.2f} ms   p99 {np.percentile(lat, 99):.2f} ms   max {lat.max():.2f} ms")


if __name__ == "__main__":
    main()
