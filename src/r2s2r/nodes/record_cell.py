"""A script of commands played on a proxy-real cell and recorded, all through the live ROS graph.

driver_node serves the cell (backend proxy, as `r2s2r proxy up` does) and a player node
publishes the script's commands on the driver's position and gripper command topics over DDS,
each when the cell's clock reaches its time. The recording is `r2s2r record --stack CELL
--use-sim-time --duration D` in a process of its own, as a user runs it: recorder_node, its
duration counted on the cell's clock, so a recorder that falls behind on a loaded machine still
writes everything up to the end before it closes. The bag is what a real cell gives while
something commands it: joint states stamped on the robot's clock, commands logged when the
recorder got them, DDS between them. The recorder logs on the cell's clock (/clock): a proxy
cell's time is its physics', which falls behind the wall clock when the machine is loaded,
where a real cell's never does.

The script is a JSON list of commands: {"time": s, "kind": "positions" | "gripper", "target":
group or gripper, "values": [...]} (real2sim.proxy.ScriptCommand), times counted from when the
recorder is subscribed plus `--settle` seconds. loop.fidelity records its excitation this way.

Run as `python -m r2s2r.nodes.record_cell CELL SCRIPT.json OUT.mcap [--real-time-factor F]
[--cameras a,b] [--settle S] [--tail S]`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Float64MultiArray

from r2s2r.contract import Topics, convert, qos
from r2s2r.nodes.driver_node import DriverNode
from r2s2r.nodes.runtime import PrivateGraph, prompt_gil_handover
from r2s2r.real2sim.proxy_cell import load_cell

POLL_S = 0.0005  # how often the player looks at the cell's clock (wall seconds)
READY_S = 60.0  # wall seconds for the recorder to start and subscribe
STALL_S = 30.0  # wall seconds without the cell's clock moving: the driver has stopped
LEAD_S = 1.0  # seconds the recording runs on, past the script's end and tail: it began a little before it


def record(cell_path: str, script: list[dict], out: str, real_time_factor: float = 1.0, cameras=(),
           settle_s: float = 0.3, tail_s: float = 0.3) -> str:
    """Play `script` on the cell and record it into `out`; what the recorder printed."""
    cell = load_cell(cell_path)
    duration = settle_s + (max(c["time"] for c in script) if script else 0.0) + tail_s + LEAD_S
    recorder = None
    with PrivateGraph(threads=3) as graph:
        try:
            driver = graph.own(DriverNode(scene=cell.scene, context=graph.context, parameter_overrides=[
                Parameter("robot", value=cell.scene.robot), Parameter("backend", value="proxy"),
                Parameter("proxy.cell", value=cell.source),
                Parameter("real_time_factor", value=float(real_time_factor)),
                Parameter("camera_rate_hz", value=float(cell.camera_rate_hz) if cameras else 0.0),
                Parameter("cameras", value=list(cameras) or [""])]))
            player = graph.own(Node("script_player", context=graph.context))
            robot = driver.robot
            publishers = {("positions", g.name): player.create_publisher(
                Float64MultiArray, Topics.position_commands(g.name), qos.COMMAND) for g in robot.groups}
            publishers.update({("gripper", g.name): player.create_publisher(
                Float64MultiArray, Topics.gripper_commands(g.name), qos.COMMAND) for g in robot.grippers})
            for command in script:
                if (command["kind"], command["target"]) not in publishers:
                    raise ValueError(f"script command {command}: expected kind 'positions' with one of the groups "
                                     f"{[g.name for g in robot.groups]}, or 'gripper' with one of "
                                     f"{[g.name for g in robot.grippers]}")
            graph.spin()
            recorder = subprocess.Popen(
                [sys.executable, "-m", "r2s2r.cli", "record", "--stack", cell.source, "--out", str(out),
                 "--duration", str(duration), "--use-sim-time", "--no-depth"]
                + (["--cameras", ",".join(cameras)] if cameras else []),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            # Recording once the recorder takes the joint states and every command topic the script uses
            # (the driver's subscription and the recorder's).
            used = {(c["kind"], c["target"]) for c in script}
            deadline = time.monotonic() + READY_S
            while not (driver.pub_joints.get_subscription_count() > 0
                       and all(publishers[k].get_subscription_count() >= 2 for k in used)):
                if recorder.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the recorder did not subscribe within {READY_S:g} s:\n{_output(recorder)}")
                time.sleep(0.01)
            twin, lock = driver.hardware.twin, driver.driver.lock
            with lock:
                start = twin.time + settle_s
            last_time, last_change = start, time.monotonic()

            def wait_until(t: float) -> None:
                nonlocal last_time, last_change
                while True:
                    with lock:
                        now = twin.time
                    if now + 1e-9 >= t:
                        return
                    if now != last_time:
                        last_time, last_change = now, time.monotonic()
                    elif time.monotonic() - last_change > STALL_S:
                        raise RuntimeError(f"the cell's clock stopped at {now:.3f} s for {STALL_S:g} s "
                                           f"(driver fault: {driver._fault or 'none reported'})")
                    time.sleep(POLL_S)
            for command in sorted(script, key=lambda c: c["time"]):
                wait_until(start + command["time"])
                publishers[(command["kind"], command["target"])].publish(
                    convert.float_array_msg(command["values"]))
            # The cell runs on until the recorder has its duration on the cell's clock and closes the bag.
            try:
                output = recorder.communicate(timeout=READY_S + 10 * duration / min(real_time_factor, 1.0))[0]
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"the recorder did not close the bag after {duration:g} s of the cell's clock:\n"
                                   f"{_output(recorder)}") from None
            if recorder.returncode != 0:
                raise RuntimeError(f"the recorder failed (exit code {recorder.returncode}):\n{output[-3000:]}")
            return output
        finally:
            if recorder is not None and recorder.poll() is None:
                recorder.kill()
                recorder.wait()


def _output(process: subprocess.Popen) -> str:
    if process.poll() is None:
        process.kill()
    return (process.communicate()[0] or "")[-3000:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m r2s2r.nodes.record_cell",
                                     description="play a script of commands on a proxy cell and record it over DDS")
    parser.add_argument("cell", help="a proxy cell YAML, or the name of one in config/proxy_cells/")
    parser.add_argument("script", help="JSON list of commands (time, kind, target, values)")
    parser.add_argument("out", help="the MCAP bag to write")
    parser.add_argument("--real-time-factor", type=float, default=1.0)
    parser.add_argument("--cameras", default="", help="comma-separated cameras to record")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds of rest before the first command")
    parser.add_argument("--tail", type=float, default=0.3, help="seconds recorded after the last command")
    args = parser.parse_args(argv)
    prompt_gil_handover()  # the driver's control loop shares this process with a busy executor
    with open(args.script) as f:
        script = json.load(f)
    output = record(args.cell, script, args.out, args.real_time_factor, [c for c in args.cameras.split(",") if c],
                    args.settle, args.tail)
    print(output.strip().splitlines()[-1] if output.strip() else "", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
