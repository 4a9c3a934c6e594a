"""The soak's live graph: a task run over and over on the twin, as a cell runs unattended.

The twin's driver_node runs in this process, with the soak's judge (the person who would
watch the cell: it sees the truth, resets the scene between episodes and counts what it
would have had to fix); the policy runs as a policy_node process of its own, use_sim_time,
started once and kept for the whole soak, so its memory and CPU over the hour are its own.
Each episode is a fresh draw from the task's perturbation space (or an envelope of it) and a
fresh DriverNode whose twin goes on from the last episode's clock, so the policy's sim time
never runs backwards. Between episodes the policy is reset and restarted through its
~/reset and ~/start services, as an operator's tool would.

An episode ends in success, failure (the task's own verdict, or its time limit), or an
intervention: what a person would have to fix before the cell can go on.

- `safety stop`: the driver faulted, lost its link or latched an estop;
- `object out of reach`: an object of the task left the table (fell off, or lies beyond it);
- `arm stuck`: the arm has not moved for `stuck_s` seconds of sim time while the task runs;
- `node died`: the policy_node process exited (it is started again for the next episode);
- `deadline storm`: the policy missed `storm_misses` inference deadlines within one episode.

Drills (`inject`) cause an intervention on purpose, so that an operator (and the tests) can
see the monitor count it: `knock` moves the task's first object off the table one second into
the episode; `kill-policy` kills the policy_node process (SIGKILL) one second in.

Run as `python -m r2s2r.nodes.soak CONFIG.json OUT_DIR` (loop.soak starts it and writes the
report): every episode is appended to OUT_DIR/episodes.jsonl when it ends, and the resident
memory and CPU share of each process to OUT_DIR/resources.jsonl every `sample_s` seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_srvs.srv import Trigger

from r2s2r.contract import Topics
from r2s2r.contract import qos
from r2s2r.eval.runner import plan_eval
from r2s2r.eval.tasks import load_task
from r2s2r.nodes.driver_node import DriverNode
from r2s2r.nodes.eval_graph import STALL_S, Judge
from r2s2r.nodes.runtime import PrivateGraph, prompt_gil_handover
from r2s2r.processes import trim_heap

POLL_S = 0.002  # how often the judge looks at the twin's clock (wall seconds)
DRILL_AT_S = 1.0  # sim seconds into an episode that a drill strikes
SERVICE_TIMEOUT_S = 60.0  # a policy_node starting on a loaded machine takes seconds to offer its services
RETRY_S = 3.0  # an unanswered service request is sent again after this long
PLAN_BLOCK = 100  # episodes' draws planned at a time (trial i's draw depends on i alone)
STILL_RAD = 1e-3  # an arm whose joints all move less than this is not moving
OFF_TABLE_M = 0.05  # an object this far below the table top, or beyond its edge, is out of reach


class Monitor(Node):
    """The soak's own node: the policy's services, and its deadline misses from /diagnostics."""

    def __init__(self, context: Context):
        super().__init__("soak", context=context)
        self.clients_ = {name: self.create_client(Trigger, f"/policy/{name}") for name in ("reset", "start", "stop")}
        self.deadline_misses = 0
        self.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, self._on_diagnostics, qos.DIAGNOSTICS)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("r2s2r/policy/"):
                for kv in status.values:
                    if kv.key == "deadline_misses":
                        try:
                            self.deadline_misses = int(kv.value)
                        except ValueError:
                            pass

    def call(self, name: str, timeout: float = SERVICE_TIMEOUT_S) -> tuple[bool, str]:
        """Call the policy's ~/`name`; (False, why) where it does not answer. A request sent while
        the graph still lists a policy_node that has died (until its lease runs out) reaches
        nobody, so an unanswered request is sent again, every RETRY_S, until `timeout`."""
        client = self.clients_[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not client.wait_for_service(timeout_sec=max(deadline - time.monotonic(), 0.0)):
                break
            future = client.call_async(Trigger.Request())
            answer_by = min(deadline, time.monotonic() + RETRY_S)
            while not future.done() and time.monotonic() < answer_by:
                time.sleep(0.01)
            if future.done():
                response = future.result()
                return bool(response.success), response.message
            future.cancel()
            client.remove_pending_request(future)
        return False, f"/policy/{name} did not answer within {timeout:g} s"


class PolicyProcess:
    """policy_node in a process of its own, restarted when it dies."""

    def __init__(self, config: dict, log: Path):
        self.config = config
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        c = self.config
        args = [sys.executable, "-m", "r2s2r.nodes.policy_node", "--ros-args",
                "-p", f"robot:={c['robot']}", "-p", f"policy:={c['policy']}", "-p", "use_sim_time:=true",
                "-p", f"command_rate_hz:={float(c['control_rate_hz'])}", "-p", "privileged_poses:=true"]
        # A session of its own: a terminal's Ctrl-C stops the soak after its episode, and must not
        # kill the policy under way (an intervention nobody caused); it still dies with the soak.
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.starts += 1

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10.0)
            except subprocess.TimeoutExpired:
                self.kill()


class ResourceSampler:
    """Resident memory (MB) and CPU share (% of one core) of each process, every `period` s."""

    def __init__(self, out: Path, processes, period: float):
        self.out, self.processes, self.period = out, processes, period
        self._stop = threading.Event()
        self._tracked: dict[int, psutil.Process] = {}
        self.thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)
        self.t0 = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            rows = []
            for name, pid in self.processes():
                if pid is None:
                    continue
                try:
                    proc = self._tracked.get(pid)
                    if proc is None:
                        proc = self._tracked[pid] = psutil.Process(pid)
                        proc.cpu_percent(None)  # the first reading only starts the count
                        continue
                    rows.append({"t": time.monotonic() - self.t0, "node": name, "pid": pid,
                                 "rss_mb": proc.memory_info().rss / 2**20, "cpu_percent": proc.cpu_percent(None)})
                except psutil.Error:
                    continue  # it has just exited: the judge counts that
            with open(self.out, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join(timeout=5.0)


def _out_of_reach(twin) -> str:
    """Which object has left the table (below its top, or beyond its edge), or ''."""
    table = twin.scene.table
    if table is None:
        return ""
    (cx, cy), (sx, sy, _) = table.center, table.size
    for name, (pos, _) in twin.object_poses().items():
        if (pos[2] < table.height - OFF_TABLE_M or abs(pos[0] - cx) > sx / 2 + OFF_TABLE_M
                or abs(pos[1] - cy) > sy / 2 + OFF_TABLE_M):
            return f"{name} at ({pos[0]:.2f}, {pos[1]:.2f}, {pos[2]:.2f}) m is off the table"
    return ""


def run_episode(index: int, spec, task, config: dict, clock: float, monitor: Monitor, monitor_spin,
                policy: PolicyProcess) -> tuple[dict, float]:
    """One episode; its row and the twin's clock at its end. Its driver lives in a context (a
    DDS participant) and executor of its own, ended with it, as eval's graph path does each
    trial: drivers destroyed in the monitor's context take the monitor's answers with them."""
    wall0 = time.monotonic()
    drills = {d["what"] for d in config.get("inject", []) if int(d["episode"]) == index}
    values = spec.values
    task.new_episode(values)
    scene = task.scene(values)
    params = [Parameter("robot", value=task.robot), Parameter("backend", value="sim"),
              Parameter("seed", value=spec.seed),
              # the cameras the policy observes, rendered once per policy tick of sim time
              Parameter("camera_rate_hz", value=float(task.control_rate_hz) if config["cameras"] else 0.0),
              Parameter("cameras", value=config["cameras"] or [""]),
              Parameter("real_time_factor", value=float(config["real_time_factor"])),
              Parameter("tf_rate_hz", value=float(task.control_rate_hz))]
    with PrivateGraph(threads=3) as graph:
        driver = graph.own(DriverNode(scene=scene, context=graph.context, parameter_overrides=params))
        twin, lock = driver.hardware.twin, driver.driver.lock
        with lock:
            twin.reset(spec.seed, time=clock)
            task.start(twin)
            driver.loop.hold_here()
        graph.spin()

        def still_spinning() -> None:  # a fault of the soak's own, not an intervention of the policy's
            if not monitor_spin.is_alive():
                raise RuntimeError("the soak's executor stopped spinning (its error is above): no service answer or "
                                   "diagnostic can be read any more")
        row = {"episode": index, "seed": spec.seed, "perturbation": values, "policy_starts": policy.starts}
        intervention = None
        try:
            if policy.exit_code() is not None:
                policy.start()
            ok, message = monitor.call("start")  # a fresh episode for the policy: what ~/start does
            still_spinning()
            if not ok:
                intervention = ("node died" if policy.exit_code() is not None else "policy not started", message)
            misses0 = monitor.deadline_misses
            with lock:
                start = twin.time
                driver.loop.hold_here()
            judge = Judge(task, twin, start)
            still_q, still_since = None, start
            struck = False
            while intervention is None:
                with lock:
                    now = twin.time
                    if judge.stalled(now):
                        intervention = ("safety stop", f"the twin's clock stopped at {now:.3f} s for {STALL_S:g} s "
                                                       f"(driver fault: {driver.driver.fault or 'none reported'})")
                        break
                    if not struck and drills and now >= start + DRILL_AT_S:
                        struck = True
                        if "knock" in drills:
                            name = next(iter(twin.object_poses()))
                            twin.displace_object(name, (twin.object_poses()[name][0][0], 3.0, 0.5))
                        if "kill-policy" in drills:
                            policy.kill()
                    d = driver.driver
                    if d.fault or d.link_fault or d.estopped:
                        intervention = ("safety stop", d.fault or d.link_fault or "estop latched")
                        break
                    if judge.due(now):
                        if judge.over(now):
                            break
                        away = _out_of_reach(twin)
                        if away:
                            intervention = ("object out of reach", away)
                            break
                        q = twin.arm_positions
                        if still_q is None or np.max(np.abs(q - still_q)) > STILL_RAD:
                            still_q, still_since = q.copy(), now
                        elif now - still_since > config["stuck_s"]:
                            intervention = ("arm stuck", f"no joint moved more than {STILL_RAD:g} rad for "
                                                         f"{now - still_since:.1f} s")
                            break
                    if judge.over(now):
                        break
                still_spinning()
                code = policy.exit_code()
                if code is not None:
                    intervention = ("node died", f"policy_node exited with code {code}")
                    break
                if monitor.deadline_misses - misses0 >= config["storm_misses"]:
                    intervention = ("deadline storm", f"{monitor.deadline_misses - misses0} inference deadlines missed")
                    break
                time.sleep(POLL_S)
            with lock:
                outcome = task.outcome(twin, judge.timed_out)
                end = twin.time
                stats = driver.loop.controller.stats
                row["commands_accepted"] = int(sum(stats.accepted.values()))
                row["commands_rejected"] = int(sum(stats.rejected.values()))
        finally:
            if policy.exit_code() is None and monitor_spin.is_alive():
                monitor.call("stop", timeout=5.0)
    row.update(success=bool(outcome.success) and intervention is None, stage=str(outcome.stage),
               margin=float(outcome.margin), sim_time_s=end - start, wall_s=time.monotonic() - wall0,
               outcome="intervention" if intervention else ("success" if outcome.success else "failure"))
    if intervention is not None:
        row["intervention"] = {"cause": intervention[0], "detail": intervention[1], "sim_time_s": end - start}
        if intervention[0] == "node died":
            policy.kill()
            policy.start()  # the fix a person would make; the next episode goes on
    return row, end + 1.0


def main(argv=None) -> int:
    config_path, out = (argv or sys.argv[1:])[:2]
    config = json.loads(Path(config_path).read_text())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    prompt_gil_handover()  # the driver's control loop shares this process with a busy executor
    task = load_task(config["task"])
    config["robot"], config["control_rate_hz"] = task.robot, task.control_rate_hz
    planned: dict = {}
    with PrivateGraph(threads=2) as graph:
        monitor = graph.own(Monitor(graph.context))
        spinner = graph.spin()
        policy = PolicyProcess(config, out / "policy_node.log")
        policy.start()
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())  # ends after the episode under way
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        wall0 = time.monotonic()
        clock = 0.0
        processes = lambda: [("driver_node + judge", os.getpid()),  # noqa: E731
                             ("policy_node", None if policy.proc is None or policy.exit_code() is not None
                              else policy.proc.pid)]
        try:
            with ResourceSampler(out / "resources.jsonl", processes, float(config["sample_s"])):
                index = 0
                while not stop.is_set() and time.monotonic() - wall0 < float(config["duration_s"]):
                    if config.get("episodes") and index >= int(config["episodes"]):
                        break
                    if index not in planned:
                        planned = {p.index: p for p in plan_eval(config["policy"], task, index + PLAN_BLOCK,
                                                                 int(config["seed"]), envelope=config.get("envelope"),
                                                                 first=index)}
                    row, clock = run_episode(index, planned[index].spec, task, config, clock, monitor, spinner,
                                             policy)
                    trim_heap()  # the episode's driver is gone: its pages go back, so memory growth reads leaks
                    row["wall_since_start_s"] = time.monotonic() - wall0
                    with open(out / "episodes.jsonl", "a") as f:
                        f.write(json.dumps(row) + "\n")
                    what = row["outcome"] + (f" ({row['intervention']['cause']}: {row['intervention']['detail']})"
                                             if "intervention" in row else f" ({row['stage']})")
                    print(f"[soak] episode {index}: {what}, {row['sim_time_s']:.1f} s simulated, "
                          f"{row['wall_since_start_s']:.0f} s into the soak", flush=True)
                    index += 1
        finally:
            policy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
