"""Normalisation statistics that travel with a checkpoint and are applied inside the runtime.

Features are named `state`, `action` and `image.<camera>`. The formulas are LeRobot's, so
statistics read from a LeRobot folder give the same numbers here:
  mean_std:  (x - mean) / (std + eps)           inverse: y * std + mean
  min_max:   2 (x - min) / (max - min) - 1      inverse: (y + 1) / 2 (max - min) + min
(a zero range is replaced by eps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2s2r.policy.types import PolicyError

MODES = {"mean_std": ("mean", "std"), "min_max": ("min", "max"), "identity": ()}
EPS = 1e-8


@dataclass(frozen=True)
class FeatureStats:
    mode: str
    stats: dict[str, np.ndarray]
    eps: float = EPS

    def __post_init__(self):
        if self.mode not in MODES:
            raise PolicyError(f"normalisation mode {self.mode!r} is not one of {', '.join(MODES)}")
        missing = [k for k in MODES[self.mode] if k not in self.stats]
        if missing:
            raise PolicyError(f"{self.mode} normalisation needs the statistics {', '.join(MODES[self.mode])}; "
                              f"missing {', '.join(missing)}")

    def apply(self, x: np.ndarray) -> np.ndarray:
        if self.mode == "mean_std":
            return (x - self.stats["mean"]) / (self.stats["std"] + self.eps)
        if self.mode == "min_max":
            low, span = self.stats["min"], self._span()
            return 2.0 * (x - low) / span - 1.0
        return x

    def invert(self, y: np.ndarray) -> np.ndarray:
        if self.mode == "mean_std":
            return y * self.stats["std"] + self.stats["mean"]
        if self.mode == "min_max":
            return (y + 1.0) / 2.0 * self._span() + self.stats["min"]
        return y

    def _span(self) -> np.ndarray:
        span = self.stats["max"] - self.stats["min"]
        return np.where(span == 0, self.eps, span)


class Normalizer:
    """Per-feature statistics; a feature without statistics passes through unchanged."""

    def __init__(self, features: dict[str, FeatureStats] | None = None):
        self.features = dict(features or {})

    def normalize(self, feature: str, x: np.ndarray) -> np.ndarray:
        stats = self.features.get(feature)
        return x if stats is None else stats.apply(x).astype(np.float32)

    def unnormalize(self, feature: str, y: np.ndarray) -> np.ndarray:
        stats = self.features.get(feature)
        return y if stats is None else stats.invert(np.asarray(y, np.float64))

    def check_size(self, feature: str, size: int) -> None:
        """Statistics of a vector feature must match its length (a checkpoint for another robot fails here)."""
        stats = self.features.get(feature)
        for name, values in (stats.stats.items() if stats else ()):
            if values.size not in (1, size):
                raise PolicyError(f"normalisation statistics {feature}.{name} have {values.size} values, "
                                  f"expected {size} (the policy's {feature} size) or 1")

    def to_dict(self) -> dict:
        return {name: {"mode": f.mode, "eps": f.eps, **{k: v.tolist() for k, v in f.stats.items()}}
                for name, f in self.features.items()}

    @classmethod
    def from_dict(cls, data: dict | None, source: str = "<normalization>") -> "Normalizer":
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise PolicyError(f"{source}: normalization is {type(data).__name__}; expected a mapping of feature "
                              "names (state, action, image.<camera>) to {mode, statistics}")
        features = {}
        for name, entry in data.items():
            if not isinstance(entry, dict) or "mode" not in entry:
                raise PolicyError(f"{source}: normalization.{name} must be a mapping with a mode "
                                  f"({', '.join(MODES)}) and its statistics")
            stats = {k: np.asarray(v, dtype=np.float64) for k, v in entry.items() if k not in ("mode", "eps")}
            try:
                features[str(name)] = FeatureStats(str(entry["mode"]), stats, float(entry.get("eps", EPS)))
            except PolicyError as exc:
                raise PolicyError(f"{source}: normalization.{name}: {exc}") from None
        return cls(features)
