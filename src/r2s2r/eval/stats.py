"""Statistics of evaluation campaigns: success rates with Wilson intervals, ranking of
checkpoints with pairwise significance, and agreement of two rankings (sim versus real).

- Wilson score interval (Wilson 1927): for k successes in n trials, p = k / n,
  centre (p + z^2 / 2n) / (1 + z^2 / n), half-width z sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n).
- Pairwise significance: checkpoints evaluated on the same trials (same perturbations and
  seeds) are compared by the exact McNemar test on the discordant trials (those one
  checkpoint passed and the other failed), two-sided binomial with p = 1/2; checkpoints on
  different trials by a two-sided two-proportion z-test. p-values are Holm-adjusted over all
  pairs.
- Rank agreement: Pearson and Spearman correlation of success rates, and MMRV, the mean
  maximum rank violation of the SIMPLER benchmark (Li et al. 2024): for each policy i, the
  largest real-world gap |r_i - r_j| over the policies j that sim orders the other way round
  from real, averaged over i. 0 means sim ranks every pair as real does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

Z95 = 1.959963984540054  # the two-sided 95% quantile of the standard normal


@dataclass(frozen=True)
class Rate:
    successes: int
    trials: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.successes / self.trials if self.trials else math.nan

    def describe(self) -> str:
        return f"{self.rate:.1%} ({self.successes}/{self.trials}; 95% CI {self.low:.1%} - {self.high:.1%})"


def wilson(successes: int, trials: int, z: float = Z95) -> Rate:
    """The Wilson score interval of a success rate (95% by default). Written out rather than
    scipy's BinomTestResult.proportion_ci(method="wilson"), the same interval, to take z and
    to keep both ends on the side of p where rounding at p = 0 or 1 would not."""
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes in {trials} trials; expected 0 <= successes <= trials")
    if trials == 0:
        return Rate(0, 0, 0.0, 1.0)
    n, p = trials, successes / trials
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # The interval holds p; at p = 0 or 1 rounding could put an end a hair past it.
    return Rate(successes, trials, min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half)))


# -- pairwise tests ---------------------------------------------------------------------------------
def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (a passed, b failed; the
    reverse): the binomial test of only_a in only_a + only_b at p = 1/2."""
    if only_a + only_b == 0:
        return 1.0
    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def two_proportion_z(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided p-value of the pooled two-proportion z-test."""
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0
    z = abs(k1 / n1 - k2 / n2) / se
    return math.erfc(z / math.sqrt(2))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given). scipy adjusts only by
    Benjamini-Hochberg / -Yekutieli (false_discovery_control), and statsmodels for these few
    lines would be a dependency of its own."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    rate_a: float
    rate_b: float
    p_value: float  # Holm-adjusted
    test: str  # "mcnemar" (paired trials) or "z" (independent)

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_value < alpha


@dataclass(frozen=True)
class Ranking:
    order: list[str]  # best first
    rates: dict[str, Rate]
    comparisons: list[Comparison]  # every pair, the better-ranked one as `a`

    def comparison(self, a: str, b: str) -> Comparison:
        for c in self.comparisons:
            if {c.a, c.b} == {a, b}:
                return c
        raise KeyError(f"no comparison of {a!r} and {b!r}; checkpoints: {', '.join(self.order)}")


def rank_checkpoints(outcomes: Mapping[str, Mapping[str, bool]]) -> Ranking:
    """Rank checkpoints by success rate. `outcomes`: checkpoint -> {trial key -> success}; keys
    shared by two checkpoints (the same perturbation and seed) are compared paired (McNemar),
    checkpoints with no common key by the z-test."""
    rates = {}
    for name, results in outcomes.items():
        rates[name] = wilson(sum(bool(v) for v in results.values()), len(results))
    order = sorted(rates, key=lambda n: (-rates[n].rate if rates[n].trials else math.inf, n))
    pairs, raw, tests = [], [], []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            common = sorted(set(outcomes[a]) & set(outcomes[b]))
            if common:
                only_a = sum(1 for k in common if outcomes[a][k] and not outcomes[b][k])
                only_b = sum(1 for k in common if outcomes[b][k] and not outcomes[a][k])
                raw.append(mcnemar_exact(only_a, only_b))
                tests.append("mcnemar")
            else:
                ra, rb = rates[a], rates[b]
                raw.append(two_proportion_z(ra.successes, ra.trials, rb.successes, rb.trials))
                tests.append("z")
            pairs.append((a, b))
    adjusted = holm(raw)
    comparisons = [Comparison(a, b, rates[a].rate, rates[b].rate, p, t)
                   for (a, b), p, t in zip(pairs, adjusted, tests)]
    return Ranking(order, rates, comparisons)


# -- agreement of two rankings --------------------------------------------------------------------
def _pair(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError(f"two success-rate vectors of one length >= 2 (one entry per checkpoint), "
                         f"got shapes {x.shape} and {y.shape}")
    return x, y


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation; nan when either vector is constant (no ordering to agree on)."""
    x, y = _pair(x, y)
    dx, dy = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / denominator if denominator > 0 else math.nan


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation: Pearson of the ranks, ties sharing the mean of theirs (nan,
    as pearson, when either is constant, where scipy's spearmanr would also warn)."""
    x, y = _pair(x, y)
    return pearson(stats.rankdata(x), stats.rankdata(y))


def mmrv(sim: Sequence[float], real: Sequence[float]) -> float:
    """Mean maximum rank violation (SIMPLER): how badly sim misorders policies, in real success rate."""
    sim, real = _pair(sim, real)
    worst = []
    for i in range(len(sim)):
        violations = [abs(real[i] - real[j]) for j in range(len(sim))
                      if (sim[i] > sim[j]) != (real[i] > real[j])]
        worst.append(max(violations, default=0.0))
    return float(np.mean(worst))


def agreement(sim: Mapping[str, float], real: Mapping[str, float]) -> dict[str, float]:
    """Pearson, Spearman and MMRV of the checkpoints both mappings rate (name -> success rate)."""
    names = sorted(set(sim) & set(real))
    missing = sorted(set(sim) ^ set(real))
    if missing:
        raise ValueError(f"checkpoints rated on one side only: {', '.join(missing)}; expected the same checkpoints")
    s, r = [sim[n] for n in names], [real[n] for n in names]
    return {"pearson": pearson(s, r), "spearman": spearman(s, r), "mmrv": mmrv(s, r), "checkpoints": len(names)}


def stage_distance(sim: Mapping[str, int], real: Mapping[str, int]) -> float:
    """Total variation distance between two distributions of trial outcomes by stage (the stage a
    failure happened in, or success): half the summed absolute difference of their shares, 0
    when both fail alike, 1 when they share no stage. `sim` and `real` count trials per stage."""
    stages = sorted(set(sim) | set(real))
    counts = [np.array([float(side.get(k, 0)) for k in stages]) for side in (sim, real)]
    for name, c in zip(("sim", "real"), counts):
        if (c < 0).any() or not np.isfinite(c).all() or c.sum() <= 0:
            raise ValueError(f"{name}: trial counts per stage, none negative and at least one trial; got "
                             f"{dict(zip(stages, c.tolist()))}")
    p, q = (c / c.sum() for c in counts)
    return float(0.5 * np.abs(p - q).sum())


__all__ = ["Rate", "wilson", "mcnemar_exact", "two_proportion_z", "holm", "Comparison", "Ranking",
           "rank_checkpoints", "pearson", "spearman", "mmrv", "agreement", "stage_distance", "Z95"]
