"""Boundary refinement: bisect between a failure and a success to find where one becomes the other.

For each failure cluster, its representative is paired with the nearest success (nearest
over the cluster's condition factors, then over all factors). Each step runs the midpoints of
every pair as one batch and keeps, per pair, the half whose ends still disagree, so after k
steps the failure boundary along each segment is known to 1 / 2^k of the segment's length.
The success end of a refined pair is a near-miss: the policy barely succeeded there, the
failure end is a near-failure just across the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

# evaluate(points (k, dim) in the unit cube) -> one TrialResult per point, in order
Evaluate = Callable[[np.ndarray], list]


@dataclass
class Boundary:
    cluster: int
    stage: str
    failure: np.ndarray  # unit point, the failure side
    success: np.ndarray  # unit point, the success side (the near-miss)
    failure_id: str
    success_id: str
    failure_margin: float
    success_margin: float
    steps: int = 0

    @property
    def width(self) -> float:
        """How far apart the two sides still are (unit-cube distance)."""
        return float(np.linalg.norm(self.failure - self.success))

    def to_dict(self, names: Sequence[str]) -> dict:
        return {"cluster": self.cluster, "stage": self.stage, "steps": self.steps, "width": self.width,
                "failure": {"trial": self.failure_id, "margin": self.failure_margin,
                            "unit": dict(zip(names, self.failure.tolist()))},
                "near_miss": {"trial": self.success_id, "margin": self.success_margin,
                              "unit": dict(zip(names, self.success.tolist()))}}


def pair_with_successes(atlas, results, units: dict[str, np.ndarray]) -> list[Boundary]:
    """One (failure, success) pair per cluster: its representative and the nearest success."""
    by_id = {r.id: r for r in results}
    successes = [r for r in results if r.success]
    if not successes:
        return []
    names = list(atlas.factors)
    success_units = np.array([units[r.id] for r in successes])
    pairs = []
    for cluster in atlas.clusters:
        rep = by_id[cluster.representative]
        u = units[rep.id]
        dims = [names.index(c.factor) for c in cluster.conditions] or list(range(len(names)))
        near = np.linalg.norm(success_units[:, dims] - u[dims], axis=1)
        full = np.linalg.norm(success_units - u, axis=1)
        best = successes[int(np.lexsort((full, near))[0])]
        pairs.append(Boundary(cluster.index, cluster.stage, u.copy(), units[best.id].copy(), rep.id, best.id,
                              rep.margin, best.margin))
    return pairs


def bisect(pairs: list[Boundary], steps: int, evaluate: Evaluate) -> list[Boundary]:
    """Refine every pair `steps` times (one batch of midpoints per step)."""
    for _ in range(steps):
        if not pairs:
            break
        midpoints = np.array([(p.failure + p.success) / 2 for p in pairs])
        for pair, mid, result in zip(pairs, midpoints, evaluate(midpoints)):
            if result.success:
                pair.success, pair.success_id, pair.success_margin = mid, result.id, result.margin
            else:
                pair.failure, pair.failure_id, pair.failure_margin = mid, result.id, result.margin
            pair.steps += 1
    return pairs


__all__ = ["Boundary", "pair_with_successes", "bisect"]
