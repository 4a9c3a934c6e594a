"""Evaluation throughput of a learned image policy: trials per minute one at a time and in
lockstep batches (TrialWorker.run_batch), and where a worker's time goes.

The policy: r2s2r.policy.models.ConvPolicy, about 10 M parameters (the CNN of
bench/policy_loop.py), one 96x96 image from the scene camera (rendered at the camera's
calibrated 320x240, resized by the policy as on the live graph), saved as TorchScript with random
weights; its actions stay within a few centimetres of home (action statistics: mean home,
std 0.02), so every trial runs to its time limit. A chunk of 2 actions, so the policy infers at
every tick (20 Hz), as a reactive visuomotor policy does.

The trials: franka_block_in_bowl with its time limit cut to --seconds (default 3 s, 60 ticks),
perturbations drawn uniformly from the task's space, the same --trials in every mode, one
worker in this process with one torch thread (a pool worker's setting). Modes:

- one at a time, unpadded: `act` per observation, what policy_node runs on the live graph;
- batch 1, 8, 16, 32: `act_batch` on the stacked observations of the trials that infer at a
  tick, each call padded to whole blocks of 8 rows (results identical bit for bit across these).

For each mode: trials per minute, the speed-up over one at a time (unpadded), and the shares
of the worker's time spent rendering, in the policy (its call and the runtime), in physics and
control, and judging.

Usage: python bench/policy_eval_throughput.py [--trials N] [--seconds S] [--batches 1,8,16,32]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from _machine import machine_line
from r2s2r import paths
from r2s2r.eval.runner import TIMING, TrialSpec, TrialWorker, sample_perturbations
from r2s2r.eval.tasks import load_task
from r2s2r.policy import FeatureStats, Normalizer
from r2s2r.policy.types import ActionSpace, ObservationSpace, PolicyMetadata
from r2s2r.robots import get_robot

TASK = "franka_block_in_bowl"
CNN = {"channels": (32, 64, 128, 256, 512), "hidden": 1920}  # bench/policy_loop.py's ~10 M parameters
IMAGE = (96, 96)
CHUNK = 2


def write_task(folder: Path, seconds: float) -> str:
    """franka_block_in_bowl with a shorter time limit, its perturbation file named absolutely."""
    source = paths.config_path("tasks", f"{TASK}.yaml")
    data = yaml.safe_load(source.read_text())
    data["time_limit_s"] = seconds
    data["perturbations"] = str((source.parent / data["perturbations"]).resolve())
    path = folder / f"{TASK}_{seconds:g}s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def write_policy(folder: Path, task) -> tuple[str, int]:
    import torch
    from r2s2r.policy.formats import save_torchscript
    from r2s2r.policy.models import ConvPolicy
    robot = get_robot(task.robot)
    groups = {g.name: len(g.joints) for g in robot.groups}
    grippers = tuple(g.name for g in robot.grippers)
    metadata = PolicyMetadata(ObservationSpace(groups, grippers, {"scene": IMAGE}), ActionSpace(groups, grippers),
                              control_rate_hz=task.control_rate_hz, chunk_length=CHUNK, name="cnn_10m")
    home = np.concatenate([robot.home_positions, [g.opening_range[1] for g in robot.grippers]])
    normalizer = Normalizer({"action": FeatureStats("mean_std", {"mean": home, "std": np.full(home.size, 0.02)})})
    torch.manual_seed(0)
    model = ConvPolicy(metadata.observation.size, metadata.action.size, CHUNK, cameras=1, **CNN).eval()
    path = save_torchscript(folder / "cnn_10m.pt", model, metadata, normalizer)
    return f"torchscript:{path}", sum(p.numel() for p in model.parameters())


def run_mode(worker: TrialWorker, specs, batch: int | None) -> tuple[float, dict, list]:
    """Wall seconds, time shares and results of `specs` on `worker`: batch None is one at a time
    through the policy's own act (unpadded), else run_batch in batches of `batch`."""
    policy, _ = worker.policy(specs[0].policy, get_robot(worker.task(specs[0].task).robot))
    policy.accepts_batch = batch is not None  # None: the policy as if it took no batch (act, unpadded)
    before = dict(worker.timing)
    start = time.perf_counter()
    results = []
    size = batch or 1
    for first in range(0, len(specs), size):
        results += worker.run_batch(specs[first:first + size])
    wall = time.perf_counter() - start
    spent = {k: worker.timing[k] - before[k] for k in TIMING}
    return wall, spent, results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=3.0, help="each trial's time limit (simulated)")
    parser.add_argument("--batches", default="1,8,16,32")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    os.environ.setdefault("MUJOCO_GL", "egl")
    with tempfile.TemporaryDirectory(prefix="r2s2r-bench-") as tmp:
        folder = Path(tmp)
        task_path = write_task(folder, args.seconds)
        task = load_task(task_path)
        policy, parameters = write_policy(folder, task)
        points = sample_perturbations(task.perturbations, args.trials, seed=0)
        specs = [TrialSpec.of(policy, task_path, p, seed=i) for i, p in enumerate(points)]
        print(machine_line())
        print(f"{args.trials} trials of {TASK} ({args.seconds:g} s each, {task.control_rate_hz:g} Hz policy ticks), "
              f"ConvPolicy {parameters / 1e6:.1f} M parameters, one {IMAGE[0]}x{IMAGE[1]} image from a "
              f"320x240 camera, chunk {CHUNK} (inference every tick); one worker, one torch thread")
        worker = TrialWorker(threads=1)
        worker.run_batch(specs[:2])  # imports, compiles, the policy's load and first calls

        modes = [("one at a time (act)", None)] + [(f"batch {b}", b) for b in batches]
        rows, reference = [], None
        for label, batch in modes:
            wall, spent, results = run_mode(worker, specs, batch)
            rate = 60.0 * len(specs) / wall
            reference = reference or rate
            shares = {k: v / wall for k, v in spent.items()}
            ticks = sum(round(r.sim_time_s * task.control_rate_hz) for r in results)
            rows.append((label, rate, rate / reference, shares, results))
            print(f"{label:>20}: {rate:6.1f} trials/min  {rate / reference:4.2f}x   "
                  + "  ".join(f"{k} {100 * s:4.1f}%" for k, s in shares.items())
                  + f"  other {100 * (1 - sum(shares.values())):4.1f}%;  per trial tick: policy "
                  f"{1e3 * spent['policy'] / ticks:4.1f} ms, render {1e3 * spent['render'] / ticks:4.1f} ms",
                  flush=True)
        padded = [r for label, *_, r in rows if label.startswith("batch")]
        same = all([x.deterministic() for x in r] == [x.deterministic() for x in padded[0]] for r in padded)
        print(f"batched results identical to batch 1, bit for bit: {'yes' if same else 'NO'}")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
