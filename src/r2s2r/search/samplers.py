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
  spread would carry draws from one region out of it). Stages share the draws by the square
  root of their failure volume, the share of the cube that fails at that stage, estimated by
  importance sampling: every failure weighted by the inverse of the density of the proposal
  that drew it (population Monte Carlo), so a stage's estimate does not grow with the draws
  spent on it. Equal shares gave stages whose failures form no region (scattered misses,
  rare timeouts) as many draws as stages with several regions; shares by volume would starve
  a small stage. Within a stage a centre is picked inversely to how crowded its neighbourhood
  is, so each region the stage fails in gets a comparable share rather than the region found
  first. The warm-up and a small fraction of every batch explore, so new regions can still be
  found: drawn from Beta(b, b) per factor (`explore_beta`, 0.5: the arcsine distribution; 1 is
  uniform), which puts more of them toward the ends of each range. That is boundary-value
  testing's prior, and an expert's weak spots bear it out: the edge of reach, the extreme
  yaws, the largest and smallest blocks, the heaviest and most slippery (on the block task the
  reference atlas's 14 failure modes all lie against one end of a range or more, most at a
  corner of two or three, which uniform draws rarely touch before the adaptive draws take
  over; docs/evaluation.md has the figures). The exploration density is known, so the
  importance weights stay exact.
