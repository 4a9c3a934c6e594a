"""The approximate-time synchroniser the policy layer joins joint states and cameras with."""

import math

import numpy as np
import pytest

from r2s2r.contract import ApproximateTimeSynchronizer, SyncedObservation


def test_joins_one_message_per_key_within_tolerance_and_reports_skew():
    sync = ApproximateTimeSynchronizer(["joints", "cam_high", "cam_low"], tolerance_s=0.010)
    assert sync.add("joints", 1.000, "q0") is None
    assert sync.add("cam_high", 1.004, "high0") is None
    obs = sync.add("cam_low", 0.997, "low0")
    assert isinstance(obs, SyncedObservation)
    assert obs.items == {"joints": (1.000, "q0"), "cam_high": (1.004, "high0"), "cam_low": (0.997, "low0")}
    assert obs.stamp == pytest.approx(1.004)
    assert obs.skew == pytest.approx(0.007)
    assert sync.latest() is obs


def test_nothing_is_emitted_when_stamps_are_further_apart_than_the_tolerance():
    sync = ApproximateTimeSynchronizer(["a", "b"], tolerance_s=0.005)
    sync.add("a", 1.000, 1)
    assert sync.add("b", 1.006, 2) is None
    assert sync.latest() is None


def test_the_smallest_skew_set_is_chosen_and_older_messages_are_dropped():
    sync = ApproximateTimeSynchronizer(["joints", "cam"], tolerance_s=0.02)
    for t in (1.000, 1.004, 1.008, 1.012):  # joint states at 250 Hz
        sync.add("joints", t, t)
    obs = sync.add("cam", 1.009, "frame")
    assert obs.items["joints"] == (1.008, 1.008)  # the closest of the four, not the first within tolerance
    assert obs.skew == pytest.approx(0.001)
    assert sync.dropped == 2  # 1.000 and 1.004 can never join a later set


def test_a_late_message_older_than_an_emitted_set_is_dropped_not_joined():
    sync = ApproximateTimeSynchronizer(["a", "b"], tolerance_s=0.05)
    sync.add("a", 2.00, "a1")
    assert sync.add("b", 2.01, "b1") is not None
    assert sync.add("a", 1.99, "stale") is None  # older than the a already used
    assert sync.dropped == 1
    sync.add("a", 2.10, "a2")
    obs = sync.add("b", 2.11, "b2")
    assert obs.items == {"a": (2.10, "a2"), "b": (2.11, "b2")}


def test_clear_starts_a_new_episode_whose_clock_may_restart():
    # A reset twin restarts its clock: without clear, every later message would be "older than a
    # set already emitted" and dropped for good.
    sync = ApproximateTimeSynchronizer(["a", "b"], tolerance_s=0.05)
    sync.add("a", 5.00, "a1")
    assert sync.add("b", 5.01, "b1") is not None
    sync.add("a", 5.02, "pending")
    sync.clear()
    assert sync.latest() is None
    assert sync.add("b", 0.01, "b2") is None  # the pending a from before the reset does not join it
    obs = sync.add("a", 0.00, "a2")
    assert obs.items == {"a": (0.00, "a2"), "b": (0.01, "b2")}


def test_queues_are_bounded_and_overflow_counts_as_dropped():
    sync = ApproximateTimeSynchronizer(["fast", "never"], tolerance_s=0.01, queue_size=5)
    for i in range(50):
        sync.add("fast", i * 0.1, i)
    assert sync.dropped == 45
    obs = sync.add("never", 4.9, "x")
    assert obs.items["fast"] == (pytest.approx(4.9), 49)


def test_streams_at_different_rates_give_sets_within_tolerance_in_time_order():
    rng = np.random.default_rng(3)
    tolerance = 1 / 60
    sync = ApproximateTimeSynchronizer(["joints", "left", "right"], tolerance_s=tolerance)
    messages = [("joints", t) for t in np.arange(0, 2, 1 / 250)]
    messages += [("left", t + rng.normal(0, 0.002)) for t in np.arange(0, 2, 1 / 30)]
    messages += [("right", t + 0.004 + rng.normal(0, 0.002)) for t in np.arange(0, 2, 1 / 30)]
    messages.sort(key=lambda m: m[1] + rng.uniform(0, 0.003))  # arrival order, with transport jitter
    sets = [obs for key, t in messages if (obs := sync.add(key, t, (key, t))) is not None]
    assert len(sets) >= 55  # about one per camera frame pair (60 pairs in 2 s)
    stamps = [o.stamp for o in sets]
    assert stamps == sorted(stamps)
    for obs in sets:
        assert set(obs.items) == {"joints", "left", "right"}
        times = [t for t, _ in obs.items.values()]
        assert obs.skew == pytest.approx(max(times) - min(times))
        assert obs.skew <= tolerance
        assert all(value == (key, t) for key, (t, value) in obs.items.items())


def test_a_single_key_passes_every_message_through():
    sync = ApproximateTimeSynchronizer(["only"], tolerance_s=0.0)
    assert sync.add("only", 3.0, "v").items == {"only": (3.0, "v")}


@pytest.mark.parametrize("kwargs, match", [
    (dict(keys=[], tolerance_s=0.1), "at least one"),
    (dict(keys=["a", "a"], tolerance_s=0.1), "each once"),
    (dict(keys=["a"], tolerance_s=-1.0), "tolerance_s"),
    (dict(keys=["a"], tolerance_s=math.nan), "tolerance_s"),
    (dict(keys=["a"], tolerance_s=0.1, queue_size=0), "queue_size"),
])
def test_bad_construction_is_a_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ApproximateTimeSynchronizer(**kwargs)


def test_unknown_keys_and_bad_stamps_are_clear_errors():
    sync = ApproximateTimeSynchronizer(["joints", "cam"], tolerance_s=0.01)
    with pytest.raises(KeyError, match="expected one of joints, cam"):
        sync.add("wrist", 1.0, None)
    with pytest.raises(ValueError, match="finite"):
        sync.add("cam", math.inf, None)
