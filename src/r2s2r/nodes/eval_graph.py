"""Trials through the live ROS graph: a real driver_node runs the twin, a real policy_node runs
the policy, and every joint state and command between them crosses DDS.

For each trial (a TrialSpec, as the in-process runner takes it):

- the task's perturbed scene goes to a DriverNode (backend sim, the trial's seed, paced at
  `real_time_factor`; it renders the cameras the policy observes, once per policy tick of sim
  time, and no others); the task's per-trial set-up (gains, command latency, initial
  joints, grip friction) is applied to its twin under the driver's lock, and the driver holds
  there;
- a PolicyNode (use_sim_time, commands at the task's control rate) observes /joint_states and
  publishes the group and gripper command topics the driver executes. A scripted expert also
  observes the privileged object poses; the contract has no topic for fixtures' poses, so
  those come from the twin itself, read under the driver's lock as the node assembles each
  observation (the one input that does not cross DDS);
- the task judges the twin once per control period of sim time, as in-process, until it is
  done or its time limit has passed.

The two processes of the live graph run asynchronously, so a trial through the graph is not
bit-identical to the in-process one (messages arrive a few milliseconds apart, inference
runs off the tick), but its outcome is the same wherever the policy is not on the edge of
failing. A command_latency perturbation is the twin's, as in-process (Twin.set_command_latency
delays the driver's setpoints on their way to the actuators); DDS adds its own few
milliseconds on top.

With `--cell CELL.yaml` the driver runs a proxy-real cell (real2sim.proxy_cell) instead of the
twin: the task's perturbed scene (the trial's initial conditions) with the cell's hidden values
and effects, its joint states measured and its images delivered as the cell's sensors do. The
task still judges the truth, as a person judges a real trial.

Run as `python -m r2s2r.nodes.eval_graph SPECS.json RESULTS.json [--real-time-factor F] [--cell C]`;
eval.graph starts it (the evaluation layer itself never imports rclpy).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace

from rclpy.parameter import Parameter

from r2s2r.eval.runner import TrialResult, TrialSpec
from r2s2r.eval.tasks import load_task
from r2s2r.nodes.driver_node import DriverNode
from r2s2r.nodes.policy_node import PolicyNode, WithObjectPoses
from r2s2r.nodes.runtime import PrivateGraph, prompt_gil_handover
from r2s2r.real2sim.proxy_cell import ProxyCellConfig, ProxyHardware, load_cell
from r2s2r.robots import get_robot

POLL_S = 0.002  # how often the judge looks at the twin's clock (wall seconds)
STALL_S = 30.0  # wall seconds without the twin's clock moving: the driver has stopped


class Judge:
    """The task judged as in-process, on the twin's sim time from `start`: stepped once per
    control period until it is done or its time limit passes; and whether the twin's clock has
    stood still for STALL_S wall seconds (its driver stopped). Call under the driver's lock."""

    def __init__(self, task, twin, start: float):
        self.task, self.twin = task, twin
        self.period = 1.0 / task.control_rate_hz
        self.next_tick, self.limit = start + self.period, start + task.time_limit_s
        self.timed_out = True
        self._last, self._since = start, time.monotonic()

    def stalled(self, now: float) -> bool:
        if now != self._last:
            self._last, self._since = now, time.monotonic()
            return False
        return time.monotonic() - self._since > STALL_S

    def due(self, now: float) -> bool:
        """Whether a control period has come (the task has then stepped and been judged)."""
        if now + 1e-9 < self.next_tick:
            return False
        self.task.step(self.twin)
        self.next_tick += self.period
        if self.task.done(self.twin):
            self.timed_out = False
        return True

    def over(self, now: float) -> bool:
        return not self.timed_out or now >= self.limit - 1e-9


