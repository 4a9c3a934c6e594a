"""Checks every command passes before it can move anything.

A rejected command raises CommandError with a message that says what is wrong and what was
expected; the caller keeps its previous targets, so the robot holds still.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from r2s2r.contract.types import CommandError, JointNamesError


def check_finite(label: str, values: np.ndarray) -> None:
    """`values` of any shape (a trajectory's points are rows): each bad value is named by its index,
    (point, joint) for rows."""
    values = np.asarray(values)
    bad = ~np.isfinite(values)
    if bad.any():
        where = [int(i[0]) if values.ndim == 1 else tuple(int(k) for k in i) for i in np.argwhere(bad)]
        raise CommandError(f"{label}: values at index {where} are {values[bad].tolist()}; "
                           "expected finite numbers (no NaN or Inf)")


def check_length(label: str, values: Sequence[float], expected: Sequence[str]) -> None:
    if len(values) != len(expected):
        raise CommandError(f"{label}: got {len(values)} values, expected {len(expected)} "
                           f"(one per joint: {', '.join(expected)})")


def order_by_names(label: str, names: Sequence[str], expected: Sequence[str], partial: bool = False) -> np.ndarray:
    """Index array mapping `expected` order into `names` order; unknown or repeated joints are
    errors, and so are missing ones unless `partial` (their index is then -1)."""
    unknown = [n for n in names if n not in expected]
    if unknown:
        raise JointNamesError(f"{label}: unknown joint names {unknown}; expected the joints {', '.join(expected)}")
    if len(set(names)) != len(names):
        raise JointNamesError(f"{label}: joint names repeat: {list(names)}; expected each of {', '.join(expected)} once")
    if not names:
        raise JointNamesError(f"{label}: no joint names; expected some of {', '.join(expected)}")
    missing = [n for n in expected if n not in names]
    if missing and not partial:
        raise JointNamesError(f"{label}: joints {missing} are missing; expected all of {', '.join(expected)}")
    position = {n: i for i, n in enumerate(names)}
    return np.array([position.get(n, -1) for n in expected])


def _number(value: float) -> str:
    """A value for a message: four decimals, or in exponent form where that would run long (1e300)."""
    return f"{value:.4f}" if abs(value) < 1e6 else f"{value:.4g}"


def check_within(label: str, values: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                 names: Sequence[str], unit: str = "rad", tolerance: float = 1e-9) -> None:
    outside = np.flatnonzero((values < lower - tolerance) | (values > upper + tolerance))
    if outside.size:
        details = ", ".join(f"{names[i]}={_number(values[i])} not in [{lower[i]:.4f}, {upper[i]:.4f}] {unit}"
                            for i in outside)
        raise CommandError(f"{label}: outside the joint limits: {details}")
