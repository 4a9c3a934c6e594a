"""Scripted policies that fail to act, for the evaluation engine's tests: reached as
`scripted:tests.failing_policies:<name>` (the runner imports this module by that name).

- overshoot: holds, but asks its first joint for 10 rad beyond where it stands (outside the limits);
- raises: raises on every call (the runtime holds the arm);
- not_a_number: holds, but its first joint's target is NaN;
- short: holds, but its chunk gives the first group one joint too few;
- reset_raises: holds, but its reset (a new episode: ~/start, ~/reset) raises.
"""

from __future__ import annotations

import numpy as np

from r2s2r.policy.scripted import HoldPolicy, make_hold


class _ChangesFirstGroup(HoldPolicy):
    """Holds, with the first group's targets (length, joints) passed through `change`."""

    change = staticmethod(lambda targets: targets)

    def act(self, observation):
        chunk = super().act(observation)
        first = next(iter(self.metadata.action.joints))
        chunk.joints[first] = self.change(np.array(chunk.joints[first], dtype=float))
        return chunk


class _Overshoot(_ChangesFirstGroup):
    change = staticmethod(lambda targets: targets + np.eye(1, targets.shape[1]) * 10.0)


class _NotANumber(_ChangesFirstGroup):
    change = staticmethod(lambda targets: np.where(np.arange(targets.shape[1]) == 0, np.nan, targets))


class _Short(_ChangesFirstGroup):
    change = staticmethod(lambda targets: targets[:, :-1])


class _Raises(HoldPolicy):
    def act(self, observation):
        raise RuntimeError("the test policy's network failed")


class _ResetRaises(HoldPolicy):
    def reset(self):
        raise RuntimeError("the test policy's server refused the new episode")


def _factory(cls):
    return lambda params, defaults: cls(make_hold(params, defaults).metadata)


# scripted:failing_policies:<name>
overshoot, raises, not_a_number, short, reset_raises = map(_factory, (_Overshoot, _Raises, _NotANumber, _Short,
                                                                      _ResetRaises))
