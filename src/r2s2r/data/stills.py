"""`r2s2r dataset stills`: randomised still frames of a task's scene with the objects' poses,
to teach an image policy's camera network where the objects are (`r2s2r train --stills`).

Demonstrations show one scene each, and a camera network trained on two hundred of them learns
those two hundred scenes rather than how to find a block (docs/training.md). A still costs one
render and no physics: scene i is drawn from the task's perturbations (within an envelope) from
(seed, i), as a trial's would be, and shown with the arm at `poses` joint states drawn from a
dataset's observation.state, where the arm goes in demonstrations, so the wrist camera sees
what it sees in an episode. The frames are written as a LeRobotDataset v3.0 with the
demonstrations' features (one episode per scene, `action` the posed state), so training reads
and checks them like any dataset.

Scenes are staged in blocks as they are rendered (OUT/.stills/<first scene>.npz, each written
whole): a killed run resumes where it stood and gives the same dataset.
"""

from __future__ import annotations

import copy
import io
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from r2s2r.data.collect import (META_PATH, POSE_FIELDS, _write_whole, privileged_objects, rendered, same_options,
                                state_names, task_cameras)
from r2s2r.data.lerobot_v3 import DatasetError, DatasetWriter, Episode, Feature, open_dataset
from r2s2r.processes import sole_writer

STAGING = ".stills"
BLOCK = 16  # scenes per staged file and per job: a few seconds of rendering each


@dataclass(frozen=True)
class StillsOptions:
    """What a set of stills is: the same options give the same dataset."""

    task: str
    scenes: int
    poses_from: str  # a dataset of the task's robot: the arm's poses are drawn from its observation.state
    poses: int = 4  # arm poses per scene
    seed: int = 0
    envelope: str | None = None
    cameras: tuple[str, ...] | None = None  # None: every camera of the task's scene
    image_size: tuple[int, int] = (128, 96)  # width, height

    def key(self) -> str:
        import hashlib
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Renderer:
    """What a worker needs to render a block of scenes (eval.runner.JobContext)."""

    key: str
    task: str
    cameras: tuple[str, ...]
    image_size: tuple[int, int]

    def build(self):
        from r2s2r.eval.tasks import load_task
        from r2s2r.sim.render import SharedContexts
        return self, load_task(self.task), SharedContexts()


def _render_block(state, scenes) -> dict[str, np.ndarray]:
    """The frames of a block of scenes, each (perturbation, arm states (poses, state size))."""
    from r2s2r.sim.render import TwinRenderer
    from r2s2r.sim.twin import Twin
    context, base, shared = state
    frames: dict[str, list] = {"observation.state": [], "observation.environment_state": []}
    frames.update({f"observation.images.{c}": [] for c in context.cameras})
    objects = privileged_objects(base)
    for perturbation, states in scenes:
        task = copy.copy(base)  # a task keeps its episode's state
        task.new_episode(perturbation)
        twin = Twin(task.scene(perturbation))
        task.start(twin)
        arm_size = len(twin.joint_names)
        renderer = TwinRenderer(twin, shared=shared)
        try:
            for posed in states:
                twin.pose(posed[:arm_size], posed[arm_size:])
                poses = task.object_poses(twin)
                frames["observation.state"].append(np.asarray(posed, np.float32))
                frames["observation.environment_state"].append(
                    np.concatenate([np.concatenate(poses[name]) for name in objects]).astype(np.float32))
                for camera in context.cameras:
                    frames[f"observation.images.{camera}"].append(rendered(renderer, camera, context.image_size))
        finally:
            renderer.close()
    return {k: np.stack(v) for k, v in frames.items()}


def arm_states(options: StillsOptions, task, robot) -> np.ndarray:
    """Every frame's observation.state of `options.poses_from`, checked to be the task's robot's."""
    dataset = open_dataset(options.poses_from)
    if dataset.robot_type != robot.name:
        raise DatasetError(f"{options.poses_from}: a dataset of {dataset.robot_type}; the poses of task "
                           f"{task.name} need one of {robot.name}")
    names = list(dataset.features["observation.state"].names or [])
    if names != state_names(robot):
        raise DatasetError(f"{options.poses_from}: observation.state is {names}; expected {state_names(robot)}")
    return np.concatenate([dataset.episode(i, videos=False).frames["observation.state"]
                           for i in range(len(dataset.episodes))]).astype(np.float32)


def render_stills(options: StillsOptions, out: str | Path, pool, progress: bool = True) -> Path:
    """Render the stills on `pool` (eval.runner.TrialPool) and write the dataset to `out`; one
    run at a time writes a folder."""
    with sole_writer(out, "r2s2r dataset stills", DatasetError) as folder:
        return _render(options, folder, pool, progress)


