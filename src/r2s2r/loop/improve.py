"""`r2s2r improve`: a trained policy's failures in the twin become its next training data.

    improve = run_improve(ImproveConfig(task="franka_block_in_bowl", policy="runs/mlp", rounds=3,
                                        search_budget=200, demos_per_round=50, envelope="operating",
                                        control="uniform"), "improve_out", workers=2)
    improve.report       # improve_out/report.html

Each round of the targeted arm:

1. **search**: a failure search of the current checkpoint within the envelope (search.campaign)
   and its atlas;
2. **conditions**: initial conditions drawn inside the atlas's clusters (in proportion to their
   sizes) and across the bisected boundaries between failure and success (the near-misses);
3. **demonstrations**: the task's expert at those conditions (`r2s2r collect`, successes kept)
   and, with `relabelled_per_round`, rollouts of the current checkpoint at the same
   conditions whose every action is relabelled with the expert's (`r2s2r collect --relabel`);
4. **dataset**: every episode so far in one LeRobot dataset, each labelled with its round and
   origin (`r2s2r/round`, `r2s2r/origin` in meta/episodes);
5. **training**: the starting run's settings on that dataset, from scratch or fine-tuned from the
   current checkpoint (`retrain`);
6. **evaluation**: the new checkpoint on the held-out trials.

The control arm (`control="uniform"`) spends exactly as many demonstrations (and relabelled
rollouts) per round, drawn
uniformly from the envelope, from the same starting checkpoint with the same training settings.
Both arms are evaluated on the same held-out trials: `held_out` draws over the envelope from a
seed stream reserved at the start, which no search, collection or condition ever draws from.

Every step keeps what it did (trials in OUT/trials.sqlite, collections staged, datasets and
checkpoints written whole), so a killed run resumes where it stood and the same configuration
gives the same results. OUT/progress.jsonl logs each step as it starts; OUT/summary.json and
OUT/report.html hold the outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from r2s2r.data.collect import META_PATH, CollectOptions, collect, same_options
from r2s2r.data.lerobot_v3 import DatasetError, merge, open_dataset
from r2s2r.eval.runner import TrialPool, TrialResult, plan_eval, run_trials, trial_seed
from r2s2r.eval.stats import mcnemar_exact, wilson
from r2s2r.eval.store import TrialStore
from r2s2r.eval.tasks import load_task
from r2s2r.processes import sole_writer
from r2s2r.search.atlas import Atlas, build_atlas
from r2s2r.search.campaign import SearchOutcome, SearchSpace, run_search
from r2s2r.train.trainer import TrainConfig, Trainer, latest_checkpoint

ARMS = ("targeted", "uniform")
CONTROLS = ("uniform",)
RETRAIN = ("scratch", "finetune")
CONDITIONS_PER_DEMO = 3  # conditions drawn per demonstration wanted: the expert fails at some
STATE = "state"  # OUT/state/options.json: the configuration a resumed run must match
# The seed streams of one improvement run: held-out trials, and per arm and round the search,
# the conditions and the demonstrations; each a campaign seed of its own (stream, seed, ...).
HELD_OUT, SEARCH, CONDITIONS, DATA, RELABELLED = 1, 2, 3, 4, 5


class ImproveError(ValueError):
    """An improvement run cannot start or go on; the message says what is wrong and what was expected."""


@dataclass(frozen=True)
class ImproveConfig:
    """What an improvement run is: the same configuration gives the same rounds."""

    task: str
    policy: str  # the starting checkpoint (RUN/checkpoints/step_N) or training run (its last checkpoint)
    rounds: int
    search_budget: int
    demos_per_round: int
    envelope: str | None = None
    control: str | None = None  # "uniform": the control arm
    held_out: int = 500
    seed: int = 0
    sampler: str = "cem"
    retrain: str = "scratch"
    train_steps: int | None = None  # None: the starting run's
    boundary_share: float = 0.5  # of each round's conditions drawn across the failure boundaries
    relabelled_per_round: int = 0  # rollouts of the current checkpoint relabelled by the expert (DAgger)
    # Of the targeted arm's conditions, the share drawn at the failures; the rest uniformly, so
    # that the data still covers the envelope where the policy succeeds.
    targeted_share: float = 1.0

    def check(self) -> None:
        for name in ("rounds", "search_budget", "demos_per_round", "held_out"):
            if int(getattr(self, name)) < 1:
                raise ImproveError(f"{name} is {getattr(self, name)}; expected 1 or more")
        if self.control not in (None, *CONTROLS):
            raise ImproveError(f"control {self.control!r}; expected one of {', '.join(CONTROLS)} (or none)")
        if self.retrain not in RETRAIN:
            raise ImproveError(f"retrain {self.retrain!r}; expected one of {', '.join(RETRAIN)}")
        if self.train_steps is not None and self.train_steps < 1:
            raise ImproveError(f"train_steps is {self.train_steps}; expected 1 or more")
        if self.relabelled_per_round < 0:
            raise ImproveError(f"relabelled_per_round is {self.relabelled_per_round}; expected 0 or more")
        if not 0.0 < self.targeted_share <= 1.0:
            raise ImproveError(f"targeted_share {self.targeted_share}; expected in (0, 1]")
        if not 0.0 <= self.boundary_share <= 1.0:
            raise ImproveError(f"boundary_share {self.boundary_share}; expected in [0, 1]")

    @property
    def arms(self) -> tuple[str, ...]:
        return ARMS if self.control else ARMS[:1]


def stream_seed(seed: int, *stream: int) -> int:
    """The campaign seed of one stream of a run (held-out, or an arm's round's search ...)."""
    return int(np.random.SeedSequence([int(seed), *map(int, stream)]).generate_state(1, np.uint32)[0])


def start_checkpoint(policy: str) -> Path:
    """The checkpoint folder `policy` names: itself, or a training run's last checkpoint."""
    path = Path(policy).resolve()
    if (path / "model.pt").is_file() and (path.parent.parent / "config.json").is_file():
        return path
    latest = latest_checkpoint(path) if (path / "config.json").is_file() else None
    if latest is None:
        raise ImproveError(f"policy {policy}: not a training run of r2s2r train or one of its checkpoints; expected "
                           "RUN (its last checkpoint is taken) or RUN/checkpoints/step_NNNNNN")
    return latest


