"""`r2s2r train`: a compact policy (train.models) from a LeRobot v3.0 dataset, on the CPU.

A run folder holds config.json, checkpoints/step_NNNNNN/ every `checkpoint_every` steps (each a
`torch:` checkpoint, model.pt, with a policy.yaml beside it, so the folder itself is a policy
source: `r2s2r eval --policy RUN/checkpoints/step_002000`, and training.pt, what resuming
needs), and the loss curves as losses.json and losses.png.

Determinism: each step's batch and dropout come from (seed, step) alone, so a run is the same
for a seed on the same thread count, and a run resumed from a checkpoint continues exactly as
an uninterrupted one would (the optimiser's state is in training.pt). Validation episodes (a
share of the episodes, chosen by the seed) are never trained on.

Normalisation comes from the dataset's statistics (mean and std of state, action and each
camera's channels) and travels in the checkpoint; images are resized once, when the dataset
is loaded, to the size the policy is trained at.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from r2s2r.data.lerobot_v3 import DatasetError, open_dataset

POLICIES = ("mlp", "act")
ENVIRONMENT = "observation.environment_state"
CHECKPOINTS = "checkpoints"
STILLS_STAGE = "stills.pt"  # the model after its steps on stills alone: a resumed run does them once
WARMUP_STEPS = 100
ENSEMBLE_COEFFICIENT = 0.01  # the runtime's temporal ensembling for trained checkpoints, ACT's value


class TrainError(ValueError):
    """A training run cannot start or go on; the message says what is wrong and what was expected."""


@dataclass(frozen=True)
class TrainConfig:
    dataset: str
    policy: str = "mlp"
    steps: int = 2000
    batch: int = 64
    seed: int = 0
    chunk_length: int = 10
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    checkpoint_every: int = 500
    validation_share: float = 0.1
    image_size: tuple[int, int] = (64, 48)  # width, height the image policy is trained at
    cameras: tuple[str, ...] | None = None  # None: every camera of the dataset
    # Also observe observation.environment_state (the objects' poses: privileged, the twin's only).
    privileged: bool = False
    # Gaussian noise (std, in normalised units) on the state of each training batch: the policy
    # learns to act from states a little off the demonstrations, where its own errors take it.
    state_noise: float = 0.0
    # The image policy's images shifted by up to this many pixels in each batch (edges repeated):
    # where the block lies in the picture matters, not which pixel the camera put it on.
    image_shift: int = 0
    # Weight of an auxiliary loss for the image policy: it also reads the objects' poses
    # (observation.environment_state, the twin's privileged truth) out of what it sees, which
    # teaches the camera network where the objects are. Training only: the checkpoint observes
    # the joints and the images alone.
    object_pose_loss: float = 0.0
    # A dataset of randomised stills of the task (`r2s2r dataset stills`): the image policy's
    # camera networks first learn the objects' poses from them alone for `still_steps` steps,
    # then from a batch of stills beside each batch of demonstrations. Two hundred
    # demonstrations show two hundred scenes; the stills show thousands more.
    stills: str | None = None
    still_steps: int = 0
    # One: these models train no faster on two idle cores, and torch's spinning OpenMP threads run
    # 15x slower when another process holds a core. Results are deterministic for a thread count.
    threads: int = 1
    model: dict = field(default_factory=dict)  # the model's own keyword arguments (width, layers)
    # A checkpoint folder (RUN/checkpoints/step_N) whose model starts this run: fine-tuning. Its
    # architecture, action range and normalisation are kept, so what it learnt keeps its meaning.
    init: str | None = None

    def check(self) -> None:
        if self.policy not in POLICIES:
            raise TrainError(f"policy {self.policy!r}; expected one of {', '.join(POLICIES)}")
        for name in ("steps", "batch", "chunk_length", "checkpoint_every", "threads"):
            if int(getattr(self, name)) < 1:
                raise TrainError(f"{name} is {getattr(self, name)}; expected 1 or more")
        if not 0.0 <= self.validation_share < 1.0:
            raise TrainError(f"validation_share {self.validation_share}; expected in [0, 1)")
        if not (self.state_noise >= 0 and math.isfinite(self.state_noise)):
            raise TrainError(f"state_noise {self.state_noise}; expected a standard deviation of 0 or more")
        if int(self.image_shift) < 0:
            raise TrainError(f"image_shift {self.image_shift}; expected 0 or more pixels")
        if not (self.object_pose_loss >= 0 and math.isfinite(self.object_pose_loss)):
            raise TrainError(f"object_pose_loss {self.object_pose_loss}; expected a weight of 0 or more")
        if self.policy != "act" and (self.object_pose_loss or self.image_shift or self.model.get("keypoints")):
            raise TrainError(f"object_pose_loss, image_shift and keypoints train the image policy; expected 0 for "
                             f"policy {self.policy!r}")
        if int(self.still_steps) < 0:
            raise TrainError(f"still_steps {self.still_steps}; expected 0 or more")
        if self.stills and not (self.policy == "act" and self.object_pose_loss > 0 and not self.privileged):
            raise TrainError("stills teach the image policy's object-pose reading; expected policy act with "
                             "object_pose_loss above 0 and without privileged")
        if self.still_steps and not self.stills:
            raise TrainError(f"still_steps {self.still_steps} without stills; expected a stills dataset")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise TrainError(f"learning_rate {self.learning_rate}; expected a positive number")
        if self.init is not None and not (Path(self.init) / "model.pt").is_file():
            raise TrainError(f"init {self.init}: no model.pt; expected a checkpoint folder of r2s2r train "
                             "(RUN/checkpoints/step_NNNNNN)")


# -- the data ------------------------------------------------------------------------------------------
class TrainingData:
    """Every frame of an opened dataset (lerobot_v3.Dataset) in memory: states, actions, images (uint8, at the training size)
    and, per frame, where its episode ends (an action chunk stops there, padded and masked).
    With `privileged` the objects' poses follow the joints in the state; with `environment`
    they are kept apart (`environment`), as the target of an auxiliary loss."""

    def __init__(self, dataset, cameras: tuple[str, ...], image_size: tuple[int, int], privileged: bool = False,
                 environment: bool = False):
        import cv2
        self.dataset = dataset
        root = dataset.root
        needed = ("observation.state", "action") + ((ENVIRONMENT,) if privileged or environment else ())
        for key in needed:
            if key not in dataset.features:
                raise TrainError(f"{root}: the dataset has no {key}; expected r2s2r's layout (docs/datasets.md)"
                                 + (" collected with --privileged" if key == ENVIRONMENT else ""))
        self.privileged = privileged
        self.cameras = cameras
        states, actions, ends, episode_of, images = [], [], [], [], {c: [] for c in cameras}
        objects = []
        start = 0
        for index in range(len(dataset.episodes)):
            episode = dataset.episode(index, videos=bool(cameras))
            n = len(episode.frames["action"])
            state = episode.frames["observation.state"]
            if privileged:  # the objects' poses follow the joints, as ObservationSpace.environment puts them
                state = np.concatenate([state, episode.frames[ENVIRONMENT]], axis=1)
            if environment:
                objects.append(episode.frames[ENVIRONMENT])
            states.append(state)
            actions.append(episode.frames["action"])
            ends.append(np.full(n, start + n))
            episode_of.append(np.full(n, index))
            for camera in cameras:
                frames = episode.frames[f"observation.images.{camera}"]
                if (frames.shape[2], frames.shape[1]) != tuple(image_size):
                    frames = np.stack([cv2.resize(f, tuple(image_size), interpolation=cv2.INTER_AREA)
                                       for f in frames])
                images[camera].append(frames.transpose(0, 3, 1, 2))
            start += n
        self.states = np.concatenate(states).astype(np.float32)
        self.actions = np.concatenate(actions).astype(np.float32)
        self.ends = np.concatenate(ends)
        self.episode_of = np.concatenate(episode_of)
        self.images = {c: np.concatenate(v) for c, v in images.items()}
        self.environment = np.concatenate(objects).astype(np.float32) if environment else None

    def split(self, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Frame indices for training and for validation (whole episodes, chosen by the seed)."""
        episodes = len(self.dataset.episodes)
        held = int(round(share * episodes))
        if share > 0 and episodes > 1:
            held = max(1, held)
        held = min(held, episodes - 1)
        order = np.random.default_rng(seed).permutation(episodes)
        validation = np.isin(self.episode_of, order[:held])
        return np.nonzero(~validation)[0], np.nonzero(validation)[0]


