"""recorder_node in a process of its own over DDS, as `r2s2r record` runs it: on a machine
loaded by two busy loops it loses none of 2000 joint_states sent at 250 Hz (a 10-deep reader
queue lost 8-13 % of them), each channel carries its publishers' QoS as rosbag2 writes it, and
under use_sim_time `duration_s` counts from the first /clock, however far along the twin is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import yaml

from r2s2r.data.mcap_io import read_bag
from r2s2r.waiting import wait_for
from tests.ros_helpers import REPO

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])}


class Running:
    """A process whose output is collected as it comes."""

    def __init__(self, args, stdin=None):
        self.proc = subprocess.Popen(args, cwd=REPO, env=ENV, stdin=stdin, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def recorder(out, *params) -> Running:
    return Running([sys.executable, "-m", "r2s2r.nodes.recorder_node", "--ros-args", "-p", "robot:=franka_fr3",
                    "-p", f"out:={out}", *[a for p in params for a in ("-p", p)]])


def source(count: int, rate_hz: float, *extra) -> Running:
    return Running([sys.executable, "-m", "tests.state_source", str(count), str(rate_hz), *extra],
                   stdin=subprocess.PIPE)


def start_counting(rec: Running, src: Running) -> None:
    """Once the recorder has the source's probes, the counted messages begin."""
    assert wait_for(lambda: "first message on joint_states" in rec.output, 120), rec.output + src.output
    src.proc.stdin.write("go\n")
    src.proc.stdin.flush()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def counted(out) -> list[tuple[float, float, int]]:
    """(log time, header stamp, index) of each counted joint_states message in the bag."""
    return [(m.stamp, m.msg.header.stamp.sec + m.msg.header.stamp.nanosec * 1e-9, int(m.msg.position[0]))
            for m in read_bag(out, ["/joint_states"]) if m.msg.position[0] >= 0]


def test_a_loaded_machine_costs_the_recording_no_joint_state(tmp_path):
    out = tmp_path / "loaded.mcap"
    rec = recorder(out)
    src = source(2000, 250.0)
    busy = []
    try:
        start_counting(rec, src)
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        assert src.proc.wait(timeout=300) == 0, src.output
        for b in busy:
            b.kill()
        # Caught up: what was queued has been written once the recorder's CPU time stops growing.
        previous = [cpu_seconds(rec.proc.pid), time.monotonic()]

        def idle() -> bool:
            now = cpu_seconds(rec.proc.pid)
            if now != previous[0]:
                previous[:] = [now, time.monotonic()]
            return time.monotonic() - previous[1] > 1.0
        assert wait_for(idle, 120, poll=0.1)
        rec.proc.send_signal(signal.SIGINT)
        assert rec.proc.wait(timeout=60) == 0, rec.output
    finally:
        for b in busy:
            b.kill()
        src.stop()
        rec.stop()
    assert [index for _, _, index in counted(out)] == list(range(2000)), rec.output
    # The channel says what its publisher offered, in rosbag2's words.
    from mcap.reader import make_reader
    with open(out, "rb") as f:
        channels = {c.topic: c for c in make_reader(f).get_summary().channels.values()}
    offered = yaml.safe_load(channels["/joint_states"].metadata["offered_qos_profiles"])
    assert len(offered) == 1 and offered[0]["reliability"] == "reliable" and offered[0]["durability"] == "volatile"
    assert offered[0]["deadline"] == {"sec": 9223372036, "nsec": 854775807}  # infinite, as rmw writes it
    assert set(offered[0]) == {"history", "depth", "reliability", "durability", "deadline", "lifespan", "liveliness",
                               "liveliness_lease_duration", "avoid_ros_namespace_conventions"}


def test_a_duration_on_sim_time_counts_from_the_first_clock_of_a_twin_long_running(tmp_path):
    out = tmp_path / "sim_time.mcap"
    rec = recorder(out, "use_sim_time:=true", "duration_s:=2.0")
    src = source(800, 100.0, "--clock-start", "1000")  # 8 s of a twin that has run 1000 s
    try:
        start_counting(rec, src)
        assert rec.proc.wait(timeout=120) == 0, rec.output  # it stops by itself ...
        assert src.proc.poll() is None or "published 800" not in src.output  # ... before the source ends
    finally:
        src.stop()
        rec.stop()
    assert "duration reached" in rec.output
    messages = counted(out)
    # The probes at 1000 s started the count; the counted messages from 1000 s on, 2 s of them.
    assert messages[0][2] == 0 and messages[0][0] >= 1000.0
    assert 1.9 <= messages[-1][1] - 1000.0 <= 2.2, (messages[0], messages[-1])
    assert [index for _, _, index in messages] == list(range(len(messages)))
