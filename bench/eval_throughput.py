"""Evaluation throughput: trials per minute with 1 and 2 workers (scaling efficiency), and the
runner's overhead against a bare MuJoCo loop running the same policy on the same scene.

The trials are franka_block_in_bowl with its scripted expert, perturbations drawn uniformly
from the task's space (the same set in every measurement). Three ways of running them, one
trial after another in this process:

- runner: the evaluation engine's trial (TrialWorker.run): ControlLoop at the robot's control
  rate (JointController + SafetyFilter every cycle, as driver_node runs it), command latency,
  the task judging every policy tick;
- bare + control loop: the same policy (PolicyRuntime) and task on the same twin, calling the
  same ControlLoop itself: what is left is the runner's own bookkeeping;
- bare MuJoCo: the same policy and task, the policy's targets written straight into the
  actuators' ctrl and mj_step called directly: physics, policy and task judging only.

Ratios of wall time to bare MuJoCo; the issue's target is runner / bare MuJoCo <= 1.15.
Then a campaign of --campaign-trials with 1 and 2 workers (1: in this process; 2: a process
pool, its start included), trials per minute and scaling efficiency (rate with 2 / (2 x rate
with 1)).

Usage: python bench/eval_throughput.py [--trials N] [--campaign-trials N] [--control-rate HZ]
                                       [--factors a,b,...]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from _machine import machine_line
from r2s2r.eval.runner import TrialSpec, TrialWorker, plan_eval, run_trials
from r2s2r.eval.store import TrialStore
from r2s2r.eval.tasks import load_task
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.policy import Observation, PolicyRuntime
from r2s2r.policy.observation import JointLayout
from r2s2r.sim.twin import Twin

TASK = "franka_block_in_bowl"
POLICY = f"scripted:{TASK}"


def bare_trial(worker: TrialWorker, spec: TrialSpec, control_loop: bool) -> str:
    """One trial without the runner: the policy's targets to the twin, directly or through ControlLoop."""
    task = worker.task(spec.task)
    values = spec.values
    task.new_episode(values)
    twin = Twin(task.scene(values), seed=spec.seed)
    task.start(twin)
    policy, config = worker.policy(spec.policy, twin.robot)
    runtime = PolicyRuntime(policy, config)
    runtime.reset()
    layout = JointLayout.from_robot(twin.robot)
    loop = None
    if control_loop:
        hardware = SimHardware(twin.scene, spec.seed)
        hardware.twin = twin  # the very twin, already set up
        loop = ControlLoop(hardware, spec.control_rate_hz)
        loop.hold_here()
    period = 1.0 / task.control_rate_hz
    steps = int(round(period / twin.timestep))
    timed_out = True
    while twin.time < task.time_limit_s - 1e-9:
        joints, grippers = layout.split(twin.joint_sample())
        command = runtime.step(twin.time, Observation(twin.time, joints, grippers, objects=task.object_poses(twin)))
        if loop is not None:
            for group, target in command.joints.items():
                loop.controller.command_positions(group, target, now=twin.time)
            for gripper, opening in command.grippers.items():
                loop.controller.command_gripper(gripper, [opening], now=twin.time)
            loop.run_until(twin.time + period)
        else:
            # joint_names is the groups' joints in group order
            twin.set_arm_targets(np.concatenate([command.joints[g.name] for g in twin.robot.groups]))
            twin.set_gripper_openings(np.array([command.grippers[g.name] for g in twin.robot.grippers]))
            twin.step(steps)  # mj_step, `steps` times
        task.step(twin)
        if task.done(twin):
            timed_out = False
            break
    return task.outcome(twin, timed_out).stage


def robot_control_rate(task) -> float:
    from r2s2r.robots import get_robot
    return get_robot(task.robot).control_rate_hz


def timed(fn, specs) -> tuple[float, list]:
    start = time.perf_counter()
    out = [fn(s) for s in specs]
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12, help="trials of the overhead comparison")
    parser.add_argument("--campaign-trials", type=int, default=40, help="trials of the 1- and 2-worker campaigns")
    parser.add_argument("--control-rate", type=float, default=None, help="ControlLoop rate (default: the robot's)")
    parser.add_argument("--factors", default="block_x,block_y,block_yaw,block_friction,bowl_x,bowl_y")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    task = load_task(TASK)
    factors = [f for f in args.factors.split(",") if f]
    planned = plan_eval(POLICY, task, args.trials, args.seed, factors, control_rate_hz=args.control_rate)
    specs = [p.spec for p in planned]
    rate = args.control_rate or robot_control_rate(task)
    print(f"{machine_line()}; {args.trials} trials of {TASK}, "
          f"expert policy, factors {', '.join(factors)}; control loop at {rate:g} Hz")

    worker = TrialWorker()
    worker.run(specs[0])  # imports, first compile, policy load
    t_runner, results = timed(worker.run, specs)
    t_loop, stages_loop = timed(lambda s: bare_trial(worker, s, True), specs)
    t_bare, stages_bare = timed(lambda s: bare_trial(worker, s, False), specs)
    stages = [r.stage for r in results]
    print(f"outcomes  runner {sorted(stages)}")
    print(f"          bare + control loop agree on {sum(a == b for a, b in zip(stages, stages_loop))}/{len(specs)}, "
          f"bare MuJoCo on {sum(a == b for a, b in zip(stages, stages_bare))}/{len(specs)}")
    sim = sum(r.sim_time_s for r in results)
    for name, t in (("runner", t_runner), ("bare + control loop", t_loop), ("bare MuJoCo", t_bare)):
        print(f"{name:>20}: {t:7.2f} s wall for {sim:.0f} s simulated ({sim / t:5.1f}x real time), "
              f"{t / t_bare:5.2f}x bare MuJoCo")
    print(f"runner overhead: {t_runner / t_bare:.2f}x bare MuJoCo (target <= 1.15); "
          f"{t_runner / t_loop:.2f}x the same control loop without the runner")

    campaign = plan_eval(POLICY, task, args.campaign_trials, args.seed + 1, factors, control_rate_hz=args.control_rate)
    rates = {}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp, TrialStore(f"{tmp}/t.sqlite") as store:
            start = time.perf_counter()
            run_trials(campaign, store, "bench", workers=workers, progress=False)
            rates[workers] = len(campaign) / (time.perf_counter() - start) * 60
        print(f"{workers} worker{'s' if workers > 1 else ''}: {rates[workers]:6.1f} trials/min")
    print(f"scaling efficiency 1 -> 2 workers: {rates[2] / (2 * rates[1]):.2f}")


if __name__ == "__main__":
    main()
