"""Scripted policies that fail to act, for the evaluation engine's tests: reached as
`scripted:tests.failing_policies:<name>` (the runner imports this module by that name).

- overshoot: holds, but asks its first joint for 10 rad beyond where it stands (outside the limits);
- raises: raises on every call (the runtime holds the arm).
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
