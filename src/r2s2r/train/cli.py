"""`r2s2r train`: a compact policy from a LeRobot v3.0 dataset, on the CPU (train.trainer).

    r2s2r train --dataset D --policy mlp|act [--steps N] [--batch B] [--seed S] --out RUN
    r2s2r train --dataset D --policy act --object-pose-loss W --keypoints K --stills STILLS [--still-steps N] --out RUN
"""

from __future__ import annotations

from pathlib import Path

from r2s2r.data.cli import image_size_type
from r2s2r.eval.cli import _count
from r2s2r.resumable import run_resumable


def _train(args) -> int:
    from r2s2r.train.trainer import TrainConfig, Trainer
    cameras = None if args.cameras is None else tuple(c.strip() for c in args.cameras.split(",") if c.strip())
    config = TrainConfig(dataset=str(Path(args.dataset).resolve()), policy=args.policy, steps=args.steps,
                         batch=args.batch, seed=args.seed, chunk_length=args.chunk_length,
                         learning_rate=args.learning_rate, checkpoint_every=args.checkpoint_every,
                         image_size=args.image_size, cameras=cameras, threads=args.threads,
                         privileged=args.privileged, state_noise=args.state_noise,
                         image_shift=args.image_shift, object_pose_loss=args.object_pose_loss,
                         stills=str(Path(args.stills).resolve()) if args.stills else None,
                         still_steps=args.still_steps,
                         model={"keypoints": args.keypoints} if args.keypoints else {})
    last, code = run_resumable(
        "train", lambda: Trainer(config, args.out).train(progress=not args.no_progress), (),
        lambda: f"rerun the same command to resume from the last checkpoint in {args.out}/checkpoints")
    if last is None:
        return code
    print(f"checkpoint: {last}")
    print(f"losses: {Path(args.out) / 'losses.png'}")
    print(f"evaluate: r2s2r eval --task TASK --policy {last} --trials 100")
    return 0


def add_train_parser(sub) -> None:
    from r2s2r.train.trainer import POLICIES
    tr = sub.add_parser("train", help="train a compact policy on a LeRobot v3.0 dataset, on the CPU (resumable)")
    tr.add_argument("--dataset", required=True, help="a LeRobot v3.0 dataset folder (r2s2r collect writes them)")
    tr.add_argument("--policy", choices=POLICIES, default="mlp",
                    help="mlp: the state alone; act: an ACT-style policy over the state and the cameras")
    tr.add_argument("--steps", type=_count(1, 10**7), default=2000, help="optimiser steps")
    tr.add_argument("--batch", type=_count(1, 4096), default=64, help="frames per step")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--chunk-length", type=_count(1, 200), default=10, help="actions predicted per observation")
    tr.add_argument("--learning-rate", type=float, default=1e-3)
    tr.add_argument("--checkpoint-every", type=_count(1, 10**7), default=500, help="steps between checkpoints")
    tr.add_argument("--image-size", type=image_size_type, default=(64, 48), help="WIDTHxHEIGHT the act policy sees")
    tr.add_argument("--cameras", default=None, help="comma-separated cameras for act (default: the dataset's)")
    tr.add_argument("--privileged", action="store_true",
                    help="also observe the objects' poses (a dataset collected with --privileged); such a policy "
                         "runs in the twin only, for fast studies")
    tr.add_argument("--state-noise", type=float, default=0.0,
                    help="std of Gaussian noise on the normalised state of each batch (robustness to drift)")
    tr.add_argument("--image-shift", type=_count(0, 64), default=0,
                    help="act: shift each training image by up to this many pixels (augmentation)")
    tr.add_argument("--object-pose-loss", type=float, default=0.0,
                    help="act: weight of an auxiliary loss reading the objects' poses from the images (a dataset "
                         "collected with --privileged; training only, the policy never observes them)")
    tr.add_argument("--keypoints", type=_count(0, 256), default=0,
                    help="act: spatial-softmax keypoints per camera (where in the picture each learned feature is); "
                         "with --object-pose-loss the poses are read from them and handed to the decoder")
    tr.add_argument("--stills", default=None,
                    help="act with --object-pose-loss: a dataset of `r2s2r dataset stills`; the camera networks "
                         "learn the objects' poses from its scenes too")
    tr.add_argument("--still-steps", type=_count(0, 10**7), default=0,
                    help="steps on the stills alone before the policy's steps")
    tr.add_argument("--threads", type=_count(1, 256), default=1,
                    help="torch CPU threads (more pay only for wider models than the defaults)")
    tr.add_argument("--out", required=True, help="the run's folder (new, or a run to resume)")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    tr.set_defaults(func=_train)


__all__ = ["add_train_parser"]