def run_trial(spec: TrialSpec, real_time_factor: float = 1.0, task_cache: dict | None = None,
              cell: ProxyCellConfig | None = None) -> TrialResult:
    wall0 = time.perf_counter()
    cache = task_cache if task_cache is not None else {}
    if spec.task not in cache:
        cache[spec.task] = load_task(spec.task)
    task = cache[spec.task]
    values = spec.values
    task.new_episode(values)
    with PrivateGraph(threads=3) as graph:
        policy = None
        try:
            policy = graph.own(PolicyNode(context=graph.context, parameter_overrides=[
                Parameter("robot", value=task.robot), Parameter("policy", value=spec.policy),
                Parameter("use_sim_time", value=True), Parameter("command_rate_hz", value=task.control_rate_hz)]))
            # The driver renders the cameras the policy observes, once per policy tick of sim time.
            cameras = list(policy.policy.metadata.observation.cameras)
            params = [Parameter("robot", value=task.robot), Parameter("backend", value="sim"),
                      Parameter("seed", value=spec.seed),
                      Parameter("camera_rate_hz", value=float(task.control_rate_hz) if cameras else 0.0),
                      Parameter("cameras", value=cameras or [""]),
                      Parameter("real_time_factor", value=float(real_time_factor))]
            if spec.control_rate_hz is not None:
                params.append(Parameter("control_rate_hz", value=spec.control_rate_hz))
            scene = task.scene(values)
            hardware = None
            if cell is not None:  # the cell at this trial's initial conditions, its truth and effects kept
                hardware = ProxyHardware(get_robot(task.robot),
                                         {"cell": replace(cell, scene=scene, seed=spec.seed)})
            driver = graph.own(DriverNode(scene=scene, hardware=hardware, context=graph.context,
                                          parameter_overrides=params))
            twin = driver.hardware.twin
            lock = driver.driver.lock  # the driver core's: its loop steps the twin only while holding it
            with lock:
                twin.reset(spec.seed)
                task.start(twin)
                driver.loop.hold_here()
                start = twin.time

            def poses():
                with lock:
                    return task.object_poses(twin)
            sizes = task.object_sizes(twin)  # fixed for the trial: the scene built them
            policy.assembler = WithObjectPoses(policy.assembler, poses, lambda: sizes,
                                               policy.policy.metadata.observation.object_sizes)
            graph.spin()
            policy._start()  # what its ~/start service does: reset the runtime, begin acting
            judge = Judge(task, twin, start)
            while True:
                with lock:
                    now = twin.time
                    if judge.stalled(now):
                        raise RuntimeError(f"trial {spec.id}: the twin's clock stopped at {now:.3f} s for "
                                           f"{STALL_S:g} s (driver fault: {driver._fault or 'none reported'})")
                    judge.due(now)
                    if judge.over(now):
                        break
                time.sleep(POLL_S)
            with lock:
                outcome = task.outcome(twin, judge.timed_out)
                elapsed = twin.time - start
                rejected = float(sum(driver.loop.controller.stats.rejected.values()))
                latency = float(twin.command_latency_s)  # what the driver's twin delayed setpoints by
        finally:
            if policy is not None:
                policy.running = False  # no more ticks, so nothing is submitted while the graph stops
    metrics = {str(k): float(v) for k, v in outcome.metrics.items()}
    metrics["commands_rejected"] = rejected
    metrics["command_latency_s"] = latency
    return TrialResult(id=spec.id, policy=spec.policy, task=spec.task, seed=spec.seed,
                       control_rate_hz=spec.control_rate_hz, perturbation=values, success=bool(outcome.success),
                       margin=float(outcome.margin), stage=str(outcome.stage), sim_time_s=elapsed,
                       wall_s=time.perf_counter() - wall0, metrics=metrics)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m r2s2r.nodes.eval_graph",
                                     description="run trials through driver_node + policy_node over DDS")
    parser.add_argument("specs", help="JSON list of trial specs (policy, task, perturbation, seed, control_rate_hz)")
    parser.add_argument("results", help="where to write the JSON list of results")
    parser.add_argument("--real-time-factor", type=float, default=1.0)
    parser.add_argument("--cell", default=None, help="a proxy cell YAML: run the trials in that cell")
    args = parser.parse_args(argv)
    cell = load_cell(args.cell) if args.cell else None
    prompt_gil_handover()  # the driver's control loop shares this process with a busy executor
    with open(args.specs) as f:
        specs = [TrialSpec.of(s["policy"], s["task"], s.get("perturbation"), s.get("seed", 0), s.get("control_rate_hz"))
                 for s in json.load(f)]
    cache: dict = {}
    results = []
    for spec in specs:
        print(f"[eval_graph] {spec.id}: starting ({spec.values or 'nominal'})", flush=True)
        result = run_trial(spec, args.real_time_factor, cache, cell)
        print(f"[eval_graph] {spec.id}: {result.stage} margin {result.margin:+.4f} "
              f"({result.sim_time_s:.2f} s simulated, {result.wall_s:.1f} s wall)", flush=True)
        results.append(asdict(result))
        with open(args.results, "w") as f:  # after every trial: a caller sees progress
            json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
