"""Control-loop period jitter of driver_node at 500 Hz and 1 kHz against the protocol emulators,
and the cost per cycle of the command path (controller + safety filter) in microseconds.

The driver runs in its own process, as deployed; it measures its own cycle periods and
reports p50 / p99 / max on `diagnostics`, which this script reads after a warm-up.

Usage: python bench/driver_loop.py [--seconds S]
"""

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from _machine import machine_line
from _ros import REPO, isolate_ros_domain

sys.path.insert(0, str(REPO))


def command_path_cost(n: int = 20000) -> tuple[float, float]:
    """Microseconds per cycle: JointController.update alone, and with the SafetyFilter after it."""
    from r2s2r.hardware.controller import JointController
    from r2s2r.hardware.safety import SafetyFilter, SafetyLimits
    from r2s2r.robots import get_robot
    robot = get_robot("franka_fr3")
    controller = JointController(robot, robot.home_positions)
    safety = SafetyFilter(SafetyLimits.of(robot), 1e-3, robot.home_positions)
    controller.command_positions("arm", robot.home_positions + 0.3)
    t0 = time.perf_counter()
    for i in range(n):
        controller.update(i * 1e-3, 1e-3)
    update = (time.perf_counter() - t0) / n * 1e6
    controller.command_positions("arm", robot.home_positions)
    t0 = time.perf_counter()
    for i in range(n):
        safety(controller.update(i * 1e-3, 1e-3))
    both = (time.perf_counter() - t0) / n * 1e6
    return update, both - update


def aloha_peer(folder: Path):
    from tests.emulators.dynamixel_emulator import DynamixelBus, viperx_follower
    left = DynamixelBus(folder / "left", viperx_follower()).start()
    right = DynamixelBus(folder / "right", viperx_follower()).start()
    settings = {"aloha.left_port": str(left.link_path), "aloha.right_port": str(right.link_path)}
    return settings, lambda: (left.stop(), right.stop())


def xarm_peer(folder: Path):
    from tests.emulators.xarm_emulator import XArmEmulator
    emulator = XArmEmulator("127.0.0.51").start()
    return {"xarm.ip": "127.0.0.51"}, emulator.stop


def measure(robot: str, backend: str, peer, rate: float, seconds: float) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="r2s2r-bench-"))
    settings, stop_peer = peer(folder)
    stack = folder / "stack.yaml"
    params = {"backend": backend, "control_rate_hz": rate, "state_rate_hz": 100.0, **settings}
    stack.write_text(yaml.safe_dump({"nodes": [{"name": "driver", "executable": "driver_node", "parameters": [
        str(REPO / "config" / "robots" / f"{robot}.yaml"), params]}]}))
    proc = subprocess.Popen([sys.executable, "-m", "r2s2r.cli", "up", str(stack)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    from r2s2r.nodes.client import RobotClient
    client = RobotClient(f"bench_driver_{backend}_{int(rate)}")
    try:
        client.wait_for_joint_states(60)
        time.sleep(seconds)  # the driver keeps the last 2000 periods
        values = client.diagnostic_values()
        return {k: float(values[f"cycle_period_us.{k}"]) for k in ("p50", "p99", "max")}
    finally:
        client.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(15)
        stop_peer()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    isolate_ros_domain()
    update, safety = command_path_cost()
    print(machine_line())
    print(f"command path per cycle: controller {update:.1f} us, safety filter {safety:.1f} us")
    print(f"{'backend':8s} {'rate':>7s} {'period p50':>11s} {'p99':>9s} {'max':>9s}  (microseconds)")
    for robot, backend, peer in (("aloha", "aloha", aloha_peer), ("xarm7", "xarm", xarm_peer)):
        for rate in (500.0, 1000.0):
            r = measure(robot, backend, peer, rate, args.seconds)
            print(f"{backend:8s} {rate:6.0f}Hz {r['p50']:11.0f} {r['p99']:9.0f} {r['max']:9.0f}", flush=True)


if __name__ == "__main__":
    main()
