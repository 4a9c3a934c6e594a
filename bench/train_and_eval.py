"""The honest baseline: demonstrations of franka_block_in_bowl's scripted expert inside its
`operating` envelope, the state MLP and the ACT-style image policy trained on them, each
checkpoint evaluated on held-out trials of the same envelope (a campaign seed the data never
used), beside the expert on the very same trials.

For each N in --demos: `r2s2r collect` N successful episodes (--cameras at --record-size, the
objects' poses recorded), train the MLP (--mlp-steps) on the state and the objects' poses (the
joints alone do not say where the block is: privileged, the twin's only) and ACT (--act-steps) on
the state and the cameras at --image-size (the poses only as the target of its auxiliary loss,
--object-pose-loss, read from --keypoints spatial-softmax keypoints per camera; with --stills S,
also learnt from S randomised still scenes, `r2s2r dataset stills`), and evaluate
both and the expert on --trials trials. Prints success with Wilson 95 % intervals, each
policy's share of the expert's success, training wall time and steps per second. Targets
(issue 24): with 200 demonstrations the state policy reaches 80 % of the expert's success and
the image policy 60 %, each trained in under 30 minutes on two cores.

Everything lands in --out (datasets, runs, the trial store), so an interrupted run resumes: a
finished collection, training or campaign is reused.

Usage: python bench/train_and_eval.py [--demos 50,200] [--trials 500] [--mlp-steps 3000]
                                      [--act-steps 6000] [--state-noise 0.05] [--workers 2]
                                      [--cameras scene,wrist] [--record-size 128x96] [--image-size 64x48]
                                      [--image-shift 3] [--object-pose-loss 1.0] [--keypoints 32]
                                      [--out bench_output/train_and_eval]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _machine import machine_line
from r2s2r.data.collect import CollectOptions, collect
from r2s2r.data.stills import StillsOptions, render_stills
from r2s2r.eval.runner import TrialPool, plan_eval, run_trials
from r2s2r.eval.stats import wilson
from r2s2r.eval.store import TrialStore
from r2s2r.eval.tasks import load_task
from r2s2r.train.trainer import TrainConfig, Trainer, latest_checkpoint

TASK = "franka_block_in_bowl"
EXPERT = f"scripted:{TASK}"
ENVELOPE = "operating"
DATA_SEED = 0
STILLS_SEED = 7  # the still scenes' own draws
EVAL_SEED = 20261205  # the held-out trials' campaign seed: no trial of the data has its seeds


def evaluate(policy: str, trials: int, store: TrialStore, pool: TrialPool, name: str) -> list:
    task = load_task(TASK)
    planned = plan_eval(policy, task, trials, EVAL_SEED, envelope=ENVELOPE)
    store.open_campaign(name, {"kind": "bench", "policy": policy, "trials": trials, "seed": EVAL_SEED})
    return run_trials(planned, store, name, pool=pool, batch=8)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", default="50,200")
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--mlp-steps", type=int, default=3000)
    parser.add_argument("--act-steps", type=int, default=6000)
    parser.add_argument("--cameras", default="scene,wrist", help="the cameras collected and seen by ACT")
    parser.add_argument("--record-size", default="128x96", help="WIDTHxHEIGHT of the dataset's videos")
    parser.add_argument("--image-size", default="64x48", help="WIDTHxHEIGHT ACT is trained at")
    parser.add_argument("--image-shift", type=int, default=3, help="r2s2r train --image-shift, for ACT")
    parser.add_argument("--object-pose-loss", type=float, default=1.0, help="r2s2r train --object-pose-loss, for ACT")
    parser.add_argument("--keypoints", type=int, default=32, help="r2s2r train --keypoints, for ACT")
    parser.add_argument("--stills", type=int, default=0,
                        help="randomised still scenes rendered per dataset for ACT's pose reading (r2s2r dataset "
                             "stills, 4 arm poses each; 0: none)")
    parser.add_argument("--still-steps", type=int, default=20000, help="r2s2r train --still-steps, with --stills")
    parser.add_argument("--state-noise", type=float, default=0.05, help="r2s2r train --state-noise, for both")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="bench_output/train_and_eval")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    width, height = (int(v) for v in args.image_size.split("x"))
    record_size = tuple(int(v) for v in args.record_size.split("x"))
    cameras = tuple(c.strip() for c in args.cameras.split(",") if c.strip())
    print(f"{machine_line()}; {TASK} in its {ENVELOPE} "
          f"envelope; {args.trials} held-out trials (seed {EVAL_SEED})", flush=True)
    rows = []
    with TrialStore(out / "trials.sqlite") as store, TrialPool(args.workers) as pool:
        expert = evaluate(EXPERT, args.trials, store, pool, "expert")
        expert_wins = sum(r.success for r in expert)
        print(f"expert: {wilson(expert_wins, len(expert)).describe()}", flush=True)
        for demos in (int(n) for n in args.demos.split(",")):
            dataset = out / f"demos_{demos}"
            if not (dataset / "meta" / "info.json").is_file() or (dataset / ".collect").exists():
                clock = time.perf_counter()
                options = CollectOptions(task=TASK, policy=EXPERT, episodes=demos, seed=DATA_SEED, keep="success",
                                         envelope=ENVELOPE, cameras=cameras, image_size=record_size,
                                         privileged=True)
                done = collect(options, dataset, pool)
                print(f"{demos} demonstrations from {done.trials} trials in {time.perf_counter() - clock:.0f} s",
                      flush=True)
            stills = None
            if args.stills:
                stills = out / f"stills_{demos}"
                if not (stills / "meta" / "info.json").is_file() or (stills / ".stills").exists():
                    clock = time.perf_counter()
                    render_stills(StillsOptions(task=TASK, scenes=args.stills, poses_from=str(dataset.resolve()),
                                                seed=STILLS_SEED, envelope=ENVELOPE, cameras=cameras,
                                                image_size=record_size), stills, pool)
                    print(f"{args.stills} still scenes in {time.perf_counter() - clock:.0f} s", flush=True)
            for policy, steps in (("mlp", args.mlp_steps), ("act", args.act_steps)):
                run = out / f"{policy}_{demos}"
                config = TrainConfig(dataset=str(dataset.resolve()), policy=policy, steps=steps, batch=64,
                                     checkpoint_every=max(1, steps // 4), image_size=(width, height),
                                     privileged=policy == "mlp", state_noise=args.state_noise,
                                     image_shift=args.image_shift if policy == "act" else 0,
                                     object_pose_loss=args.object_pose_loss if policy == "act" else 0.0,
                                     model={"keypoints": args.keypoints} if policy == "act" and args.keypoints else {},
                                     stills=str(stills.resolve()) if policy == "act" and stills else None,
                                     still_steps=args.still_steps if policy == "act" and stills else 0)
                checkpoint = latest_checkpoint(run)
                if checkpoint is None or not checkpoint.name.endswith(f"{steps:06d}"):
                    checkpoint = Trainer(config, run).train()
                history = json.loads((run / "losses.json").read_text())
                results = evaluate(str(checkpoint), args.trials, store, pool, f"{policy}_{demos}")
                wins = sum(r.success for r in results)
                rows.append((policy, demos, wilson(wins, len(results)), wins / max(expert_wins, 1),
                             history["wall_s"], steps / history["wall_s"]))
                print(f"{policy}, {demos} demos: {rows[-1][2].describe()}; {rows[-1][3]:.0%} of the expert's "
                      f"successes; trained in {history['wall_s'] / 60:.1f} min ({rows[-1][5]:.1f} steps/s)",
                      flush=True)
    print(f"\nexpert: {wilson(expert_wins, len(expert)).describe()}")
    print("policy  demos  success (95 % CI)              share of expert  training  steps/s")
    for policy, demos, rate, share, wall, speed in rows:
        print(f"{policy:6s}  {demos:5d}  {rate.describe():30s} {share:6.0%}          "
              f"{wall / 60:5.1f} min  {speed:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
