"""A failure-search campaign: sample, run, cluster, refine the boundaries, report.

    search = run_search("franka_block_in_bowl", "scripted:franka_block_in_bowl", budget=300,
                        sampler="cem", out_dir="search_out", workers=2)
    search.report          # search_out/report.html

The sampler proposes `batch` points at a time; the batch's trials run (in parallel, stored as
each ends), then the sampler is told their margins in proposal order. Proposals depend only
on the seed and on earlier batches' results, so a campaign resumed after a crash proposes
the same trials and reruns none that are stored, and any number of workers gives the same
rows. After `budget` trials the failures are clustered into an atlas and each cluster's
boundary is bisected `refine_steps` times (one batch of midpoints per step; those trials are
stored with sampler "refine").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from r2s2r.eval.runner import Planned, TrialPool, TrialResult, TrialSpec, progress_bar, run_trials, trial_seed
from r2s2r.search.atlas import Atlas, build_atlas
from r2s2r.search.refine import Boundary, bisect, pair_with_successes
from r2s2r.search.samplers import DEFAULT_BATCH, make_sampler


class SearchSpace:
    """The factors a search varies (the rest stay nominal), as the unit cube samplers work in."""

    def __init__(self, space, factors: Sequence[str] | None = None, envelope: str | None = None):
        space = space.within(envelope) if envelope else space  # raises, naming the known envelopes
        self.space = space
        self.names = tuple(space.names if factors is None else factors)
        for name in self.names:
            space.factor(name)  # raises, naming the known factors
        if not self.names:
            raise ValueError(f"{space.source}: nothing to search over; the space has no factors")

    @property
    def dim(self) -> int:
        return len(self.names)

    def values(self, unit) -> dict[str, float]:
        return {n: self.space.factor(n).from_unit(u) for n, u in zip(self.names, np.asarray(unit, float))}


def campaign_name(kind: str, config: dict) -> str:
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    return f"{kind}-{digest}"


@dataclass
class SearchOutcome:
    campaign: str
    store_path: Path
    config: dict
    results: list[TrialResult]  # the sampler's trials, in proposal order
    refined: list[TrialResult]  # the bisection trials
    atlas: Atlas
    boundaries: list[Boundary]
    space: object = None  # the PerturbationSpace searched: the task's, or its envelope's (narrower ranges)
    units: dict[str, np.ndarray] = field(default_factory=dict)  # trial id -> its unit point
    report: Path | None = None


def run_search(task, policy: str, budget: int, sampler: str = "uniform", seed: int = 0,
               batch: int = DEFAULT_BATCH, factors: Sequence[str] | None = None, workers: int = 1,
               backend: str = "process", address: str | None = None, store=None, refine_steps: int = 4,
               control_rate_hz: float | None = None, progress: bool = True, task_ref: str | None = None,
               min_cluster: int = 3, sampler_options: dict | None = None,
               envelope: str | None = None, policy_batch: int = 1, pool: TrialPool | None = None) -> SearchOutcome:
    """Run (or resume) a search; `task` is a loaded Task, `store` a TrialStore, `sampler_options`
    the sampler's keyword arguments (samplers.py: warmup, elite_fraction, startup, ...),
    `envelope` one of the space's named sub-boxes to search within (None: the whole space),
    `policy_batch` the trials a worker runs in lockstep (TrialPool.run: the same results),
    `pool` workers the caller keeps (default: `workers` on `backend`, started for this search)."""
    if budget < 1 or batch < 1 or refine_steps < 0:
        raise ValueError(f"budget {budget}, batch {batch}, refine_steps {refine_steps}; expected budget >= 1, "
                         "batch >= 1, refine_steps >= 0")
    space = SearchSpace(task.perturbations, factors, envelope)
    ref = task_ref or task.name
    config = {"kind": "search", "task": ref, "policy": policy, "budget": budget, "sampler": sampler, "seed": seed,
              "batch": batch, "factors": list(space.names), "refine_steps": refine_steps,
              "control_rate_hz": control_rate_hz, "min_cluster": min_cluster, "sampler_options": sampler_options or {}}
    if envelope:
        config["envelope"] = envelope
    name = campaign_name("search", config)
    store.open_campaign(name, config)
    proposer = make_sampler(sampler, space.dim, seed, **(sampler_options or {}))
    units: dict[str, np.ndarray] = {}
    next_index = 0

    bar = progress_bar(budget, f"search {sampler}", progress)

    def run_points(points: np.ndarray, phase: str) -> list[TrialResult]:
        nonlocal next_index
        planned = []
        for u in points:
            spec = TrialSpec.of(policy, ref, space.values(u), trial_seed(seed, next_index), control_rate_hz)
            units.setdefault(spec.id, np.asarray(u, float))
            planned.append(Planned(next_index, spec, phase))
            next_index += 1
        return run_trials(planned, store, name, bar=bar, pool=pool, batch=policy_batch)

    results: list[TrialResult] = []
    refined: list[TrialResult] = []
    own_pool = pool is None
    if own_pool:
        pool = TrialPool(workers, backend, address)  # warm workers for every round
    try:
        while len(results) < budget:
            points = proposer.ask(min(batch, budget - len(results)))
            batch_results = run_points(points, sampler)
            proposer.tell(points, [r.margin for r in batch_results], [r.stage for r in batch_results])
            results += batch_results

        # Over the searched space: an envelope's clusters are stated within the envelope's ranges.
        atlas = build_atlas(results, space.space, space.names, min_size=min_cluster)
        pairs = pair_with_successes(atlas, results, units)
        bar.total += len(pairs) * refine_steps
        bar.set_description_str("search: refining boundaries")
        bar.refresh()

        def evaluate(points: np.ndarray) -> list[TrialResult]:
            out = run_points(points, "refine")
            refined.extend(out)
            return out

        boundaries = bisect(pairs, refine_steps, evaluate)
    finally:
        if own_pool:
            pool.close()
        bar.close()
    return SearchOutcome(name, Path(store.path), config, results, refined, atlas, boundaries, space.space, units)


__all__ = ["SearchSpace", "SearchOutcome", "run_search", "campaign_name"]
