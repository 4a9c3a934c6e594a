"""Samplers of failure search: where in a perturbation space to run the next trials.

Every sampler works in the unit cube (one coordinate per factor, `PerturbationSpace.to_unit`
/ `from_unit`) and has one interface: `ask(n)` proposes n points, `tell(points, margins,
stages)` reports their trials. A sampler is a pure function of its seed and of what it was
told, in order, so a campaign that asks and tells in batch order proposes the same points on
every run, resumed or not, whatever the number of workers.

- uniform: independent uniform points.
- sobol: a scrambled Sobol sequence (scipy.stats.qmc), evenly spread for any budget.
- cem: cross-entropy adaptive sampling toward low margin. The elite set is the trials at or
  below the elite quantile of the margin until a few failures are found, then every failure,
  whatever its depth, so the search spreads over all failure modes rather than deepening one.
  New points are drawn from a mixture of Gaussians on the elites (a
  kernel density, the cross-entropy method's nonparametric family) with local widths: per
  factor, the spread of the centre's nearest elites of the same failure stage (an adaptive
  bandwidth: one stage often fails in several separate regions, and the stage's overall
  spread would carry draws from one region out of it); each stage gets an equal share of
  draws, so a rare failure mode is explored as much as a common one. A fraction of every
  batch stays uniform so new regions can still be found.
- tpe: optuna's Tree-structured Parzen Estimator (multivariate, seeded), minimising the
  margin clipped at zero for the same reason.
"""

from __future__ import annotations

import abc
import warnings
from typing import Sequence

import numpy as np

SAMPLERS = ("uniform", "sobol", "cem", "tpe")
MIN_FAILURES = 5  # CEM: failures enough to be the elite set on their own
DEFAULT_BATCH = 25  # points per ask/tell round of a search


class Sampler(abc.ABC):
    name = "sampler"

    def __init__(self, dim: int, seed: int = 0):
        if dim < 1:
            raise ValueError(f"a search space of {dim} factors; expected at least one factor to vary")
        self.dim = dim
        self.seed = int(seed)

    @abc.abstractmethod
    def ask(self, n: int) -> np.ndarray:
        """n points of the unit cube, shape (n, dim)."""

    def tell(self, points: np.ndarray, margins: Sequence[float], stages: Sequence[str]) -> None:
        """The trials of the points asked last, in the order they were asked."""


class UniformSampler(Sampler):
    name = "uniform"

    def __init__(self, dim: int, seed: int = 0):
        super().__init__(dim, seed)
        self.rng = np.random.default_rng(self.seed)

    def ask(self, n: int) -> np.ndarray:
        return self.rng.random((n, self.dim))


class SobolSampler(Sampler):
    name = "sobol"

    def __init__(self, dim: int, seed: int = 0):
        super().__init__(dim, seed)
        from scipy.stats import qmc
        self.engine = qmc.Sobol(d=dim, scramble=True, seed=self.seed)

    def ask(self, n: int) -> np.ndarray:
        with warnings.catch_warnings():  # balance is best at powers of two; any budget is still even
            warnings.simplefilter("ignore", UserWarning)
            return self.engine.random(n)