def training_settings(checkpoint: Path) -> dict:
    """The settings of the run that trained `checkpoint` (its RUN/config.json)."""
    return json.loads((checkpoint.parent.parent / "config.json").read_text())


def collection_settings(dataset: str | Path) -> dict:
    """cameras, image_size and privileged of a dataset r2s2r collect wrote, so that new
    demonstrations have its features."""
    meta = Path(dataset) / META_PATH
    if not meta.is_file():
        raise ImproveError(f"{dataset}: no {META_PATH}; expected the starting policy's dataset to be one that "
                           "r2s2r collect wrote (its cameras, image size and privileged state are taken from it)")
    data = json.loads(meta.read_text())
    return {"cameras": tuple(data.get("cameras") or ()), "image_size": tuple(data.get("image_size") or (128, 96)),
            "privileged": bool(data.get("privileged"))}


# -- targeted conditions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Condition:
    """An initial condition drawn for the data: its unit point in the searched space, its
    perturbation, and where it came from ("cluster 2", "boundary 2", "failure", "uniform")."""

    unit: tuple[float, ...]
    values: dict
    origin: str


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders)."""
    weights = np.asarray(weights, float)
    share = total * weights / weights.sum()
    counts = np.floor(share).astype(int)
    for i in np.argsort(-(share - counts), kind="stable")[:total - counts.sum()]:
        counts[i] += 1
    return counts.tolist()


def targeted_conditions(outcome: SearchOutcome, space: SearchSpace, count: int, rng: np.random.Generator,
                        boundary_share: float = 0.5, targeted_share: float = 1.0) -> list[Condition]:
    """`count` conditions where the search found the policy failing: uniform inside each cluster's
    region (clusters in proportion to their sizes) and, for `boundary_share` of them, about the
    middle of each bisected failure/success pair (spread along each factor as far as the pair is apart). With no
    cluster, about the failures themselves; with no failure at all, uniform over the space.
    With `targeted_share` below 1, that share of them only; the rest are uniform over the space."""
    mixed = int(round(count * (1.0 - targeted_share)))
    count -= mixed
    clusters, boundaries = outcome.atlas.clusters, outcome.boundaries
    failures = [outcome.units[r.id] for r in (*outcome.results, *outcome.refined) if not r.success]
    n_boundary = int(round(count * boundary_share)) if boundaries else 0
    if not clusters:
        n_boundary = count if boundaries else 0
    out: list[Condition] = []
    if clusters:
        for cluster, n in zip(clusters, _apportion(count - n_boundary, [c.size for c in clusters])):
            low, high = np.zeros(space.dim), np.ones(space.dim)
            for c in cluster.conditions:
                i = space.names.index(c.factor)
                low[i], high[i] = c.unit_low, c.unit_high
            for _ in range(n):
                out.append(_condition(rng.uniform(low, high), space, f"cluster {cluster.index}"))
    elif failures and n_boundary < count:
        for i in range(count - n_boundary):
            around = failures[i % len(failures)]
            out.append(_condition(np.clip(around + rng.normal(0.0, 0.05, space.dim), 0, 1), space, "failure"))
    elif n_boundary < count:
        for _ in range(count - n_boundary):
            out.append(_condition(rng.random(space.dim), space, "uniform (no failure found)"))
    for boundary, n in zip(boundaries, _apportion(n_boundary, [1.0] * len(boundaries)) if boundaries else []):
        middle = (boundary.failure + boundary.success) / 2
        # Spread along each factor as far as the pair is still apart in it: where the boundary may lie.
        scale = np.maximum(np.abs(boundary.failure - boundary.success), 0.01)
        for _ in range(n):
            out.append(_condition(middle + rng.normal(0.0, 1.0, space.dim) * scale, space,
                                  f"boundary {boundary.cluster}"))
    out += [_condition(rng.random(space.dim), space, "uniform") for _ in range(mixed)]
    order = rng.permutation(len(out))  # the collection takes the first ones that succeed: mix origins
    return [out[i] for i in order]


def _condition(unit: np.ndarray, space: SearchSpace, origin: str) -> Condition:
    unit = np.clip(np.asarray(unit, float), 0.0, 1.0)
    return Condition(tuple(float(u) for u in unit), space.values(unit), origin)


# -- the run -------------------------------------------------------------------------------------------
@dataclass
class RoundResult:
    arm: str
    round: int
    checkpoint: str
    successes: int
    trials: int
    outcomes: list[bool]  # per held-out trial, in plan order
    demos: int = 0  # demonstrations added this round
    relabelled: int = 0  # relabelled rollouts of the current checkpoint added this round
    total_episodes: int = 0  # in the dataset the checkpoint was trained on
    collection_trials: int = 0  # expert trials run to get them
    search_trials: int = 0
    train_steps: int = 0
    atlas: dict = field(default_factory=dict)  # the held-out failures' atlas
    search_atlas: dict | None = None  # the targeted arm's search atlas (what the data aimed at)
    origins: dict = field(default_factory=dict)  # demonstrations per condition origin

    @property
    def rate(self):
        return wilson(self.successes, self.trials)


@dataclass
class Improvement:
    config: ImproveConfig
    out: Path
    start: RoundResult
    rounds: dict[str, list[RoundResult]]  # arm -> its rounds
    comparisons: list[dict] = field(default_factory=list)  # per round: targeted vs uniform
    report: Path | None = None


class _Run:
    def __init__(self, config: ImproveConfig, out: Path, pool: TrialPool, progress: bool):
        self.config, self.out, self.pool, self.progress = config, out, pool, progress
        self.task = load_task(config.task)
        self.space = SearchSpace(self.task.perturbations, None, config.envelope)
        self.start = start_checkpoint(config.policy)
        self.settings = training_settings(self.start)
        self.base_dataset = Path(self.settings["dataset"])
        self.collection = collection_settings(self.base_dataset)
        self.store = TrialStore(out / "trials.sqlite")
        self.held_out_seed = stream_seed(config.seed, HELD_OUT)
        self.held_out_seeds = {trial_seed(self.held_out_seed, i) for i in range(config.held_out)}

    def log(self, arm: str, round_: int, step: str, text: str) -> None:
        entry = {"time": time.time(), "arm": arm, "round": round_, "step": step}
        with open(self.out / "progress.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.progress:
            print(f"improve: {arm} round {round_}/{self.config.rounds}: {text}", file=sys.stderr, flush=True)

    # -- steps ---------------------------------------------------------------------------------------
    def evaluate(self, checkpoint: Path, arm: str, round_: int) -> tuple[list[TrialResult], Atlas]:
        planned = plan_eval(str(checkpoint), self.task, self.config.held_out, self.held_out_seed,
                            envelope=self.config.envelope)
        name = f"held-out-{arm}-{round_}"
        self.store.open_campaign(name, {"kind": "improve held-out", "policy": str(checkpoint),
                                        "trials": self.config.held_out, "seed": self.held_out_seed,
                                        "envelope": self.config.envelope})
        results = run_trials(planned, self.store, name, pool=self.pool, progress=self.progress, batch=8)
        return results, build_atlas(results, self.space.space, self.space.names)

    def search(self, checkpoint: Path, round_: int) -> SearchOutcome:
        seed = stream_seed(self.config.seed, SEARCH, round_)
        # Its trials: the budget, then at most four bisections per cluster of three or more failures.
        self._check_apart(seed, 3 * self.config.search_budget, "failure search")
        return run_search(self.task, str(checkpoint), self.config.search_budget, self.config.sampler, seed,
                          store=self.store, envelope=self.config.envelope, pool=self.pool, progress=self.progress,
                          policy_batch=8)

    def _check_apart(self, campaign_seed: int, count: int, what: str) -> None:
        """The held-out trials' seeds are reserved: no data or search trial may share one."""
        shared = self.held_out_seeds & {trial_seed(campaign_seed, i) for i in range(count)}
        if shared:
            raise ImproveError(f"{what}: trial seeds {sorted(shared)[:3]} are held-out seeds; expected none "
                               f"(choose another --seed)")

    def demonstrations(self, arm: str, round_: int, folder: Path, conditions: list[Condition] | None,
                       policy: str | None = None, count: int | None = None) -> dict:
        """The round's expert demonstrations, or with `policy` its rollouts relabelled by the
        expert (every one kept); a finished collection is kept as it is. Its meta/r2s2r.json."""
        relabel = policy is not None
        seed = stream_seed(self.config.seed, RELABELLED if relabel else DATA, ARMS.index(arm), round_)
        options = CollectOptions(
            task=self.config.task, policy=policy or self.task.expert, seed=seed,
            episodes=count or self.config.demos_per_round, keep="all" if relabel else "success",
            envelope=None if conditions else self.config.envelope,
            conditions=None if not conditions else tuple(tuple(sorted(c.values.items())) for c in conditions),
            cameras=self.collection["cameras"], image_size=self.collection["image_size"],
            privileged=self.collection["privileged"], relabel=relabel)
        from r2s2r.data.collect import MAX_ATTEMPTS_PER_EPISODE
        self._check_apart(seed, options.episodes * MAX_ATTEMPTS_PER_EPISODE, f"{arm} {folder.name}")
        if not ((folder / "meta/info.json").is_file() and not (folder / ".collect").exists()):
            collect(options, folder, self.pool, self.progress)
        return json.loads((folder / META_PATH).read_text())

    def dataset(self, previous: Path, added: Sequence[tuple[Path, str]], round_: int, folder: Path) -> Path:
        """Every episode so far, each labelled with its round and origin; written whole."""
        if (folder / "meta/info.json").is_file():
            return folder
        partial = folder.with_name(folder.name + ".partial")
        if partial.exists():
            shutil.rmtree(partial)
        first = {"r2s2r/round": 0, "r2s2r/origin": "start"} if round_ == 1 else None
        merge([previous, *(path for path, _ in added)], partial,
              labels=[first, *({"r2s2r/round": round_, "r2s2r/origin": origin} for _, origin in added)])
        os.replace(partial, folder)
        return folder

    def train(self, dataset: Path, current: Path, folder: Path) -> Path:
        settings = {k: v for k, v in self.settings.items() if k in TrainConfig.__dataclass_fields__}
        for key in ("image_size", "cameras"):
            if settings.get(key) is not None:
                settings[key] = tuple(settings[key])
        settings.update(dataset=str(dataset.resolve()), steps=self.config.train_steps or settings["steps"],
                        init=str(current) if self.config.retrain == "finetune" else None)
        config = TrainConfig(**settings)
        latest = latest_checkpoint(folder)
        if latest is not None and int(latest.name.split("_")[1]) >= config.steps:
            return latest
        return Trainer(config, folder).train(progress=self.progress)

    # -- a round -------------------------------------------------------------------------------------
    def round(self, arm: str, round_: int, current: Path, previous: Path) -> tuple[RoundResult, Path, Path]:
        folder = self.out / arm / f"round_{round_}"
        folder.mkdir(parents=True, exist_ok=True)
        conditions, search_atlas, search_trials = None, None, 0
        if arm == "targeted":
            self.log(arm, round_, "search", f"failure search of {current} ({self.config.search_budget} trials)")
            outcome = self.search(current, round_)
            rng = np.random.default_rng(stream_seed(self.config.seed, CONDITIONS, round_))
            conditions = targeted_conditions(outcome, self.space, self.config.demos_per_round * CONDITIONS_PER_DEMO,
                                             rng, self.config.boundary_share, self.config.targeted_share)
            search_atlas = outcome.atlas.to_dict()
            search_trials = len(outcome.results) + len(outcome.refined)
            (folder / "conditions.json").write_text(json.dumps(
                {"factors": list(self.space.names), "atlas": search_atlas,
                 "boundaries": [b.to_dict(self.space.names) for b in outcome.boundaries],
                 "conditions": [asdict(c) for c in conditions]}, indent=1))
        self.log(arm, round_, "demonstrations", f"{self.config.demos_per_round} expert demonstrations "
                 f"({'at the failures found' if conditions else 'drawn uniformly'})")
        demos = folder / "demos"
        meta = self.demonstrations(arm, round_, demos, conditions)
        origins = self._origins(demos, conditions)
        added = [(demos, f"{arm} expert")]
        if self.config.relabelled_per_round:
            self.log(arm, round_, "relabelled", f"{self.config.relabelled_per_round} rollouts of {current.name}, "
                     "relabelled by the expert")
            self.demonstrations(arm, round_, folder / "relabelled", conditions, str(current),
                                self.config.relabelled_per_round)
            added.append((folder / "relabelled", f"{arm} relabelled"))
        self.log(arm, round_, "dataset", "every episode so far in one dataset")
        dataset = self.dataset(previous, added, round_, folder / "dataset")
        self.log(arm, round_, "train", f"training ({self.config.retrain})")
        checkpoint = self.train(dataset, current, folder / "run")
        self.log(arm, round_, "evaluate", f"{self.config.held_out} held-out trials")
        results, atlas = self.evaluate(checkpoint, arm, round_)
        total = len(open_dataset(dataset).episodes)
        result = RoundResult(arm, round_, str(checkpoint), sum(r.success for r in results), len(results),
                             [r.success for r in results], self.config.demos_per_round,
                             self.config.relabelled_per_round, total, int(meta["trials"]), search_trials,
                             int(checkpoint.name.split("_")[1]), atlas.to_dict(), search_atlas, origins)
        return result, checkpoint, dataset

    def _origins(self, demos: Path, conditions: list[Condition] | None) -> dict:
        if not conditions:
            return {"uniform": self.config.demos_per_round}
        by_values = {tuple(sorted(c.values.items())): c.origin for c in conditions}
        counts: dict[str, int] = {}
        for episode in open_dataset(demos).episodes:
            values = tuple(sorted(json.loads(episode["r2s2r/perturbation"]).items()))
            origin = by_values.get(values, "?")
            counts[origin] = counts.get(origin, 0) + 1
        return counts


