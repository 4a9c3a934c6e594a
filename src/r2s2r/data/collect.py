"""`r2s2r collect`: demonstrations in the twin, written as a LeRobotDataset v3.0.

Every episode is a trial of the trial runner (eval.runner: deterministic, on a process pool or
Ray) watched by a `DemonstrationRecorder`, which records per policy tick what the policy saw and
what it commanded: `observation.state` (the robot's groups, then its grippers: the layout of
docs/policies.md), `action` (the command the runtime sent, the same layout),
`observation.images.<camera>` (each camera rendered at the chosen size when the observation was
taken) and, when asked for, `observation.environment_state` (privileged object poses, named in
meta/r2s2r.json as privileged). Each episode carries its trial's seed, perturbation, outcome,
margin and failure stage.

Episodes are staged as they end (OUT/.collect/episodes/<index>.npz, each written whole), so a
killed collection resumes where it stood; the dataset is written from the staged episodes in
plan order once all are there, so the same command gives the same dataset whatever the workers.
With `keep="success"`, trials continue in rounds until `episodes` of them have succeeded (the
first ones in plan order).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from r2s2r.data.lerobot_v3 import DatasetError, DatasetWriter, Episode, Feature, open_dataset
from r2s2r.eval.runner import Planned, RecordingObserver, TrialResult, TrialSpec, trial_seed
from r2s2r.processes import sole_writer

STAGING = ".collect"
META_PATH = "meta/r2s2r.json"  # r2s2r's own facts about the dataset; lerobot ignores it
KEEP = ("success", "all")
MAX_ATTEMPTS_PER_EPISODE = 20  # keep=success gives up when fewer than 1 in 20 trials succeed
POSE_FIELDS = ("x", "y", "z", "qw", "qx", "qy", "qz")


@dataclass(frozen=True)
class CollectOptions:
    """What a collection is: the same options give the same dataset."""

    task: str
    policy: str
    episodes: int
    seed: int = 0
    keep: str = "success"
    envelope: str | None = None
    conditions: tuple[tuple[tuple[str, float], ...], ...] | None = None  # perturbations, cycled
    cameras: tuple[str, ...] | None = None  # None: every camera of the task's scene
    image_size: tuple[int, int] = (128, 96)  # width, height
    privileged: bool = False
    # Relabelled rollouts (DAgger): `policy` acts, and each tick's action is what the task's
    # expert, in its state-feedback form, would command from the state the policy reached.
    relabel: bool = False

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def state_names(robot) -> list[str]:
    """The names of observation.state and action: every group's joints, then each gripper's opening."""
    return [j for g in robot.groups for j in g.joints] + [f"{g.name}.opening" for g in robot.grippers]


def rendered(renderer, camera: str, size: tuple[int, int]) -> np.ndarray:
    """`camera`'s frame from a TwinRenderer, resized to `size` (width, height) as the policy layer resizes."""
    import cv2
    image = renderer.rgb(camera)
    if (image.shape[1], image.shape[0]) != tuple(size):
        image = cv2.resize(image, tuple(size), interpolation=cv2.INTER_AREA)
    return image


class DemonstrationRecorder(RecordingObserver):
    """Records one trial's frames (see the module's docstring). The image of tick k is rendered
    when the twin is at tick k's time: at the start, then after each tick for the next. With
    `relabel`, a tick's action is the task expert's (its state-feedback form) from that tick's
    observation, not the command the trial's policy sent."""

    def __init__(self, cameras: Sequence[str], image_size: tuple[int, int], objects: Sequence[str] = (),
                 relabel: bool = False):
        self.cameras, self.image_size, self.object_names = tuple(cameras), tuple(image_size), tuple(objects)
        self.relabel = relabel
        self._labeller = None
        self.states: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.objects: list[np.ndarray] = []
        self.images: dict[str, list[np.ndarray]] = {c: [] for c in self.cameras}
        self._renderer = None
        self._space = None

    def start(self, twin, loop, task) -> None:
        from r2s2r.policy import PolicyMetadata
        from r2s2r.robots import get_robot
        defaults = PolicyMetadata.for_robot(get_robot(task.robot))
        self._space = defaults.action
        if self.relabel:
            self._labeller = expert_labeller(task, defaults)
        if self.cameras:
            from r2s2r.sim.render import TwinRenderer
            self._renderer = TwinRenderer(twin)
        self._pending = self._render()

    def _render(self) -> dict[str, np.ndarray]:
        return {camera: rendered(self._renderer, camera, self.image_size) for camera in self.cameras}

    def tick(self, twin, loop, observation, command) -> None:
        state = observation.state(self._space)
        self.states.append(state)
        if self._labeller is not None:
            from r2s2r.policy import Observation
            chunk = self._labeller.act(observation)
            first = Observation(chunk.stamp, {g: np.asarray(v)[0] for g, v in chunk.joints.items()},
                                {g: float(np.asarray(v)[0]) for g, v in chunk.grippers.items()})
            self.actions.append(first.state(self._space))
        elif command is None:  # nothing commanded yet: the driver holds where the arm is
            self.actions.append(state.copy())
        else:  # the command's targets in the state's layout, flattened as an observation is
            from r2s2r.policy import Observation
            self.actions.append(Observation(command.stamp, command.joints, command.grippers).state(self._space))
        if self.object_names:
            self.objects.append(np.concatenate([np.concatenate(observation.objects[name])
                                                for name in self.object_names]))
        for camera, image in self._pending.items():
            self.images[camera].append(image)
        self._pending = self._render()

    def end(self, twin, outcome) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    def recorded(self) -> dict[str, Any]:
        frames = {"observation.state": np.array(self.states, np.float32),
                  "action": np.array(self.actions, np.float32)}
        if self.object_names:
            frames["observation.environment_state"] = np.array(self.objects, np.float32)
        for camera, images in self.images.items():
            frames[f"observation.images.{camera}"] = np.array(images, np.uint8).reshape(
                len(images), self.image_size[1], self.image_size[0], 3)
        return frames