def environment_objects(dataset) -> tuple[str, ...]:
    """The objects of observation.environment_state, in order (its names are OBJECT.FIELD)."""
    names = dataset.features[ENVIRONMENT].names or []
    return tuple(dict.fromkeys(n.rsplit(".", 1)[0] for n in names))


def normalizer_for(dataset, cameras, privileged: bool = False) -> "object":
    from r2s2r.policy.normalize import FeatureStats, Normalizer
    features = {}
    for name, keys in (("state", ("observation.state",) + ((ENVIRONMENT,) if privileged else ())),
                       ("action", ("action",))):
        missing = [k for k in keys if not dataset.stats.get(k)]
        if missing:
            raise TrainError(f"{dataset.root}: meta/stats.json has no statistics of {', '.join(missing)}")
        mean = np.concatenate([np.array(dataset.stats[k]["mean"], float) for k in keys])
        std = np.concatenate([np.array(dataset.stats[k]["std"], float) for k in keys])
        features[name] = FeatureStats("mean_std", {"mean": mean, "std": std})
    for camera in cameras:
        stats = dataset.stats[f"observation.images.{camera}"]
        features[f"image.{camera}"] = FeatureStats("mean_std", {"mean": np.array(stats["mean"]),
                                                                 "std": np.array(stats["std"])})
    return Normalizer(features)


