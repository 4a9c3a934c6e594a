"""Endurance of the live stack: the FR3 twin with its cameras publishing, a policy node streaming
commands and the recorder writing an MCAP bag, all under `r2s2r up` for --duration seconds.

Every --sample-s this script reads each node's resident memory (VmRSS) and CPU time from /proc,
and it receives /joint_states itself, timing each message's arrival. At the end it prints, per
node, the median memory over the first --window-s after --warmup-s and over the last --window-s
(growth in %; medians, because a node's memory rises and falls by about 1 % with each buffer it
fills and frees: the recorder's MCAP chunks), the samples right after the warm-up and at the end,
and the mean CPU share; and the joint_states period (p50, p99) over the same two windows. It
checks that every node is alive, that the median memory grew less than --max-growth %, and that
the period's p99 in the last window is within --max-p99-change of the first's. Exit code 1 when
a check fails.

The recorder records joint states, commands and diagnostics; `--record-cameras` adds the
cameras' images (about 2.3 MB/s per camera at 320x240 and 10 Hz: mind the disk over an hour).

Usage: python bench/stack_endurance.py [--duration 3600] [--warmup-s 120] [--window-s 600]
                                       [--sample-s 10] [--camera-rate 10] [--record-cameras]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml

from _machine import machine_line
from _ros import REPO, isolate_ros_domain

STARTED = re.compile(r"\[r2s2r up\] started (\S+) \(\S+\), pid (\d+)")
TICKS = os.sysconf("SC_CLK_TCK")


def write_stack(folder: Path, camera_rate: float, record_cameras: bool) -> Path:
    cameras = ["scene", "wrist"] if record_cameras else [""]
    stack = {"name": "endurance", "nodes": [
        {"name": "driver", "executable": "driver_node", "parameters": [
            "config/robots/franka_fr3.yaml",
            {"backend": "sim", "scene": "config/scenes/franka_table.yaml", "camera_rate_hz": camera_rate}]},
        {"name": "policy", "executable": "policy_node", "parameters": [
            {"robot": "franka_fr3", "policy": "config/policies/franka_goto.yaml", "command_rate_hz": 100.0,
             "use_sim_time": True, "autostart": True}]},
        {"name": "recorder", "executable": "recorder_node", "parameters": [
            {"robot": "franka_fr3", "out": str(folder / "endurance.mcap"), "cameras": cameras,
             "depth": False}]},
    ]}
    path = folder / "stack.yaml"
    path.write_text(yaml.safe_dump(stack))
    return path


def proc_sample(pid: int) -> tuple[float, float] | None:
    """(resident memory in MiB, CPU seconds) of a live process; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    if fields[0] == "Z":
        return None
    rss_kib = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
    return rss_kib / 1024.0, (int(fields[11]) + int(fields[12])) / TICKS