def expert_labeller(task, defaults):
    """The task's expert in its state-feedback form (skills.experts.FEEDBACK), reset."""
    from r2s2r.policy import load_policy
    from r2s2r.policy.loader import PolicyConfig
    from r2s2r.skills.experts import FEEDBACK
    if task.name not in FEEDBACK:
        raise DatasetError(f"task {task.name}: its expert has no state-feedback form to relabel with; expected one "
                           f"of {', '.join(FEEDBACK)}")
    labeller = load_policy(PolicyConfig(uri=task.expert, params={"feedback": True}), defaults)
    labeller.reset()
    return labeller


def privileged_objects(task) -> list[str]:
    """The bodies observation.environment_state holds, in order: the task's own objects and
    fixtures (a perturbation's distractors come and go, so they are left out)."""
    return [o.name for o in task.base_scene.objects] + list(task.fixture_bodies)


def recorder_for(options: CollectOptions, task, cameras: Sequence[str]):
    """A picklable factory of the collection's recorders (TrialPool.run_recorded)."""
    from functools import partial
    objects = privileged_objects(task) if options.privileged else ()
    return partial(DemonstrationRecorder, tuple(cameras), options.image_size, tuple(objects), options.relabel)


# -- planning ------------------------------------------------------------------------------------------
def plan(options: CollectOptions, task, count: int) -> list[Planned]:
    """The first `count` trials of the collection: trial i's perturbation from the conditions
    (cycled) or drawn from (seed, i) within the envelope, its seed from (seed, i)."""
    from r2s2r.eval.runner import plan_eval
    if options.conditions is None:
        return plan_eval(options.policy, task, count, options.seed, envelope=options.envelope)
    return [Planned(i, TrialSpec.of(options.policy, task.name, dict(options.conditions[i % len(options.conditions)]),
                                    trial_seed(options.seed, i)), "conditions") for i in range(count)]


def read_conditions(path: str | Path, task) -> tuple[tuple[tuple[str, float], ...], ...]:
    """A YAML or JSON list of perturbations (factor -> value), each checked against the task's space."""
    import yaml
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DatasetError(f"{path}: cannot read the conditions ({exc})") from None
    if isinstance(data, dict) and "conditions" in data:
        data = data["conditions"]
    if not isinstance(data, list) or not data or not all(isinstance(c, dict) for c in data):
        raise DatasetError(f"{path}: expected a non-empty list of perturbations (factor: value mappings), "
                           f"got {type(data).__name__}")
    out = []
    for i, condition in enumerate(data):
        point = []
        for name, value in condition.items():
            try:
                factor = task.perturbations.factor(str(name))
            except Exception as exc:
                raise DatasetError(f"{path}: condition {i}: {exc}") from None
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise DatasetError(f"{path}: condition {i}: {name} is {value!r}; expected a number") from None
            low, high = factor.low, factor.high
            if not (np.isfinite(value) and low <= value <= high):
                raise DatasetError(f"{path}: condition {i}: {name} = {value}; expected within [{low}, {high}]")
            point.append((str(name), value))
        out.append(tuple(sorted(point)))
    return tuple(out)


