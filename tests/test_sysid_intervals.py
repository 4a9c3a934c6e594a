"""The fit's block bootstrap (real2sim.sysid._bootstrap) against the curvature's interval, on
linear problems whose answer is known: white residuals, where the two agree, and residuals
correlated within segments, where the curvature's interval is too narrow and the bootstrap's is
not."""

import numpy as np
import pytest

from r2s2r.real2sim.sysid import _bootstrap

SEGMENTS = 40
PER_SEGMENT = 50


def _problem(correlated: bool, seed: int):
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 4 * np.pi, SEGMENTS * PER_SEGMENT)
    J = np.stack([np.sin(t), np.cos(0.5 * t) + 0.3], axis=1)  # two parameters, smooth in time
    segments = np.repeat(np.arange(SEGMENTS), PER_SEGMENT)
    # Correlated: each segment's misfit is one offset shared by its samples (a model that
    # cannot follow the cell for a while), plus a little white noise.
    noise = rng.normal(0, 1, SEGMENTS)[segments] if correlated else rng.normal(0, 1, len(t))
    return J, noise + (0.05 * rng.normal(0, 1, len(t)) if correlated else 0), segments


def _curvature(J, r):
    s2 = r @ r / (len(r) - J.shape[1])
    return 1.96 * np.sqrt(np.diag(np.linalg.inv(J.T @ J)) * s2)


def _true_spread(correlated: bool) -> np.ndarray:
    """1.96 standard deviations of the least-squares estimate over fresh draws of the noise."""
    estimates = []
    for seed in range(300):
        J, r, _ = _problem(correlated, 1000 + seed)
        estimates.append(np.linalg.lstsq(J, r, rcond=None)[0])
    return 1.96 * np.std(estimates, axis=0)


def test_bootstrap_agrees_with_the_curvature_on_white_residuals():
    J, r, segments = _problem(False, 0)
    boot = _bootstrap(J, r, segments, 400, seed=0)
    assert boot == pytest.approx(_curvature(J, r), rel=0.2)
    assert boot == pytest.approx(_true_spread(False), rel=0.2)


def test_bootstrap_widens_an_interval_the_curvature_underestimates():
    J, r, segments = _problem(True, 0)
    curvature = _curvature(J, r)
    boot = _bootstrap(J, r, segments, 400, seed=0)
    truth = _true_spread(True)
    # The curvature assumes 2000 independent samples where there are 40: several times too narrow.
    assert np.all(curvature < 0.4 * truth), (curvature, truth)
    assert np.all(boot > 0.6 * truth) and np.all(boot < 1.6 * truth), (boot, truth)


def test_bootstrap_is_deterministic_for_a_seed():
    J, r, segments = _problem(True, 3)
    assert np.array_equal(_bootstrap(J, r, segments, 50, seed=7), _bootstrap(J, r, segments, 50, seed=7))
