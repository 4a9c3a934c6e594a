"""Statistics against hand-computed values: Wilson intervals, McNemar, Holm, rank agreement (MMRV),
the failure-stage distance."""

import math

import numpy as np
import pytest

from r2s2r.eval.stats import (agreement, holm, mcnemar_exact, mmrv, pearson, rank_checkpoints, spearman,
                              stage_distance, two_proportion_z, wilson)


def test_wilson_intervals_match_hand_computed_values():
    # 8 / 10, z = 1.959964: centre (0.8 + z^2/20) / (1 + z^2/10) = 0.716741, half-width
    # z sqrt(0.8 * 0.2 / 10 + z^2 / 400) / (1 + z^2/10) = 0.226577.
    r = wilson(8, 10)
    assert r.rate == 0.8
    assert r.low == pytest.approx(0.490163, abs=1e-6) and r.high == pytest.approx(0.943318, abs=1e-6)
    # 0 / 10: the interval starts at 0 and ends at z^2 / (n + z^2) = 0.277533.
    zero = wilson(0, 10)
    assert zero.low == 0.0 and zero.high == pytest.approx(3.841459 / 13.841459, abs=1e-6)
    full = wilson(10, 10)
    assert full.high == 1.0 and full.low == pytest.approx(1 - zero.high, abs=1e-12)  # symmetric
    assert "80.0% (8/10; 95% CI 49.0% - 94.3%)" == r.describe()
    assert wilson(0, 0).trials == 0 and math.isnan(wilson(0, 0).rate)
    with pytest.raises(ValueError, match="expected 0 <= successes <= trials"):
        wilson(11, 10)


def test_pairwise_tests_and_holm_match_hand_computed_values():
    # McNemar, 8 trials only A passed, 1 only B: 2 * P(X <= 1), X ~ Bin(9, 1/2) = 2 * 10 / 512.
    assert mcnemar_exact(8, 1) == pytest.approx(20 / 512)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == 1.0
    # Two proportions 30/50 vs 15/50: pooled 0.45, se = sqrt(0.45 * 0.55 * 0.04) = 0.099499,
    # z = 0.3 / 0.099499 = 3.01511, p = 2 (1 - Phi(z)) = 0.002569.
    assert two_proportion_z(30, 50, 15, 50) == pytest.approx(0.002569, rel=1e-3)
    # Holm: sorted 0.01 * 3, 0.03 * 2, 0.04 * 1 -> 0.03, 0.06, max(0.06, 0.04).
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_ranking_of_checkpoints_on_the_same_trials_is_paired():
    trials = range(20)
    outcomes = {"good": {k: k < 18 for k in trials}, "bad": {k: k < 6 for k in trials},
                "same_as_good": {k: k < 17 for k in trials}}
    ranking = rank_checkpoints(outcomes)
    assert ranking.order == ["good", "same_as_good", "bad"]
    assert ranking.rates["good"].successes == 18
    good_bad = ranking.comparison("bad", "good")
    assert good_bad.test == "mcnemar" and good_bad.a == "good"
    assert good_bad.p_value == pytest.approx(min(1.0, 3 * mcnemar_exact(12, 0)))  # smallest raw p, times 3 pairs
    assert good_bad.significant()
    assert not ranking.comparison("good", "same_as_good").significant()
    # No common trials: the unpaired z-test.
    apart = rank_checkpoints({"a": {0: True, 1: True}, "b": {2: False, 3: True}})
    assert apart.comparisons[0].test == "z"
    with pytest.raises(KeyError, match="no comparison"):
        ranking.comparison("good", "nobody")


def test_rank_agreement_matches_hand_computed_values():
    sim, real = [0.9, 0.5, 0.6], [0.8, 0.7, 0.2]
    # Policy 0 is ordered like real against both others. Policies 1 and 2 are swapped (sim 0.5 <
    # 0.6, real 0.7 > 0.2): each one's worst violation is |0.7 - 0.2| = 0.5. MMRV = (0 + 0.5 + 0.5) / 3.
    assert mmrv(sim, real) == pytest.approx(1 / 3)
    assert mmrv(real, real) == 0.0
    assert pearson(sim, real) == pytest.approx(np.corrcoef(sim, real)[0, 1])
    # Spearman: ranks sim (3, 1, 2), real (3, 2, 1): 1 - 6 * (0 + 1 + 1) / (3 * 8) = 0.5.
    assert spearman(sim, real) == pytest.approx(0.5)
    # Ties share their mean rank: ranks (1.5, 1.5, 3) vs (1, 2, 3).
    assert spearman([0.2, 0.2, 0.9], [0.1, 0.3, 0.8]) == pytest.approx(pearson([1.5, 1.5, 3], [1, 2, 3]))
    both = agreement({"a": 0.9, "b": 0.5, "c": 0.6}, {"a": 0.8, "b": 0.7, "c": 0.2})
    assert both["mmrv"] == pytest.approx(1 / 3) and both["checkpoints"] == 3
    with pytest.raises(ValueError, match="rated on one side only: d"):
        agreement({"a": 0.1, "d": 0.2}, {"a": 0.3})
    with pytest.raises(ValueError, match="one entry per checkpoint"):
        mmrv([0.1, 0.2], [0.3])


def test_stage_distance_against_hand_computed_values():
    # sim: success 6, grasp 3, place 1 (of 10); real: success 2, grasp 1, lift 1 (of 4)
    # shares: success .6/.5, grasp .3/.25, place .1/0, lift 0/.25 -> (.1 + .05 + .1 + .25) / 2 = .25
    sim = {"success": 6, "grasp": 3, "place": 1}
    real = {"success": 2, "grasp": 1, "lift": 1}
    assert stage_distance(sim, real) == pytest.approx(0.25)
    assert stage_distance(sim, {k: 3 * v for k, v in sim.items()}) == 0.0  # the same shares
    assert stage_distance({"success": 5}, {"grasp": 2}) == 1.0
    with pytest.raises(ValueError, match="real: trial counts per stage"):
        stage_distance(sim, {"grasp": 0})