def _render(options: StillsOptions, out: Path, pool, progress: bool) -> Path:
    from r2s2r.eval.runner import add_stored, progress_bar, sample_perturbations
    from r2s2r.eval.tasks import load_task
    from r2s2r.robots import get_robot
    if options.scenes < 1 or options.poses < 1:
        raise DatasetError(f"{options.scenes} scenes of {options.poses} poses; expected 1 or more of each")
    width, height = options.image_size
    if width < 2 or height < 2 or width % 2 or height % 2:
        raise DatasetError(f"image size {width}x{height}; expected an even width and height (yuv420p video)")
    staging = out / STAGING
    if out.exists() and not staging.exists() and any(out.iterdir()):
        raise DatasetError(f"{out} exists and is not empty; expected a new folder for the stills")
    task = load_task(options.task)
    robot = get_robot(task.robot)
    cameras = tuple(task_cameras(task, options.cameras))
    if not cameras:
        raise DatasetError(f"task {task.name}'s scene has no camera; stills need one")
    space = task.perturbations.within(options.envelope) if options.envelope else task.perturbations
    states = arm_states(options, task, robot)
    same_options(staging, options, "unfinished stills")
    points = sample_perturbations(space, options.scenes, options.seed)
    context = _Renderer(f"stills:{options.key()}", task.name, cameras, tuple(options.image_size))
    starts = list(range(0, options.scenes, BLOCK))
    done = {int(p.stem) for p in staging.glob("*.npz")}
    bar = progress_bar(options.scenes, f"stills {task.name}", progress, unit="scene")
    add_stored(bar, sum(min(BLOCK, options.scenes - s) for s in done))
    try:
        pending = [s for s in starts if s not in done]
        # A few blocks per round, so each is staged as soon as its round ends.
        per_round = max(1, 2 * getattr(pool, "workers", 1))
        for first in range(0, len(pending), per_round):
            blocks = pending[first:first + per_round]
            items = []
            for start in blocks:
                scenes = []
                for i in range(start, min(start + BLOCK, options.scenes)):
                    rng = np.random.default_rng([int(options.seed), int(i), 1])
                    scenes.append((points[i], states[rng.integers(len(states), size=options.poses)]))
                items.append(scenes)
            for start, frames in zip(blocks, pool.map(_render_block, items, context)):
                buffer = io.BytesIO()
                np.savez(buffer, **frames)
                _write_whole(staging / f"{start:06d}.npz", buffer.getvalue())
                bar.update(min(BLOCK, options.scenes - start))
    finally:
        bar.close()
    _write(out, options, task, robot, cameras, points, starts)
    return out


def _write(out: Path, options: StillsOptions, task, robot, cameras, points, starts) -> None:
    names = state_names(robot)
    fields = [f"{o}.{f}" for o in privileged_objects(task) for f in POSE_FIELDS]
    width, height = options.image_size
    features = {"observation.state": Feature("float32", (len(names),), names),
                "action": Feature("float32", (len(names),), names),
                "observation.environment_state": Feature("float32", (len(fields),), fields)}
    for camera in cameras:
        features[f"observation.images.{camera}"] = Feature("video", (height, width, 3))
    staging = out / STAGING
    building = staging / "dataset"
    if building.exists():  # a finalisation that was killed: begin it again
        shutil.rmtree(building)
    writer = DatasetWriter(building, int(round(task.control_rate_hz)), features, robot.name)
    text = f"stills of {task.name}"
    for start in starts:
        with np.load(staging / f"{start:06d}.npz", allow_pickle=False) as data:
            block = {k: data[k] for k in data.files}
        for j, i in enumerate(range(start, min(start + BLOCK, options.scenes))):
            rows = slice(j * options.poses, (j + 1) * options.poses)
            frames = {k: v[rows] for k, v in block.items()}
            frames["action"] = frames["observation.state"]
            writer.add(Episode(text, frames, {"r2s2r/scene": i,
                                              "r2s2r/perturbation": json.dumps(points[i], sort_keys=True)}))
    writer.close()
    meta = {"task": task.name, "stills": True, "scenes": options.scenes, "poses": options.poses,
            "poses_from": str(options.poses_from), "seed": options.seed, "envelope": options.envelope,
            "privileged": ["observation.environment_state"], "cameras": list(cameras),
            "image_size": list(options.image_size)}
    (building / META_PATH).write_text(json.dumps(meta, indent=2))
    for name in ("data", "videos", "meta"):
        if (out / name).exists():
            shutil.rmtree(out / name)
        os.replace(building / name, out / name)
    shutil.rmtree(staging)
    open_dataset(out)  # what was written reads back whole


__all__ = ["StillsOptions", "render_stills", "arm_states"]