# -- staging -------------------------------------------------------------------------------------------
def same_options(staging: Path, options, what: str) -> None:
    """Record `options` in staging/options.json, or check that those recorded there are the same:
    a run resumes only what the same options began (others are refused by name)."""
    marker = staging / "options.json"
    current = json.loads(json.dumps(asdict(options)))
    if marker.is_file():
        stored = json.loads(marker.read_text())
        differ = sorted(k for k in set(stored) | set(current) if stored.get(k) != current.get(k))
        if differ:
            raise DatasetError(f"{staging.parent} holds {what} with other options "
                               f"({', '.join(f'{k}: {stored.get(k)!r}' for k in differ)}); expected the same "
                               f"options to resume it, or another --out")
    else:
        staging.mkdir(parents=True, exist_ok=True)
        _write_whole(marker, json.dumps(current, indent=2).encode())


class Staging:
    """OUT/.collect: the options, and each finished trial (its result, and its frames when kept)."""

    def __init__(self, out: Path, options: CollectOptions):
        self.root = out / STAGING
        self.episodes = self.root / "episodes"
        self.options = options

    def open(self) -> None:
        """Start, or resume a collection with the same options (others are refused by name)."""
        self.episodes.mkdir(parents=True, exist_ok=True)
        same_options(self.root, self.options, "an unfinished collection")

    def stored(self) -> dict[int, TrialResult]:
        found = {}
        for path in self.episodes.glob("*.npz"):
            with np.load(path, allow_pickle=False) as data:
                found[int(path.stem)] = TrialResult(**json.loads(str(data["result"])))
        return found

    def add(self, index: int, result: TrialResult, recorded: dict | None) -> None:
        arrays = {"result": np.array(json.dumps(asdict(result)))}
        if recorded is not None:
            arrays.update({f"frame:{k}": v for k, v in recorded.items()})
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        _write_whole(self.episodes / f"{index:06d}.npz", buffer.getvalue())

    def frames(self, index: int) -> dict[str, np.ndarray]:
        with np.load(self.episodes / f"{index:06d}.npz", allow_pickle=False) as data:
            return {k.removeprefix("frame:"): data[k] for k in data.files if k.startswith("frame:")}

    def remove(self) -> None:
        shutil.rmtree(self.root)


