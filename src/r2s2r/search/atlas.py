"""The failure atlas: failures clustered by failure stage and by region of the perturbation space.

For each failure stage, a shallow classification tree (CART, Gini impurity) separates the
trials that failed at that stage from all others, splitting on one factor at a time. Each
leaf where that stage dominates (at least `min_purity` of the leaf's trials, at least
`min_size` of them) is a cluster, and the splits on its path are its conditions: one range
per factor that matters, in the factor's own units. A condition the region does not need (its
purity barely changes without it: the tree split on sampling noise) is dropped, so what is
left reads as a finding ("block_yaw above 0.9 rad"), however many factors the space has.
Where simplified regions of one stage overlap, the largest claims the failures. A stage's
failures in no cluster are counted as scattered.

A cluster's representative is its medoid over the condition factors (the member nearest the
cluster's median there), the trial a report shows and `r2s2r replay` reruns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Condition:
    factor: str
    low: float  # in the factor's units
    high: float
    unit_low: float  # the same range in the unit cube
    unit_high: float

    def describe(self) -> str:
        return f"{self.factor} in [{self.low:.4g}, {self.high:.4g}]"


@dataclass(frozen=True)
class Cluster:
    index: int
    stage: str
    size: int
    purity: float  # share of the region's trials (all of them, not only the members) that failed at this stage
    conditions: tuple[Condition, ...]
    members: tuple[str, ...]  # trial ids
    representative: str
    mean_margin: float

    def contains(self, unit: np.ndarray, names: Sequence[str]) -> bool:
        index = {n: i for i, n in enumerate(names)}
        return all(c.unit_low <= unit[index[c.factor]] <= c.unit_high for c in self.conditions)

    def describe(self) -> str:
        return " and ".join(c.describe() for c in self.conditions) or "anywhere"


@dataclass
class Atlas:
    factors: tuple[str, ...]
    clusters: list[Cluster] = field(default_factory=list)
    scattered: dict[str, int] = field(default_factory=dict)  # stage -> failures in no cluster
    failures: int = 0

    def cluster_of(self, unit: np.ndarray, stage: str) -> Cluster | None:
        """The cluster a failure at `stage` and unit point falls in (None: none)."""
        for c in self.clusters:
            if c.stage == stage and c.contains(unit, self.factors):
                return c
        return None

    def to_dict(self) -> dict:
        return {"factors": list(self.factors), "failures": self.failures, "scattered": dict(self.scattered),
                "clusters": [{"index": c.index, "stage": c.stage, "size": c.size, "purity": c.purity,
                              "conditions": [{"factor": d.factor, "low": d.low, "high": d.high} for d in c.conditions],
                              "representative": c.representative, "mean_margin": c.mean_margin,
                              "members": list(c.members)} for c in self.clusters]}


@dataclass
class _Node:
    rows: np.ndarray
    bounds: dict[int, tuple[float, float]]  # dim -> (low, high) in unit coordinates
    depth: int


def _best_split(x: np.ndarray, y: np.ndarray, min_leaf: int) -> tuple[int, float, float] | None:
    """(dim, threshold, impurity decrease) of the best Gini split, or None."""
    n = len(y)
    total_pos = y.sum()
    parent = 1.0 - (total_pos / n) ** 2 - (1 - total_pos / n) ** 2
    best = None
    for d in range(x.shape[1]):
        order = np.argsort(x[:, d], kind="stable")
        xs, ys = x[order, d], y[order]
        left_n = np.arange(1, n)
        left_pos = np.cumsum(ys)[:-1]
        right_n = n - left_n
        right_pos = total_pos - left_pos
        valid = (xs[1:] > xs[:-1]) & (left_n >= min_leaf) & (right_n >= min_leaf)
        if not valid.any():
            continue
        pl, pr = left_pos / left_n, right_pos / right_n
        gini = (left_n * (1 - pl ** 2 - (1 - pl) ** 2) + right_n * (1 - pr ** 2 - (1 - pr) ** 2)) / n
        gini = np.where(valid, gini, np.inf)
        k = int(np.argmin(gini))
        gain = parent - gini[k]
        if gain > 1e-12 and (best is None or gain > best[2]):
            best = (d, float((xs[k] + xs[k + 1]) / 2), float(gain))
    return best


def _leaves(x: np.ndarray, y: np.ndarray, max_depth: int, min_leaf: int) -> list[_Node]:
    leaves, stack = [], [_Node(np.arange(len(y)), {}, 0)]
    while stack:
        node = stack.pop()
        ys = y[node.rows]
        pure = ys.all() or not ys.any()
        split = None if pure or node.depth >= max_depth else _best_split(x[node.rows], ys, min_leaf)
        if split is None:
            leaves.append(node)
            continue
        d, threshold, _ = split
        low, high = node.bounds.get(d, (0.0, 1.0))
        left = node.rows[x[node.rows, d] <= threshold]
        right = node.rows[x[node.rows, d] > threshold]
        stack.append(_Node(right, {**node.bounds, d: (threshold, high)}, node.depth + 1))
        stack.append(_Node(left, {**node.bounds, d: (low, threshold)}, node.depth + 1))
    return leaves


def _inside(x: np.ndarray, bounds: dict[int, tuple[float, float]]) -> np.ndarray:
    mask = np.ones(len(x), bool)
    for d, (lo, hi) in bounds.items():
        mask &= (x[:, d] >= lo) & (x[:, d] <= hi)
    return mask


def _simplify(x: np.ndarray, y: np.ndarray, bounds: dict[int, tuple[float, float]], min_purity: float,
              tolerance: float) -> dict[int, tuple[float, float]]:
    """Drop the conditions a region does not need: one whose removal keeps the region's purity
    within `tolerance` of what it was (the tree split there on sampling noise)."""
    bounds = dict(bounds)
    inside = _inside(x, bounds)
    purity = y[inside].mean()
    changed = True
    while changed and bounds:
        changed = False
        for d in sorted(bounds, key=lambda d: bounds[d][1] - bounds[d][0], reverse=True):  # widest first
            trial = {k: v for k, v in bounds.items() if k != d}
            region = _inside(x, trial)
            p = y[region].mean()
            if p >= max(min_purity, purity - tolerance):
                bounds, purity, changed = trial, p, True
                break
    return bounds


def build_atlas(results, space, factors: Sequence[str] | None = None, min_size: int = 3, min_purity: float = 0.5,
                max_depth: int = 4, tolerance: float = 0.02) -> Atlas:
    """Cluster the failures among `results` (TrialResults) over `factors` of `space` (default:
    every factor that varies among the results)."""
    results = list(results)
    names = tuple(factors) if factors is not None else tuple(
        n for n in space.names if len({r.perturbation.get(n, space.factor(n).nominal) for r in results}) > 1)
    atlas = Atlas(names)
    failures = [r for r in results if not r.success]
    atlas.failures = len(failures)
    if not failures or not names:
        if failures:
            atlas.scattered = {s: sum(r.stage == s for r in failures) for s in sorted({r.stage for r in failures})}
        return atlas
    x = np.array([[space.factor(n).to_unit(r.perturbation.get(n, space.factor(n).nominal)) for n in names]
                  for r in results])
    stages = np.array([r.stage if not r.success else "" for r in results])
    min_leaf = max(2, min_size // 2)
    clusters = []
    for stage in sorted(set(stages) - {""}):
        y = stages == stage
        regions = []
        for leaf in _leaves(x, y, max_depth, min_leaf):
            members = leaf.rows[y[leaf.rows]]
            if len(members) >= min_size and len(members) / len(leaf.rows) >= min_purity:
                regions.append(_simplify(x, y, leaf.bounds, min_purity, tolerance))
        # Simplified regions may overlap: the largest claims its failures first; a region left
        # with too few of its own is dropped.
        claimed = np.zeros(len(results), bool)
        for bounds in sorted(regions, key=lambda b: -int((_inside(x, b) & y).sum())):
            inside = _inside(x, bounds)
            members = np.flatnonzero(inside & y & ~claimed)
            if len(members) < min_size:
                continue
            claimed[members] = True
            clusters.append((stage, bounds, members, float(y[inside].mean())))
        scattered = int((y & ~claimed).sum())
        if scattered:
            atlas.scattered[stage] = scattered
    clusters.sort(key=lambda c: (-len(c[2]), c[0]))
    for stage, bounds, members, purity in clusters:
        conditions = []
        for d in sorted(bounds):
            lo, hi = bounds[d]
            f = space.factor(names[d])
            conditions.append(Condition(names[d], f.from_unit(lo), f.from_unit(hi), lo, hi))
        dims = sorted(bounds) or list(range(len(names)))
        sub = x[np.ix_(members, dims)]
        medoid = members[int(np.argmin(np.abs(sub - np.median(sub, axis=0)).sum(axis=1)))]
        atlas.clusters.append(Cluster(
            index=len(atlas.clusters), stage=stage, size=len(members), purity=purity, conditions=tuple(conditions),
            members=tuple(results[i].id for i in members), representative=results[medoid].id,
            mean_margin=float(np.mean([results[i].margin for i in members]))))
    return atlas


__all__ = ["Atlas", "Cluster", "Condition", "build_atlas"]
