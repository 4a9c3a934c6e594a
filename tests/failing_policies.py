"""Scripted policies that fail to act, for the evaluation engine's tests: reached as
`scripted:tests.failing_policies:<name>` (the runner imports this module by that name).

- overshoot: holds, but asks its first joint for 10 rad beyond where it stands (outside the limits);
- raises: raises on every call (the runtime holds the arm);
- not_a_number: holds, but its first joint's target is NaN;
- short: holds, but its chunk gives the first group one joint too few.
"""

from __future__ import annotations

import numpy as np

from r2s2r.policy.scripted import HoldPolicy, make_hold, scripted_policy


class _Overshoot(HoldPolicy):
    def act(self, observation):
        chunk = super().act(observation)
        first = next(iter(self.metadata.action.joints))  # the first group
        targets = np.array(chunk.joints[first], dtype=float)
        targets[:, 0] += 10.0
        chunk.joints[first] = targets
        return chunk


class _Raises(HoldPolicy):
    def act(self, observation):
        raise RuntimeError("the test policy's network failed")


@scripted_policy("overshoot")
def make_overshoot(params, defaults):
    return _Overshoot(make_hold(params, defaults).metadata)


@scripted_policy("raises")
def make_raises(params, defaults):
    return _Raises(make_hold(params, defaults).metadata)


class _NotANumber(HoldPolicy):
    def act(self, observation):
        chunk = super().act(observation)
        first = next(iter(self.metadata.action.joints))
        targets = np.array(chunk.joints[first], dtype=float)
        targets[:, 0] = np.nan
        chunk.joints[first] = targets
        return chunk


class _Short(HoldPolicy):
    def act(self, observation):
        chunk = super().act(observation)
        first = next(iter(self.metadata.action.joints))
        chunk.joints[first] = np.array(chunk.joints[first], dtype=float)[:, :-1]
        return chunk


@scripted_policy("not_a_number")
def make_not_a_number(params, defaults):
    return _NotANumber(make_hold(params, defaults).metadata)


@scripted_policy("short")
def make_short(params, defaults):
    return _Short(make_hold(params, defaults).metadata)