class JointStateClock:
    """Arrival times (monotonic) of /joint_states in this process."""

    def __init__(self):
        import rclpy
        from sensor_msgs.msg import JointState

        from r2s2r.contract import Topics, qos
        from r2s2r.nodes.runtime import PrivateGraph
        self.arrivals: list[float] = []
        self.graph = PrivateGraph(threads=1).open()
        node = self.graph.own(rclpy.create_node("endurance_probe", context=self.graph.context))
        node.create_subscription(JointState, Topics.JOINT_STATES,
                                 lambda _: self.arrivals.append(time.monotonic()), qos.STATE)
        self.graph.spin()

    def periods(self, start: float, end: float) -> np.ndarray:
        times = np.array([t for t in list(self.arrivals) if start <= t < end])
        return np.diff(times) * 1e3

    def close(self) -> None:
        self.graph.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--warmup-s", type=float, default=120.0)
    parser.add_argument("--window-s", type=float, default=600.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--camera-rate", type=float, default=10.0)
    parser.add_argument("--record-cameras", action="store_true")
    parser.add_argument("--max-growth", type=float, default=2.0, help="percent")
    parser.add_argument("--max-p99-change", type=float, default=0.25, help="share of the first window's p99")
    args = parser.parse_args()
    if not args.warmup_s + args.window_s <= args.duration:
        parser.error("--duration must cover --warmup-s and --window-s")
    domain = isolate_ros_domain()
    os.environ.setdefault("MUJOCO_GL", "egl")
    print(f"{machine_line()}; "
          f"ROS domain {domain}; {args.duration:g} s, cameras at {args.camera_rate:g} Hz, "
          f"recording {'images too' if args.record_cameras else 'no images'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="r2s2r-endurance-") as tmp:
        stack = write_stack(Path(tmp), args.camera_rate, args.record_cameras)
        runner = subprocess.Popen([sys.executable, "-m", "r2s2r.cli", "up", str(stack)], cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(runner.stdout), daemon=True).start()
        probe = JointStateClock()
        try:
            deadline = time.monotonic() + 120.0
            while time.monotonic() < deadline and not (len(pids := {m[1]: int(m[2]) for line in list(lines)
                                                                   if (m := STARTED.match(line))}) == 3
                                                        and probe.arrivals):
                time.sleep(0.2)
            if len(pids) != 3 or not probe.arrivals:
                print("the stack did not come up:\n" + "".join(lines[-40:]))
                return 1
            start = time.monotonic()
            samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in pids}
            dead: set[str] = set()
            next_sample = next_report = start
            while time.monotonic() - start < args.duration:
                now = time.monotonic()
                if now >= next_sample:
                    for name, pid in pids.items():
                        sample = proc_sample(pid)
                        if sample is None:
                            dead.add(name)
                        else:
                            samples[name].append((now - start, *sample))
                    next_sample += args.sample_s
                    if now >= next_report:  # a line a minute: progress in a log as on a terminal
                        next_report += 60.0
                        print(f"{now - start:7.0f} s  " + "  ".join(f"{n} {s[-1][1]:.0f} MiB"
                                                                  for n, s in samples.items() if s), flush=True)
                if dead or runner.poll() is not None:
                    break
                time.sleep(min(0.5, max(0.0, next_sample - time.monotonic())))
            end = time.monotonic()
            alive = not dead and runner.poll() is None
        finally:
            probe.close()
            if runner.poll() is None:
                runner.send_signal(2)
                try:
                    runner.wait(30)
                except subprocess.TimeoutExpired:
                    runner.kill()
        ok = alive
        print(f"{'node':>9} {'RSS first window':>17} {'last window':>12} {'growth':>8} "
              f"{'after warm-up':>14} {'at end':>9} {'CPU':>6}")
        for name, rows in samples.items():
            elapsed = rows[-1][0] if rows else 0.0
            first_window = [r[1] for r in rows if args.warmup_s <= r[0] <= args.warmup_s + args.window_s]
            last_window = [r[1] for r in rows if r[0] >= elapsed - args.window_s]
            if len(first_window) < 2 or len(last_window) < 2:
                print(f"{name:>9}: too few samples in a window")
                ok = False
                continue
            first, last = float(np.median(first_window)), float(np.median(last_window))
            growth = 100.0 * (last - first) / first
            cpu = 100.0 * (rows[-1][2] - rows[0][2]) / max(rows[-1][0] - rows[0][0], 1e-9)
            ok &= growth < args.max_growth
            print(f"{name:>9} {first:13.1f} MiB {last:8.1f} MiB {growth:+7.2f}% {first_window[0]:10.1f} MiB "
                  f"{rows[-1][1]:5.1f} MiB {cpu:5.1f}%")
        first = probe.periods(start + args.warmup_s, start + args.warmup_s + args.window_s)
        last = probe.periods(end - args.window_s, end)
        if first.size < 10 or last.size < 10:
            print("joint_states: too few messages in a window")
            ok = False
        else:
            (f50, f99), (l50, l99) = np.percentile(first, [50, 99]), np.percentile(last, [50, 99])
            change = (l99 - f99) / f99
            ok &= abs(change) <= args.max_p99_change
            print(f"joint_states period: first window p50 {f50:.2f} ms, p99 {f99:.2f} ms; last window p50 "
                  f"{l50:.2f} ms, p99 {l99:.2f} ms ({100 * change:+.1f} %)")
        print(f"every node alive: {'yes' if alive else 'NO: ' + ', '.join(sorted(dead)) or 'the runner ended'}")
        if not alive:
            print("".join(lines[-40:]))
        print(f"verdict: {'pass' if ok else 'FAIL'}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
