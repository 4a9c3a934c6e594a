"""What the collision check in the command path costs: per robot on its stack's table scene, the
time of one pose check (sim.collision.CollisionGuard.clearance, over random poses in the joint
limits), and the control cycle's cost while the arm moves, with and without the check
(JointController.guard), computed from a loop stepping the twin toward far targets.

Usage: python bench/collision_check.py [--poses N] [--cycles N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _machine import machine_line
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.robots import registry
from r2s2r.sim.scene import load_scene


def scene_of(name: str):
    return load_scene("config/scenes/franka_table.yaml" if name == "franka_fr3" else f"config/scenes/{name}_table.yaml")


def cycle_cost(name: str, cycles: int, guarded: bool) -> tuple[float, float]:
    """Seconds per control cycle (ControlLoop.cycle, physics included) while moving between
    clear far targets, and the share of the cycles that moved."""
    robot = registry()[name]
    hw = SimHardware(scene_of(name))
    hw.connect()
    loop = ControlLoop(hw)
    guard = loop.guard
    if not guarded:
        loop.controller.guard = None
    rng = np.random.default_rng(0)
    here = robot.home_positions.copy()
    moving = 0
    elapsed = 0.0
    done = 0
    while done < cycles:
        for _ in range(200):  # a clear target 0.5 rad or more away
            far = np.clip(here + rng.uniform(-0.8, 0.8, here.size), robot.limits.lower, robot.limits.upper)
            if np.abs(far - here).max() >= 0.5 and guard.clearance(far).clear:
                break
        for g in robot.groups:
            index = [robot.joint_names.index(j) for j in g.joints]
            try:
                loop.controller.command_positions(g.name, far[index], hw.now)
            except Exception:  # a combination with the other groups' targets that touches: skip it
                pass
        start = time.perf_counter()
        for _ in range(min(400, cycles - done)):
            loop.cycle()
            moving += bool(loop.controller.limiter.velocity.any())
            done += 1
        elapsed += time.perf_counter() - start
        here = loop.controller.limiter.position.copy()
    return elapsed / done, moving / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--poses", type=int, default=2000)
    parser.add_argument("--cycles", type=int, default=4000)
    args = parser.parse_args()
    print(f"# collision check, {machine_line()}")
    print("| robot | one pose check (us) | cycle while moving, checked (us) | unchecked (us) | moving share |")
    print("|---|---|---|---|---|")
    for name in sorted(registry()):
        robot = registry()[name]
        hw = SimHardware(scene_of(name))
        hw.connect()
        guard = ControlLoop(hw).guard
        rng = np.random.default_rng(1)
        poses = rng.uniform(robot.limits.lower, robot.limits.upper, size=(args.poses, len(robot.joint_names)))
        start = time.perf_counter()
        for q in poses:
            guard.clearance(q)
        per_pose = (time.perf_counter() - start) / args.poses
        checked, share = cycle_cost(name, args.cycles, True)
        unchecked, _ = cycle_cost(name, args.cycles, False)
        print(f"| {name} | {per_pose * 1e6:.1f} | {checked * 1e6:.0f} | {unchecked * 1e6:.0f} | {share:.2f} |")


if __name__ == "__main__":
    main()