def run_improve(config: ImproveConfig, out: str | Path, workers: int = 1, progress: bool = True,
                images: bool = True) -> Improvement:
    """Run (or resume) an improvement; one process at a time works in `out`."""
    config.check()
    # Absolute: checkpoints are named by their paths in the trials' ids.
    with sole_writer(Path(out).resolve(), "r2s2r improve", ImproveError) as folder:
        return _improve(config, Path(folder), workers, progress, images)


def _improve(config: ImproveConfig, out: Path, workers: int, progress: bool, images: bool) -> Improvement:
    start = start_checkpoint(config.policy)
    resolved = ImproveConfig(**{**asdict(config), "policy": str(start)})
    with TrialPool(workers) as pool:
        run = _Run(resolved, out, pool, progress)  # checks the task, envelope, run and dataset first
        try:
            same_options(out / STATE, resolved, "an improvement run")
        except DatasetError as exc:
            raise ImproveError(str(exc)) from None
        run.log("start", 0, "evaluate", f"the starting checkpoint on {config.held_out} held-out trials")
        results, atlas = run.evaluate(start, "start", 0)
        base_total = len(open_dataset(run.base_dataset).episodes)
        first = RoundResult("start", 0, str(start), sum(r.success for r in results), len(results),
                            [r.success for r in results], 0, 0, base_total, 0, 0,
                            int(run.settings["steps"]), atlas.to_dict())
        rounds: dict[str, list[RoundResult]] = {arm: [] for arm in resolved.arms}
        state = {arm: (start, run.base_dataset) for arm in resolved.arms}
        for round_ in range(1, resolved.rounds + 1):
            for arm in resolved.arms:  # round by round, so that a stopped run compares like with like
                result, checkpoint, dataset = run.round(arm, round_, *state[arm])
                rounds[arm].append(result)
                state[arm] = (checkpoint, dataset)
        improvement = Improvement(resolved, out, first, rounds, compare(rounds))
        from r2s2r.loop.report import write_improve_report
        improvement.report = write_improve_report(improvement, run, images=images)
        run.store.close()
    return improvement


def compare(rounds: dict[str, list[RoundResult]]) -> list[dict]:
    """Per round, the targeted arm against the control on the same held-out trials: the
    difference in success and McNemar's exact test on the trials where they disagree."""
    if "uniform" not in rounds:
        return []
    out = []
    for targeted, uniform in zip(rounds["targeted"], rounds["uniform"]):
        only_targeted = sum(a and not b for a, b in zip(targeted.outcomes, uniform.outcomes))
        only_uniform = sum(b and not a for a, b in zip(targeted.outcomes, uniform.outcomes))
        out.append({"round": targeted.round, "targeted": targeted.successes / targeted.trials,
                    "uniform": uniform.successes / uniform.trials,
                    "difference": (targeted.successes - uniform.successes) / targeted.trials,
                    "only_targeted": only_targeted, "only_uniform": only_uniform,
                    "p_value": mcnemar_exact(only_targeted, only_uniform)})
    return out


__all__ = ["ImproveConfig", "ImproveError", "Improvement", "RoundResult", "run_improve", "targeted_conditions",
           "Condition", "compare", "start_checkpoint", "stream_seed", "ARMS"]