# -- the run -------------------------------------------------------------------------------------------
def _learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warm-up (WARMUP_STEPS, or a tenth of a shorter run), then cosine decay to a tenth."""
    warmup = min(WARMUP_STEPS, max(1, config.steps // 10))
    if step < warmup:
        return config.learning_rate * (step + 1) / warmup
    progress = (step - warmup) / max(1, config.steps - warmup)
    return config.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _step_seed(seed: int, step: int) -> int:
    return int(np.random.SeedSequence([int(seed), int(step)]).generate_state(1, np.uint32)[0])


def checkpoint_dir(run: Path, step: int) -> Path:
    return run / CHECKPOINTS / f"step_{step:06d}"


def latest_checkpoint(run: Path) -> Path | None:
    done = sorted(p for p in (run / CHECKPOINTS).glob("step_*") if (p / "training.pt").is_file())
    return done[-1] if done else None


class Trainer:
    def __init__(self, config: TrainConfig, run: str | Path):
        config.check()
        self.config, self.run = config, Path(run)
        stored = self.run / "config.json"
        current = json.loads(json.dumps(asdict(config)))
        if stored.is_file():
            before = json.loads(stored.read_text())
            differ = sorted(k for k in set(before) | set(current) if before.get(k) != current.get(k) and k != "steps")
            if differ:
                raise TrainError(f"{self.run} holds a run with other settings "
                                 f"({', '.join(f'{k}: {before.get(k)!r}' for k in differ)}); expected the same "
                                 f"settings to resume it (only --steps may change), or another --out")
        elif self.run.exists() and any(self.run.iterdir()):
            raise TrainError(f"{self.run} exists and is not a training run; expected a new folder")

    def train(self, progress: bool = True) -> Path:
        """Train (or resume) to config.steps; the last checkpoint's folder. One process at a time
        trains a run folder (a second is refused while the first runs)."""
        from r2s2r.processes import sole_writer
        with sole_writer(self.run, "r2s2r train", TrainError):
            return self._train(progress)

    def _train(self, progress: bool) -> Path:
        import torch
        from r2s2r.policy.formats import save_checkpoint
        config = self.config
        torch.set_num_threads(config.threads)
        torch.use_deterministic_algorithms(True)
        try:
            dataset = open_dataset(config.dataset)  # checked once: every file, every video's length
            cameras = self._cameras(dataset) if config.policy == "act" else ()
            data = TrainingData(dataset, cameras, config.image_size, config.privileged,
                                environment=config.object_pose_loss > 0)
            stills = self._stills(dataset, cameras) if config.stills else None
        except DatasetError as exc:
            raise TrainError(str(exc)) from None
        train_frames, validation_frames = data.split(config.validation_share, config.seed)
        metadata = self._metadata(data.dataset, cameras)
        if config.init is None:
            normalizer = normalizer_for(data.dataset, cameras, config.privileged)
            kwargs = self._model_kwargs(data, cameras, normalizer)
            model = self._model(kwargs)
        else:
            model, normalizer, kwargs = self._initial(data, metadata)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate,
                                      weight_decay=config.weight_decay)
        history = {"train": [], "validation": [], "wall_s": 0.0}
        step = 0
        latest = latest_checkpoint(self.run)
        if latest is not None:
            state = torch.load(latest / "training.pt", map_location="cpu", weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            history = json.loads(state["history"])
            step = int(state["step"])
        self.run.mkdir(parents=True, exist_ok=True)
        (self.run / "config.json").write_text(json.dumps(asdict(config), indent=2))
        poses = pose_scale(data.dataset) if data.environment is not None else None
        inputs = _Inputs(data, normalizer, cameras, config.image_shift, poses)
        # The stills' poses in the demonstrations' units: the policy's pose token reads them so.
        still_inputs = None if stills is None else _Inputs(stills, normalizer, cameras, config.image_shift, poses)
        if still_inputs is not None and latest is None:
            history["stills"] = self._learn_from_stills(model, still_inputs, progress)
            history["wall_s"] = history["stills"]["wall_s"]
        spent = history.get("wall_s", 0.0)  # the training time before this session's policy steps
        bar = _bar(config.steps, step, progress)
        clock, last = time.perf_counter(), latest
        try:
            while step < config.steps:
                generator = torch.Generator().manual_seed(_step_seed(config.seed, step))
                torch.manual_seed(_step_seed(config.seed + 1, step))  # dropout's draws
                frames = train_frames[torch.randint(len(train_frames), (config.batch,), generator=generator).numpy()]
                noise = None if config.state_noise == 0 else \
                    config.state_noise * torch.randn((config.batch, inputs.states.shape[1]), generator=generator)
                for group in optimizer.param_groups:
                    group["lr"] = _learning_rate(config, step)
                model.train()
                loss, pose_loss = inputs.loss(model, frames, config.chunk_length, noise, generator)
                still_loss = None
                if still_inputs is not None:
                    stills_batch = torch.randint(len(still_inputs.states), (config.batch,), generator=generator)
                    still_loss = still_inputs.pose_loss(model, stills_batch.numpy(), generator)
                    history.setdefault("stills_pose", []).append([step + 1, float(still_loss.detach())])
                total = loss if pose_loss is None else loss + config.object_pose_loss * pose_loss
                if still_loss is not None:
                    total = total + config.object_pose_loss * still_loss
                optimizer.zero_grad(set_to_none=True)
                total.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
                optimizer.step()
                step += 1
                history["train"].append([step, float(loss.detach())])
                if pose_loss is not None:
                    history.setdefault("object_pose", []).append([step, float(pose_loss.detach())])
                bar.update(1)
                if step % config.checkpoint_every == 0 or step == config.steps:
                    history["wall_s"] = spent + time.perf_counter() - clock
                    validation, pose_validation = inputs.validation_loss(model, validation_frames,
                                                                         config.chunk_length)
                    if validation is not None:
                        history["validation"].append([step, validation])
                    if pose_validation is not None:
                        history.setdefault("validation_object_pose", []).append([step, pose_validation])
                    last = self._save(step, model, optimizer, history, metadata, normalizer, kwargs, save_checkpoint)
                    shown = "-" if validation is None else f"{validation:.4f}"
                    bar.set_postfix_str(f"loss {float(loss.detach()):.4f}, validation {shown}", refresh=False)
        finally:
            bar.close()
        self._curves(history)
        return last

    def _stills(self, dataset, cameras) -> "TrainingData":
        """The stills' frames, checked to fit the demonstrations: same robot, state and objects."""
        stills = open_dataset(self.config.stills)
        where = f"stills {self.config.stills}"
        if stills.robot_type != dataset.robot_type:
            raise TrainError(f"{where}: of {stills.robot_type}; expected {dataset.robot_type}, the dataset's robot")
        for key in ("observation.state", ENVIRONMENT):
            theirs = stills.features[key].names if key in stills.features else None
            if theirs != dataset.features[key].names:
                raise TrainError(f"{where}: {key} is {theirs}; expected the dataset's {dataset.features[key].names}")
        missing = [c for c in cameras if f"observation.images.{c}" not in stills.video_keys]
        if missing:
            raise TrainError(f"{where}: no images of camera {', '.join(missing)}; expected every camera "
                             f"the policy sees ({', '.join(cameras)})")
        return TrainingData(stills, cameras, self.config.image_size, environment=True)

    def _learn_from_stills(self, model, stills: "_Inputs", progress: bool) -> dict:
        """config.still_steps steps of the pose loss on the stills alone; the model after them is
        kept in RUN/stills.pt, so a run killed later resumes after them. Their losses and time."""
        import torch
        from r2s2r.eval.runner import progress_bar
        config = self.config
        path = self.run / STILLS_STAGE
        if path.is_file():
            state = torch.load(path, map_location="cpu", weights_only=True)
            model.load_state_dict(state["model"])
            return json.loads(state["record"])
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
        schedule = replace(config, steps=max(1, config.still_steps))
        losses, clock = [], time.perf_counter()
        bar = progress_bar(config.still_steps, "stills", progress, unit="step")
        try:
            for step in range(config.still_steps):
                generator = torch.Generator().manual_seed(_step_seed(config.seed + 2, step))
                frames = torch.randint(len(stills.states), (config.batch,), generator=generator).numpy()
                for group in optimizer.param_groups:
                    group["lr"] = _learning_rate(schedule, step)
                model.train()
                loss = stills.pose_loss(model, frames, generator)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
                optimizer.step()
                losses.append([step + 1, float(loss.detach())])
                bar.update(1)
        finally:
            bar.close()
        record = {"train": losses, "wall_s": time.perf_counter() - clock}
        partial = path.with_name(path.name + ".partial")
        torch.save({"model": model.state_dict(), "record": json.dumps(record)}, partial)
        partial.rename(path)
        return record

    def _cameras(self, dataset) -> tuple[str, ...]:
        available = [k.removeprefix("observation.images.") for k in dataset.video_keys]
        cameras = tuple(self.config.cameras) if self.config.cameras is not None else tuple(available)
        unknown = [c for c in cameras if c not in available]
        if unknown or not cameras:
            raise TrainError(f"{dataset.root}: cameras {list(cameras)}; the image policy needs some of the "
                             f"dataset's: {', '.join(available) or 'none (collect with --cameras)'}")
        return cameras

    def _metadata(self, dataset, cameras):
        from r2s2r.policy.types import ActionSpace, ObservationSpace, PolicyMetadata
        from r2s2r.robots import get_robot
        robot = get_robot(dataset.robot_type)
        joints = {g.name: len(g.joints) for g in robot.groups}
        grippers = tuple(g.name for g in robot.grippers)
        width, height = self.config.image_size
        environment = environment_objects(dataset) if self.config.privileged else ()
        return PolicyMetadata(ObservationSpace(joints, grippers, {c: (height, width) for c in cameras}, False,
                                               environment),
                              ActionSpace(joints, grippers), float(dataset.fps), self.config.chunk_length, robot.name)

    def _model_kwargs(self, data: TrainingData, cameras, normalizer) -> dict:
        # The trained actions' range, normalised, a hair inside so float32 rounding stays within it.
        scale = normalizer.features["action"]
        low, high = scale.apply(data.actions.min(axis=0).astype(np.float64)), \
            scale.apply(data.actions.max(axis=0).astype(np.float64))
        margin = 1e-4 * np.maximum(high - low, 1e-6)
        sizes = {"state_size": data.states.shape[1], "action_size": data.actions.shape[1],
                 "chunk_length": self.config.chunk_length,
                 "action_low": (low + margin).astype(float).tolist(), "action_high": (high - margin).astype(float).tolist()}
        if self.config.policy == "act":
            width, height = self.config.image_size
            sizes.update(cameras=len(cameras), image_height=height, image_width=width)
            if data.environment is not None:
                sizes.update(auxiliary_size=data.environment.shape[1])
        return {**sizes, **self.config.model}

    def _model(self, kwargs: dict):
        import torch
        from r2s2r.train.models import ActPolicy, StateMLP
        torch.manual_seed(self.config.seed)
        try:
            return (StateMLP if self.config.policy == "mlp" else ActPolicy)(**kwargs)
        except TypeError as exc:
            raise TrainError(f"model settings {self.config.model}: {exc}") from None

    def _initial(self, data: TrainingData, metadata):
        """The model, normalisation and model settings of the `init` checkpoint, checked to fit this run."""
        import torch
        from r2s2r.policy.normalize import Normalizer
        init = Path(self.config.init) / "model.pt"
        stored = torch.load(init, map_location="cpu", weights_only=True)
        kwargs = dict(stored["model"]["kwargs"])
        expected = {"state_size": data.states.shape[1], "action_size": data.actions.shape[1],
                    "chunk_length": self.config.chunk_length}
        differ = {k: (kwargs.get(k), v) for k, v in expected.items() if kwargs.get(k) != v}
        same_io = json.dumps(stored["policy"], sort_keys=True) == json.dumps(metadata.to_dict(), sort_keys=True)
        if not same_io or differ:
            raise TrainError(f"init {init.parent}: its policy does not fit this run "
                             f"({', '.join(f'{k} {a} here {b}' for k, (a, b) in differ.items()) or 'observations or actions differ'}); "
                             "expected a checkpoint trained with the same settings on data of the same features")
        model = self._model(kwargs)
        model.load_state_dict(stored["state_dict"])
        return model, Normalizer.from_dict(stored["normalization"], str(init)), kwargs

    def _save(self, step, model, optimizer, history, metadata, normalizer, kwargs, save_checkpoint) -> Path:
        import torch
        folder = checkpoint_dir(self.run, step)
        partial = folder.with_name(folder.name + ".partial")
        if partial.exists():
            import shutil
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        model.eval()
        save_checkpoint(partial / "model.pt", model, metadata, normalizer, kwargs)
        (partial / "policy.yaml").write_text(
            f"# {self.config.policy} trained by r2s2r train on {self.config.dataset}, step {step}\n"
            "uri: torch:model.pt\n"
            "# Every tick a new chunk, the chunks' overlapping actions averaged (ACT's temporal ensembling).\n"
            f"runtime: {{ensemble_coefficient: {ENSEMBLE_COEFFICIENT}}}\n")
        torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "history": json.dumps(history)}, partial / "training.pt")
        partial.rename(folder)  # whole or not at all: a killed run resumes from the one before
        return folder

    def _curves(self, history: dict) -> None:
        (self.run / "losses.json").write_text(json.dumps(history))
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        figure, axes = plt.subplots(figsize=(6, 3.5))
        train = np.array(history["train"])
        if len(train):
            window = max(1, len(train) // 50)
            smooth = np.convolve(train[:, 1], np.ones(window) / window, mode="valid")
            axes.plot(train[window - 1:, 0], smooth, label="training (running mean)")
        validation = np.array(history["validation"])
        if len(validation):
            axes.plot(validation[:, 0], validation[:, 1], "o-", label="validation")
        axes.set_xlabel("step")
        axes.set_ylabel("L1 loss, normalised actions")
        axes.set_yscale("log")
        axes.legend()
        figure.tight_layout()
        figure.savefig(self.run / "losses.png", dpi=100)
        plt.close(figure)


def pose_scale(dataset):
    """The normalisation of the objects' poses for the auxiliary loss: the dataset's mean and
    std, the std at least 1e-3 (a fixture that never turns has none)."""
    from r2s2r.policy.normalize import FeatureStats
    stats = dataset.stats[ENVIRONMENT]
    return FeatureStats("mean_std", {"mean": np.array(stats["mean"], np.float32),
                                     "std": np.maximum(np.array(stats["std"], np.float32), 1e-3)}, eps=0.0)


class _Inputs:
    """Batches in the tensor-model contract: normalised state, normalised images, chunks and masks;
    with the objects' poses (TrainingData.environment), those too, normalised by `poses`
    (pose_scale), for the auxiliary loss."""

    def __init__(self, data: TrainingData, normalizer, cameras, image_shift: int = 0, poses=None):
        import torch
        self.data, self.cameras, self.image_shift = data, cameras, int(image_shift)
        self.states = torch.from_numpy(normalizer.normalize("state", data.states))
        self.actions = normalizer.normalize("action", data.actions)
        self.image_mean = {c: torch.tensor(normalizer.features[f"image.{c}"].stats["mean"], dtype=torch.float32)
                           for c in cameras}
        self.image_scale = {c: torch.tensor(normalizer.features[f"image.{c}"].stats["std"]
                                            + normalizer.features[f"image.{c}"].eps, dtype=torch.float32)
                            for c in cameras}
        self.objects = None
        if data.environment is not None:
            self.objects = torch.from_numpy(poses.apply(data.environment).astype(np.float32))

    def _images(self, frames: np.ndarray, generator=None) -> list:
        import torch
        images = []
        for c in self.cameras:
            batch = torch.from_numpy(self.data.images[c][frames]).float() / 255.0
            if generator is not None and self.image_shift:
                batch = _shifted(batch, self.image_shift, generator)
            images.append((batch - self.image_mean[c]) / self.image_scale[c])
        return images

    def forward(self, model, frames: np.ndarray, noise=None, generator=None):
        """The chunk and, where the model has an auxiliary head and the poses are known, its poses.
        `generator` (training) draws the images' shifts."""
        images = self._images(frames, generator)
        states = self.states[frames] if noise is None else self.states[frames] + noise
        if self.objects is not None and getattr(model, "auxiliary", None) is not None:
            return model.forward_with_auxiliary(states, *images)
        return model(states, *images), None

    def pose_loss(self, model, frames: np.ndarray, generator=None):
        """The poses' L1 loss of the model's reading alone (ActPolicy.read_poses)."""
        poses = model.read_poses(self.states[frames], *self._images(frames, generator))
        return (poses - self.objects[frames]).abs().mean()

    def loss(self, model, frames: np.ndarray, length: int, noise=None, generator=None):
        """The actions' L1 loss (masked past each episode's end), and the poses' L1 loss or None."""
        import torch
        steps = frames[:, None] + np.arange(length)[None, :]
        ends = self.data.ends[frames][:, None]
        mask = torch.from_numpy(steps < ends)
        target = torch.from_numpy(self.actions[np.minimum(steps, ends - 1)])
        chunk, poses = self.forward(model, frames, noise, generator)
        error = (chunk - target).abs().mean(dim=2)
        pose_loss = None if poses is None else (poses - self.objects[frames]).abs().mean()
        return (error * mask).sum() / mask.sum(), pose_loss

    def validation_loss(self, model, frames: np.ndarray, length: int, batch: int = 256):
        """Mean action loss and pose loss (None where there is none) over the validation frames."""
        import torch
        if len(frames) == 0:
            return None, None
        model.eval()
        total, poses, count = 0.0, 0.0, 0
        with torch.no_grad():
            for first in range(0, len(frames), batch):
                part = frames[first:first + batch]
                loss, pose_loss = self.loss(model, part, length)
                total += float(loss) * len(part)
                poses = None if pose_loss is None else poses + float(pose_loss) * len(part)
                count += len(part)
        return total / count, None if poses is None else poses / count


def _shifted(images, shift: int, generator):
    """Each image moved by up to `shift` pixels each way, its edges repeated (DrQ's random shift)."""
    import torch
    import torch.nn.functional as functional
    height, width = images.shape[2:]
    padded = functional.pad(images, (shift,) * 4, mode="replicate")
    offsets = torch.randint(2 * shift + 1, (images.shape[0], 2), generator=generator).tolist()
    return torch.stack([padded[i, :, y:y + height, x:x + width] for i, (y, x) in enumerate(offsets)])


def _bar(total: int, done: int, enabled: bool):
    from r2s2r.eval.runner import add_stored, progress_bar
    bar = progress_bar(total, "train", enabled)
    bar.unit = "step"
    add_stored(bar, done)
    return bar


__all__ = ["TrainConfig", "Trainer", "TrainError", "TrainingData", "latest_checkpoint", "checkpoint_dir", "POLICIES"]