def _write_whole(path: Path, data: bytes) -> None:
    """The file appears whole or not at all (a kill -9 leaves a .partial, never a torn file)."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)


# -- collecting ----------------------------------------------------------------------------------------
@dataclass
class Collected:
    out: Path
    episodes: int
    trials: int
    successes: int


def task_cameras(task, wanted: Sequence[str] | None) -> list[str]:
    names = [c.name for c in task.base_scene.all_cameras()]
    if wanted is None:
        return names
    unknown = [c for c in wanted if c not in names]
    if unknown:
        raise DatasetError(f"cameras {unknown} are not in task {task.name}'s scene; expected some of "
                           f"{', '.join(names) or 'none'}")
    return list(wanted)


def collect(options: CollectOptions, out: str | Path, pool, progress: bool = True) -> Collected:
    """Run the collection on `pool` (eval.runner.TrialPool) and write the dataset to `out`; one
    collection at a time writes a folder (a second is refused while the first runs)."""
    with sole_writer(out, "r2s2r collect", DatasetError) as folder:
        return _collect(options, folder, pool, progress)


def _collect(options: CollectOptions, out: Path, pool, progress: bool) -> Collected:
    from r2s2r.eval.runner import add_stored, check_policy, progress_bar
    from r2s2r.eval.tasks import load_task
    from r2s2r.robots import get_robot
    if options.keep not in KEEP:
        raise DatasetError(f"keep {options.keep!r}; expected one of {', '.join(KEEP)}")
    if options.episodes < 1:
        raise DatasetError(f"episodes {options.episodes}; expected 1 or more")
    width, height = options.image_size
    if width < 2 or height < 2 or width % 2 or height % 2:
        raise DatasetError(f"image size {width}x{height}; expected an even width and height (yuv420p video)")
    if (out / "meta/info.json").is_file() and not (out / STAGING).exists():
        raise DatasetError(f"{out} holds a finished dataset; expected a new folder (or the folder of an "
                           f"unfinished collection to resume)")
    if out.exists() and not (out / STAGING).exists() and any(out.iterdir()):
        raise DatasetError(f"{out} exists and is not empty; expected a new folder for the dataset")
    task = load_task(options.task)
    fps = task.control_rate_hz
    if abs(fps - round(fps)) > 1e-9:
        raise DatasetError(f"task {task.name} runs its policy at {fps} Hz; a dataset needs a whole fps")
    cameras = task_cameras(task, options.cameras)
    check_policy(options.policy, task)  # a policy that does not fit the task fails here, in one line
    if options.relabel:  # and so does a task whose expert cannot label states
        from r2s2r.policy import PolicyMetadata
        from r2s2r.robots import get_robot
        expert_labeller(task, PolicyMetadata.for_robot(get_robot(task.robot)))
    staging = Staging(out, options)
    staging.open()
    stored = staging.stored()
    recorder = recorder_for(options, task, cameras)
    bar = progress_bar(options.episodes, f"collect {task.name}", progress)
    bar.unit = "episode"

    def kept(results: Mapping[int, TrialResult]) -> list[int]:
        indices = sorted(i for i, r in results.items() if options.keep == "all" or r.success)
        return indices[:options.episodes]

    add_stored(bar, len(kept(stored)))
    count = options.episodes
    try:
        while len(kept(stored)) < options.episodes:
            if options.keep == "success":
                successes = sum(r.success for r in stored.values())
                missing = options.episodes - successes
                # The success rate so far, with one success and one failure assumed beforehand (a
                # first failure alone must not plan twenty trials per episode).
                rate = (successes + 1) / (len(stored) + 2) if stored else 1.0
                count = max(count, len(stored) + int(np.ceil(missing / rate)))
                if count > options.episodes * MAX_ATTEMPTS_PER_EPISODE:
                    count = options.episodes * MAX_ATTEMPTS_PER_EPISODE
                    if len(stored) >= count:
                        raise DatasetError(f"{successes} of {len(stored)} trials of {options.policy} on "
                                           f"{task.name} succeeded; {options.episodes} successful episodes need a "
                                           f"policy that succeeds more often (or --keep all)")
            pending = [p for p in plan(options, task, count) if p.index not in stored]
            by_id = {p.spec.id: p.index for p in pending}
            for result, recorded in pool.run_recorded([p.spec for p in pending], recorder):
                index = by_id[result.id]
                keep = options.keep == "all" or result.success
                staging.add(index, result, recorded if keep else None)
                stored[index] = result
                if keep and index in kept(stored):
                    bar.update(1)
                bar.set_postfix_str(f"{sum(r.success for r in stored.values())} of {len(stored)} succeeded",
                                    refresh=False)
    finally:
        bar.close()
    indices = kept(stored)
    robot = get_robot(task.robot)
    write(out, staging, options, task, robot, cameras, indices, stored)
    return Collected(out, len(indices), len(stored), sum(r.success for r in stored.values()))


def write(out: Path, staging: Staging, options: CollectOptions, task, robot, cameras: Sequence[str],
          indices: Sequence[int], results: Mapping[int, TrialResult]) -> None:
    """The dataset from the staged episodes, written beside them and then moved into `out`
    (meta/ last: its info.json marks the dataset finished), and the staging removed."""
    names = state_names(robot)
    features = {"observation.state": Feature("float32", (len(names),), names),
                "action": Feature("float32", (len(names),), names)}
    if options.privileged:
        fields = [f"{o}.{f}" for o in privileged_objects(task) for f in POSE_FIELDS]
        features["observation.environment_state"] = Feature("float32", (len(fields),), fields)
    width, height = options.image_size
    for camera in cameras:
        features[f"observation.images.{camera}"] = Feature("video", (height, width, 3))
    building = staging.root / "dataset"
    if building.exists():  # a finalisation that was killed: begin it again
        shutil.rmtree(building)
    for name in ("data", "videos", "meta"):
        if (out / name).exists():
            shutil.rmtree(out / name)
    writer = DatasetWriter(building, int(round(task.control_rate_hz)), features, robot.name)
    text = task.description or task.name
    for index in indices:
        frames = staging.frames(index)
        r = results[index]
        writer.add(Episode(text, frames, {
            "r2s2r/trial_id": r.id, "r2s2r/trial_index": index, "r2s2r/seed": r.seed,
            "r2s2r/perturbation": json.dumps(r.perturbation, sort_keys=True), "r2s2r/success": r.success,
            "r2s2r/margin": r.margin, "r2s2r/stage": r.stage, "r2s2r/policy": r.policy,
            "r2s2r/actions": f"{task.expert} (state feedback)" if options.relabel else "commanded"}))
    writer.close()
    meta = {"task": task.name, "policy": options.policy, "seed": options.seed, "keep": options.keep,
            "actions": f"relabelled by {task.expert} (state feedback)" if options.relabel else "commanded",
            "envelope": options.envelope, "trials": len(results),
            "successes": sum(r.success for r in results.values()),
            "privileged": ["observation.environment_state"] if options.privileged else [],
            "cameras": list(cameras), "image_size": list(options.image_size)}
    (building / META_PATH).write_text(json.dumps(meta, indent=2))
    for name in ("data", "videos", "meta"):
        if (building / name).exists():
            os.replace(building / name, out / name)
    staging.remove()
    open_dataset(out)  # what was written reads back whole


__all__ = ["CollectOptions", "DemonstrationRecorder", "collect", "plan", "read_conditions", "state_names",
           "Collected", "task_cameras"]