class CEMSampler(Sampler):
    name = "cem"

    def __init__(self, dim: int, seed: int = 0, elite_fraction: float = 0.2, explore: float = 0.1,
                 warmup: int = 50, max_width: float = 0.25, min_width: float = 0.02, neighbours: int = 10):
        super().__init__(dim, seed)
        if not 0 < elite_fraction < 1 or not 0 <= explore < 1:
            raise ValueError(f"elite_fraction {elite_fraction} and explore {explore}; expected 0 < elite_fraction < 1 "
                             "and 0 <= explore < 1")
        self.rng = np.random.default_rng(self.seed)
        self.elite_fraction = elite_fraction
        self.explore = explore
        self.warmup = warmup
        self.max_width, self.min_width = max_width, min_width
        self.neighbours = neighbours  # elites a draw's width comes from (0: all the stage's)
        self.points = np.zeros((0, dim))
        self.margins = np.zeros(0)
        self.stages: list[str] = []

    def tell(self, points, margins, stages) -> None:
        self.points = np.vstack([self.points, np.asarray(points, float).reshape(-1, self.dim)])
        self.margins = np.concatenate([self.margins, np.asarray(margins, float)])
        self.stages += list(stages)

    def elites(self) -> np.ndarray:
        """Indices of the elite trials: every failure once there are `MIN_FAILURES`, else the
        trials at or below the elite quantile of the margin (near-misses lead the way)."""
        failures = np.flatnonzero(self.margins <= 0)
        if len(failures) >= MIN_FAILURES:
            return failures
        return np.flatnonzero(self.margins <= float(np.quantile(self.margins, self.elite_fraction)))

    def ask(self, n: int) -> np.ndarray:
        if len(self.margins) < self.warmup:
            return self.rng.random((n, self.dim))
        elite = self.elites()
        groups: dict[str, np.ndarray] = {}
        for stage in sorted({self.stages[i] for i in elite}):
            groups[stage] = np.array([i for i in elite if self.stages[i] == stage])
        n_explore = int(round(self.explore * n))
        out = [self.rng.random((n_explore, self.dim))]
        names = list(groups)
        for k in range(n - n_explore):
            members = groups[names[self.rng.integers(len(names))]]  # each stage an equal share
            stage_points = self.points[members]
            centre = stage_points[self.rng.integers(len(members))]
            spread = stage_points.std(axis=0) if len(members) > 1 else np.full(self.dim, self.max_width)
            if 0 < self.neighbours < len(members):
                # Nearest in the stage's own scaling: factors its failures spread over count less.
                scaled = (stage_points - centre) / np.maximum(spread, self.min_width)
                nearest = stage_points[np.argsort(np.einsum("ij,ij->i", scaled, scaled), kind="stable")[:self.neighbours]]
                spread = nearest.std(axis=0)
            width = np.clip(spread, self.min_width, self.max_width)
            out.append(_reflect(centre + width * self.rng.standard_normal(self.dim))[None])
        return np.vstack(out)


class TPESampler(Sampler):
    name = "tpe"

    def __init__(self, dim: int, seed: int = 0, startup: int = 50):
        super().__init__(dim, seed)
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=startup, multivariate=True,
                                             constant_liar=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.distributions = {f"u{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(dim)}
        self._asked: list = []

    def ask(self, n: int) -> np.ndarray:
        trials = [self.study.ask(self.distributions) for _ in range(n)]
        self._asked = trials
        return np.array([[t.params[f"u{i}"] for i in range(self.dim)] for t in trials])

    def tell(self, points, margins, stages) -> None:
        if len(margins) != len(self._asked):
            raise ValueError(f"told {len(margins)} results for {len(self._asked)} asked points")
        for trial, margin in zip(self._asked, margins):
            self.study.tell(trial, max(float(margin), 0.0))
        self._asked = []


def _reflect(x: np.ndarray) -> np.ndarray:
    """Fold a point back into [0, 1] (mirror at the faces): density near a face stays there."""
    x = np.mod(x, 2.0)
    return np.where(x > 1.0, 2.0 - x, x)


def make_sampler(name: str, dim: int, seed: int = 0, **options) -> Sampler:
    classes = {"uniform": UniformSampler, "sobol": SobolSampler, "cem": CEMSampler, "tpe": TPESampler}
    if name not in classes:
        raise ValueError(f"sampler {name!r}; expected one of {', '.join(SAMPLERS)}")
    return classes[name](dim, seed, **options)


__all__ = ["DEFAULT_BATCH", "Sampler", "UniformSampler", "SobolSampler", "CEMSampler", "TPESampler", "make_sampler",
           "SAMPLERS"]