- tpe: optuna's Tree-structured Parzen Estimator (multivariate, seeded), one study per
  objective, each failure stage's proposing an equal share of the draws (CEM's shares by
  failure volume need the density a draw came from, which optuna does not give). The
  near-miss study minimises the margin of successes and ranks every failure below them, so
  it leads along the failure boundaries toward modes not yet found rather than back into
  the ones it knows; it proposes everything until a failure is found, then half a stage
  study's share (`near_miss_share`). Each failure stage found gets a study of its own, where
  failing at that stage is best and the failures farthest from the stage's earlier ones rank
  first (without that tie-break the good set would be the stage's first failures, and TPE
  would keep to the first region it found). Few expected-improvement candidates per draw
  (4, optuna's default is 24) keep TPE sampling across its good set's regions rather than
  only at the densest one. Once a failure is found, a share of the draws (`follow_up_share`)
  follows up regions touched but not yet found: failures with fewer than `follow_up_few` of
  their stage's failures near them (counted as CEM balances its centres). Each such draw
  aims at one of them, inversely to the trials already near it, and is proposed by a TPE
  study of the box around it (a trust region, `follow_up_half_width` each way), built afresh
  from the trials inside. The box keeps TPE's kernel widths local: in the stage studies, a
  lone failure's kernel is as wide as the gap to the next good trial along each factor and
  can spread over most of the cube, so a region touched once was rarely found.
"""

from __future__ import annotations

import abc
import inspect
import warnings
from typing import Sequence

import numpy as np

SAMPLERS = ("uniform", "sobol", "cem", "tpe")
NEAR_MISS = ""  # TPE: the study of the margin over successes
FOLLOW_UP = "follow-up"  # TPE: the studies of the boxes around failures in regions touched but not yet found
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

    def tell(self, points: np.ndarray, margins: Sequence[float],  # noqa: B027 (an optional hook)
             stages: Sequence[str]) -> None:
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

    # Defaults tuned on the block task's search benchmark (bench/search_efficiency.py): narrow
    # local widths keep draws inside the failure region they start from.
    def __init__(self, dim: int, seed: int = 0, elite_fraction: float = 0.2, explore: float = 0.05,
                 warmup: int = 75, max_width: float = 0.12, min_width: float = 0.02, neighbours: int = 4,
                 balance_radius: float = 0.8, stage_share_power: float = 0.5, explore_beta: float = 0.5):
        super().__init__(dim, seed)
        if not 0 < elite_fraction < 1 or not 0 <= explore < 1 or not 0 <= stage_share_power <= 1:
            raise ValueError(f"elite_fraction {elite_fraction}, explore {explore} and stage_share_power "
                             f"{stage_share_power}; expected 0 < elite_fraction < 1, 0 <= explore < 1 and "
                             "0 <= stage_share_power <= 1")
        self.rng = np.random.default_rng(self.seed)
        self.elite_fraction = elite_fraction
        self.explore = explore
        self.exploration = _Exploration(dim, explore_beta)  # the warm-up's and the explore draws' distribution
        self.warmup = warmup
        self.max_width, self.min_width = max_width, min_width
        self.neighbours = neighbours  # elites a draw's width comes from (0: all the stage's)
        self.balance_radius = balance_radius  # per unit of sqrt(dim) of the stage's scaling (0: no balance)
        self.stage_share_power = stage_share_power  # 0: stages share equally; 1: by their failure volume
        self.points = np.zeros((0, dim))
        self.margins = np.zeros(0)
        self.stages: list[str] = []
        self.log_density = np.zeros(0)  # per trial: log density of the proposal it was drawn from
        self._proposal: _Mixture | _Exploration | None = None  # the last ask's, until its points are told

    def tell(self, points, margins, stages) -> None:
        points = np.asarray(points, float).reshape(-1, self.dim)
        # Points told without an ask count as uniform draws: density 1.
        density = self._proposal.log_density(points) if self._proposal is not None else np.zeros(len(points))
        self._proposal = None
        self.points = np.vstack([self.points, points])
        self.margins = np.concatenate([self.margins, np.asarray(margins, float)])
        self.stages += list(stages)
        self.log_density = np.concatenate([self.log_density, density])

    def elites(self) -> np.ndarray:
        """Indices of the elite trials: every failure once there are `MIN_FAILURES`, else the
        trials at or below the elite quantile of the margin (near-misses lead the way)."""
        failures = np.flatnonzero(self.margins <= 0)
        if len(failures) >= MIN_FAILURES:
            return failures
        return np.flatnonzero(self.margins <= float(np.quantile(self.margins, self.elite_fraction)))

    def failure_volumes(self) -> dict[str, float]:
        """Each failure stage's share of the unit cube, estimated from every trial told: each
        trial weighted by the inverse of the density of the proposal that drew it (1 for a
        uniform draw), a stage's failures' weight over all trials' (self-normalised importance
        sampling). Unlike the stage's count of failures, the estimate does not grow with the
        draws the sampler spent on the stage."""
        weights = self._weights()
        failures = np.flatnonzero(self.margins <= 0)
        return {stage: float(weight / weights.sum())
                for stage, (_, weight) in self._by_stage(failures, weights).items()}

    def _weights(self) -> np.ndarray:
        """Each trial's importance weight, up to a common factor (only ratios count)."""
        return np.exp(-(self.log_density - self.log_density.min()))

    def _by_stage(self, trials: np.ndarray, weights: np.ndarray) -> dict[str, tuple[np.ndarray, float]]:
        """The given trials grouped by stage, in stage-name order: each stage's trial indices
        and their summed importance weight (`weights`: every trial's, from _weights)."""
        weights = weights[trials]
        stage_of = np.array([self.stages[i] for i in trials])
        return {name: (trials[stage_of == name], weights[stage_of == name].sum()) for name in sorted(set(stage_of))}

    def ask(self, n: int) -> np.ndarray:
        if len(self.margins) < self.warmup:
            self._proposal = self.exploration
            return self.exploration.sample(n, self.rng)
        groups = self._by_stage(self.elites(), self._weights())
        # A stage's share of the draws grows as a power of the volume its elites stand for (as
        # in failure_volumes, which they are once failures are found): equal shares (power 0)
        # give stages whose failures form no region as many draws as those with several; shares
        # by volume (power 1) starve the small stages.
        volume = np.array([weight for _, weight in groups.values()])
        stages = [(self.points[rows], *self._stage(self.points[rows])) for rows, _ in groups.values()]
        explore = int(round(self.explore * n)) / n
        mixture = _Mixture(stages, volume ** self.stage_share_power, explore, self.exploration)
        self._proposal = mixture
        return mixture.sample(n, self.rng)

    def _stage(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A stage's elites as its draws use them: per point, the widths of the draws centred on
        it (per factor, the spread of its nearest elites of the stage, nearest in the stage's own
        scaling, where the factors its failures spread over count less: an adaptive bandwidth,
        since one stage often fails in several separate regions and the stage's overall spread
        would carry draws out of them), and how likely it is to be a draw's centre: inversely to
        how many of the stage's elites lie near it (within `balance_radius` in that scaling), so
        each region a stage fails in gets a comparable share of the draws, not the region found
        first or sampled most."""
        if len(points) < 2:
            return np.full((len(points), self.dim), self.max_width), np.ones(len(points))
        gaps = _scaled_gaps(points, self.min_width)
        if 0 < self.neighbours < len(points):
            nearest = np.argsort(gaps, axis=1, kind="stable")[:, :self.neighbours]
            spreads = points[nearest].std(axis=1)
        else:
            spreads = np.broadcast_to(points.std(axis=0), points.shape)
        widths = np.clip(spreads, self.min_width, self.max_width)
        if self.balance_radius <= 0:
            return widths, np.full(len(points), 1.0 / len(points))
        weights = 1.0 / (gaps < self.balance_radius).sum(axis=1)
        return widths, weights / weights.sum()


class _Exploration:
    """CEM's exploration: Beta(beta, beta), independently per factor of the unit cube (1: uniform;
    below 1, denser toward both ends of every range)."""

    def __init__(self, dim: int, beta: float):
        if not beta > 0:
            raise ValueError(f"explore_beta {beta}; expected a Beta shape above 0 (1: uniform exploration, "
                             "0.5: the arcsine distribution)")
        self.dim, self.beta = dim, float(beta)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.beta == 1.0:  # the uniform draws CEM made before explore_beta, bit for bit
            return rng.random((n, self.dim))
        return rng.beta(self.beta, self.beta, size=(n, self.dim))

    def log_density(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, float)
        if self.beta == 1.0:
            return np.zeros(len(x))
        from scipy import stats
        # A draw can round to a face, where the density of a shape below 1 is infinite.
        return stats.beta.logpdf(np.clip(x, 1e-12, 1 - 1e-12), self.beta, self.beta).sum(axis=1)


class _Mixture:
    """CEM's proposal: a fraction `explore` from the exploration distribution; the rest split
    between stages by `shares`, each stage a mixture of Gaussians with diagonal widths on its
    centres (weighted by its balance, which sums to 1 as CEMSampler._stage gives it); every draw
    folded back into the cube."""

    def __init__(self, stages: list[tuple[np.ndarray, np.ndarray, np.ndarray]], shares: np.ndarray, explore: float,
                 exploration: _Exploration):
        self.stages = stages
        self.shares, self.explore, self.exploration = shares / shares.sum(), explore, exploration

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        n_explore = int(round(self.explore * n))
        out = [self.exploration.sample(n_explore, rng)]
        dim = self.stages[0][0].shape[1]
        picks = rng.choice(len(self.stages), size=n - n_explore, p=self.shares)
        for k, (centres, widths, balance) in enumerate(self.stages):
            rows = rng.choice(len(centres), size=int((picks == k).sum()), p=balance)
            out.append(_reflect(centres[rows] + widths[rows] * rng.standard_normal((len(rows), dim))))
        return np.vstack(out)

    def log_density(self, x: np.ndarray) -> np.ndarray:
        """Log density at points x (n, dim) of the unit cube, the folding included."""
        from scipy.special import logsumexp
        x = np.asarray(x, float)[:, None, :]
        # The fold maps y to x from y = x + 2k and y = 2k - x; images beyond |k| = 1 are
        # negligible for widths up to a few tenths.
        images = np.stack([sign * x + 2 * k for sign in (1, -1) for k in (-1, 0, 1)])
        per_stage = []
        for centres, widths, balance in self.stages:
            c, w = centres[None], widths[None]
            per_factor = logsumexp(-0.5 * ((images - c) / w) ** 2, axis=0) - np.log(w) - 0.5 * np.log(2 * np.pi)
            per_stage.append(logsumexp(per_factor.sum(axis=2) + np.log(balance)[None], axis=1))
        gaussians = logsumexp(np.stack(per_stage, axis=1) + np.log(self.shares)[None], axis=1)
        if self.explore <= 0:
            return gaussians
        return np.logaddexp(np.log(self.explore) + self.exploration.log_density(x[:, 0, :]),
                            np.log1p(-self.explore) + gaussians)


class TPESampler(Sampler):
    name = "tpe"

    def __init__(self, dim: int, seed: int = 0, startup: int = 50, candidates: int = 4, near_miss_share: float = 0.5,
                 follow_up_share: float = 0.3, follow_up_half_width: float = 0.15, balance_radius: float = 0.8,
                 follow_up_few: int = 3, min_width: float = 0.02):
        super().__init__(dim, seed)
        if not 0 < near_miss_share <= 1:
            raise ValueError(f"near_miss_share {near_miss_share}; expected 0 < near_miss_share <= 1 (of a stage "
                             "study's share)")
        if not 0 <= follow_up_share < 1 or not 0 < follow_up_half_width <= 0.5 or follow_up_few < 2:
            raise ValueError(f"follow_up_share {follow_up_share}, follow_up_half_width {follow_up_half_width} and "
                             f"follow_up_few {follow_up_few}; expected 0 <= follow_up_share < 1 (of all draws), "
                             "0 < follow_up_half_width <= 0.5 (of the unit range) and follow_up_few >= 2")
        self.near_miss_share = near_miss_share
        self.follow_up_share, self.follow_up_half_width = follow_up_share, follow_up_half_width
        # A failure is a follow-up target while fewer than `follow_up_few` of its stage's failures
        # (itself included) lie within `balance_radius` of it in the stage's scaling, as CEM counts.
        self.balance_radius, self.follow_up_few, self.min_width = balance_radius, follow_up_few, min_width
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.startup, self.candidates = startup, candidates
        self.rng = np.random.default_rng(self.seed)
        self.distributions = {f"u{i}": optuna.distributions.FloatDistribution(0.0, 1.0) for i in range(dim)}
        self.history: list[tuple[np.ndarray, float, str]] = []
        self.studies: dict[str, object] = {}  # NEAR_MISS -> the near-miss study; a stage -> that stage's
        self.failures: dict[str, np.ndarray] = {}  # stage -> its failures' points, in the order told
        self._asked: list[tuple[str, object]] = []
        self._open(NEAR_MISS)

    def _value(self, key: str, point: np.ndarray, margin: float, stage: str) -> float | None:
        """What a trial is worth to a study (lower is better), given the failures told before it;
        None: a failure the near-miss study ranks below every success."""
        if margin > 0:
            return float(margin)
        if key == NEAR_MISS or stage != key:
            return None if key == NEAR_MISS else 0.0
        earlier = self.failures.get(key)
        novelty = float(np.min(np.linalg.norm(earlier - point, axis=1))) if earlier is not None else np.sqrt(self.dim)
        return -1.0 - novelty

    def _open(self, key: str) -> None:
        sampler = self.optuna.samplers.TPESampler(seed=self.seed + 7919 * len(self.studies),
                                                  n_startup_trials=self.startup, multivariate=True,
                                                  constant_liar=True, n_ei_candidates=self.candidates)
        study = self.optuna.create_study(direction="minimize", sampler=sampler)
        self.studies[key] = study
        for point, margin, stage in self.history:  # in order: each value sees the failures before it
            self._record(key, None, point, margin, stage)

    def _record(self, key: str, asked, point: np.ndarray, margin: float, stage: str) -> None:
        """Tell study `key` one trial (`asked`: its own optuna trial, if it proposed the point)."""
        study, value = self.studies[key], self._value(key, point, margin, stage)
        # A pruned trial counts as worse than every complete one in TPE's split (not ignored, as
        # a failed one would be): the near-miss study keeps away from failures already found.
        state = self.optuna.trial.TrialState.COMPLETE if value is not None else self.optuna.trial.TrialState.PRUNED
        if asked is not None:
            study.tell(asked, value, state=state)
        else:
            study.add_trial(self.optuna.trial.create_trial(
                params={f"u{i}": float(x) for i, x in enumerate(point)}, distributions=self.distributions,
                value=value, state=state))
        if key != NEAR_MISS and stage == key and margin <= 0:
            earlier = self.failures.get(key)
            self.failures[key] = point[None] if earlier is None else np.vstack([earlier, point])

    def ask(self, n: int) -> np.ndarray:
        if len(self.history) < self.startup:
            self._asked = []
            return self.rng.random((n, self.dim))
        keys = list(self.studies)
        # Each failure stage's study an equal share; the near-miss study, once a stage has one,
        # half of that: on the block task 13-31 % of its draws failed, against 69-93 % of the
        # stage studies', and those stage studies found every stage there was by themselves.
        weights = np.array([self.near_miss_share if key == NEAR_MISS and len(keys) > 1 else 1.0 for key in keys])
        picks = [keys[i] for i in self.rng.choice(len(keys), size=n, p=weights / weights.sum())]
        targets, chances = self._follow_up_targets()
        following = self.rng.random(n) < (self.follow_up_share if targets else 0.0)
        aimed = self.rng.choice(len(targets), size=n, p=chances) if targets else np.zeros(n, int)
        boxes: dict[int, tuple[object, dict]] = {}  # target -> its box study and the box
        self._asked = []
        for key, follow, target in zip(picks, following, aimed):
            if follow:
                if target not in boxes:
                    boxes[target] = self._box_study(targets[target], len(boxes))
                study, box = boxes[target]
                self._asked.append((FOLLOW_UP, study.ask(box)))
            else:
                self._asked.append((key, self.studies[key].ask(self.distributions)))
        return np.array([[trial.params[f"u{i}"] for i in range(self.dim)] for _, trial in self._asked])

    def _follow_up_targets(self) -> tuple[list[int], np.ndarray]:
        """The failures in regions touched but not yet found (history indices, in order) and how
        likely each is to be a follow-up draw's target: inversely to the trials already in its
        box, so a lone failure that stayed lone after being followed up fades."""
        points = np.array([point for point, _, _ in self.history])
        margins = np.array([margin for _, margin, _ in self.history])
        stages = np.array([stage for _, _, stage in self.history])
        targets = []
        for stage in sorted(set(stages[margins <= 0])):
            rows = np.flatnonzero((margins <= 0) & (stages == stage))
            near = (_scaled_gaps(points[rows], self.min_width) < self.balance_radius).sum(axis=1)
            targets += [int(row) for row in rows[near < self.follow_up_few]]
        targets.sort()
        inside = np.array([np.all(np.abs(points - points[t]) <= self.follow_up_half_width, axis=1).sum()
                           for t in targets], float)
        return targets, (1.0 / inside) / (1.0 / inside).sum() if targets else np.zeros(0)

    def _box_study(self, target: int, index: int):
        """A study of the box around trial `target` (a trust region of the unit cube, clipped to
        it), built afresh from the trials told inside the box: failing at the target's stage is
        best, successes rank by margin. Its distributions are the box, so TPE's kernel widths
        (the gaps between good trials, at most the range) are local to it."""
        point, _, stage = self.history[target]
        low = np.maximum(point - self.follow_up_half_width, 0.0)
        high = np.minimum(point + self.follow_up_half_width, 1.0)
        box = {f"u{i}": self.optuna.distributions.FloatDistribution(float(low[i]), float(high[i]))
               for i in range(self.dim)}
        sampler = self.optuna.samplers.TPESampler(seed=self.seed + 104729 * len(self.history) + 7919 * index,
                                                  n_startup_trials=0, multivariate=True, constant_liar=True,
                                                  n_ei_candidates=self.candidates)
        study = self.optuna.create_study(direction="minimize", sampler=sampler)
        study.add_trials([self.optuna.trial.create_trial(
            params={f"u{i}": float(x) for i, x in enumerate(p)}, distributions=box,
            value=float(margin) if margin > 0 else (-1.0 if s == stage else 0.0))
            for p, margin, s in self.history if np.all((p >= low) & (p <= high))])
        return study, box

    def tell(self, points, margins, stages) -> None:
        points = np.asarray(points, float).reshape(-1, self.dim)
        if self._asked and len(margins) != len(self._asked):
            raise ValueError(f"told {len(margins)} results for {len(self._asked)} asked points")
        for k, (point, margin, stage) in enumerate(zip(points, margins, stages)):
            margin = float(margin)
            own_key, own = self._asked[k] if self._asked else (None, None)  # a follow-up's box study is not kept
            for key in list(self.studies):
                self._record(key, own if key == own_key else None, point, margin, stage)
            self.history.append((point, margin, stage))
            if margin <= 0 and stage not in self.studies:
                self._open(stage)
        self._asked = []


def _scaled_gaps(points: np.ndarray, min_width: float) -> np.ndarray:
    """Distances between one stage's failures in the stage's own scaling (each factor divided by
    the failures' spread along it, at least min_width, so the factors they spread over count
    less), per unit of sqrt(dim)."""
    scaled = points / np.maximum(points.std(axis=0), min_width)
    return np.linalg.norm(scaled[:, None, :] - scaled[None, :, :], axis=2) / np.sqrt(points.shape[1])


def _reflect(x: np.ndarray) -> np.ndarray:
    """Fold a point back into [0, 1] (mirror at the faces): density near a face stays there."""
    x = np.mod(x, 2.0)
    return np.where(x > 1.0, 2.0 - x, x)


def make_sampler(name: str, dim: int, seed: int = 0, **options) -> Sampler:
    """A sampler by name; `options` are its keyword arguments (CEMSampler's explore_beta, ...),
    checked against its signature and converted to the types of their defaults, so options from
    a command line or a YAML file fail with a message that names the option."""
    classes = {"uniform": UniformSampler, "sobol": SobolSampler, "cem": CEMSampler, "tpe": TPESampler}
    if name not in classes:
        raise ValueError(f"sampler {name!r}; expected one of {', '.join(SAMPLERS)}")
    accepted = {key: parameter.default for key, parameter in inspect.signature(classes[name].__init__).parameters.items()
                if key not in ("self", "dim", "seed")}
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"sampler {name!r} has no option {', '.join(map(repr, unknown))}; its options: "
                         f"{', '.join(accepted) or 'none'}")
    return classes[name](dim, seed, **{key: _option(name, key, value, accepted[key]) for key, value in options.items()})


def _option(sampler: str, key: str, value, default):
    """An option's value as the type of its default (an int where the default is one, ...)."""
    kind = type(default)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is bool and isinstance(value, bool):
        return value
    if kind is float and number:
        return float(value)
    if kind is int and number and float(value).is_integer():
        return int(value)
    raise ValueError(f"sampler {sampler!r} option {key} = {value!r}; expected {kind.__name__} (default {default!r})")


__all__ = ["DEFAULT_BATCH", "NEAR_MISS", "FOLLOW_UP", "Sampler", "UniformSampler", "SobolSampler", "CEMSampler",
           "TPESampler", "make_sampler", "SAMPLERS"]
