"""A minimal in-process trial loop for tests of tasks and experts: SimHardware + Driver +
PolicyRuntime (synchronous) + Task, the task's command latency on the twin. What the
evaluation engine's trial runner does, without its store, pool or reports."""

from __future__ import annotations

from dataclasses import dataclass

from r2s2r.eval.runner import send_command
from r2s2r.eval.tasks import Outcome, Task
from r2s2r.hardware.driver import Driver
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.policy import Observation, PolicyRuntime, RuntimeConfig, load_policy
from r2s2r.policy.observation import JointLayout


@dataclass
class Trial:
    outcome: Outcome
    twin: object
    policy: object
    loop: ControlLoop
    rejected: int  # commands the controller refused


def observe(task: Task, loop: ControlLoop, layout: JointLayout) -> Observation:
    twin = loop.hardware.twin
    joints, grippers = layout.split(loop.sample())
    return Observation(twin.time, joints, grippers, objects=task.object_poses(twin))


def run_trial(task: Task, perturbation: dict | None = None, seed: int = 0, policy=None,
              time_limit_s: float | None = None, control_rate_hz: float = 500.0) -> Trial:
    """One trial of `policy` (default: the task's expert). The twin's control loop runs at the
    robot's rate, at most `control_rate_hz` (the FR3's is 1 kHz; half of it keeps tests quick)."""
    task.new_episode(perturbation)
    hardware = SimHardware(task.scene(perturbation), seed=seed)
    driver = Driver(hardware, control_rate_hz=min(control_rate_hz, hardware.robot.control_rate_hz))
    driver.start()
    loop, twin = driver.loop, hardware.twin
    task.start(twin)
    driver.hold_here()
    policy = policy or load_policy(task.expert)
    runtime = PolicyRuntime(policy, RuntimeConfig(asynchronous=False, replan_steps=1))
    runtime.reset()
    layout = JointLayout.from_robot(hardware.robot)
    limit = task.time_limit_s if time_limit_s is None else time_limit_s
    period = 1.0 / task.control_rate_hz
    timed_out = True
    tick = 0
    while twin.time < limit - 1e-9:
        now = twin.time
        command = runtime.step(now, observe(task, loop, layout))
        if command is not None:  # the perturbation's latency is the twin's (task.start)
            send_command(driver, command)
        tick += 1
        while twin.time < tick * period - 1e-9:
            loop.cycle()
        task.step(twin)
        if task.done(twin):
            timed_out = False
            break
    return Trial(task.outcome(twin, timed_out), twin, policy, loop, sum(loop.controller.stats.rejected.values()))
