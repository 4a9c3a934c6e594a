"""The policy runtime against hand-computed expectations: chunk interpolation, ACT's temporal
ensembling, deadlines, stale observations, failing policies; and observation assembly."""

import math
import threading

import numpy as np
import pytest

from r2s2r.config import ConfigError
from r2s2r.contract import JointSample
from r2s2r.policy import (ActionChunk, ActionSpace, JointLayout, Observation, ObservationAssembler,
                          ObservationSpace, PolicyError, PolicyMetadata, PolicyRuntime, RuntimeConfig)
from r2s2r.robots import get_robot

DT = 0.1  # policy steps at 10 Hz
SPACE = ActionSpace({"arm": 1})
META = PolicyMetadata(ObservationSpace({"arm": 1}), SPACE, 1 / DT, 4)


def obs(stamp, q=0.0):
    return Observation(stamp, {"arm": np.array([q])})


class ScriptedChunks:
    """Returns chunk k (a list of 1-joint targets) on its k-th call; blocks on `gates[k]` if given."""

    def __init__(self, chunks, gates=None, error_on=None):
        self.metadata = META
        self.chunks = chunks
        self.gates = gates or {}
        self.error_on = error_on
        self.calls = []
        self._called = threading.Condition()

    def wait_calls(self, n):
        """Inference runs on the runtime's worker thread: wait until it has entered `act` n times."""
        with self._called:
            return self._called.wait_for(lambda: len(self.calls) >= n, timeout=10)

    def reset(self):
        pass

    def act(self, observation):
        with self._called:
            k = len(self.calls)
            self.calls.append(observation.stamp)
            self._called.notify_all()
        if k in self.gates:
            assert self.gates[k].wait(10)
        if k == self.error_on:
            raise PolicyError("model exploded")
        values = np.asarray(self.chunks[min(k, len(self.chunks) - 1)], float)[:, None]
        return ActionChunk.from_array(SPACE, values, observation.stamp, DT)


def arm(command):
    return float(command.joints["arm"][0])


A = [0.0, 1.0, 2.0, 3.0]
B = [10.0, 11.0, 12.0, 13.0]


def test_chunk_is_interpolated_to_the_control_rate_and_held_one_step_past_its_end():
    runtime = PolicyRuntime(ScriptedChunks([A]), RuntimeConfig(asynchronous=False, replan_steps=100))
    assert arm(runtime.step(0.0, obs(0.0))) == 0.0
    for t, expected in [(0.05, 0.5), (0.1, 1.0), (0.25, 2.5), (0.3, 3.0), (0.35, 3.0)]:
        command = runtime.step(t, obs(0.0))
        assert arm(command) == pytest.approx(expected) and not command.holding
    # Past stamp + 4 steps the chunk is spent: hold its last target and say why.
    command = runtime.step(0.41, obs(0.0))
    assert arm(command) == 3.0 and command.reason == "no chunk to execute"


@pytest.mark.parametrize("m", [0.01, 0.5])
def test_temporal_ensembling_weights_the_oldest_chunk_most(m):
    runtime = PolicyRuntime(ScriptedChunks([A, B]), RuntimeConfig(asynchronous=False, ensemble_coefficient=m))
    assert runtime.replan_steps == 1  # ensembling re-plans every policy step, as ACT does
    runtime.step(0.0, obs(0.0))  # chunk A, stamped 0.0
    w = math.exp(-m)
    # At 0.1 chunk B (stamped 0.1) arrives: A says 1.0 there, B says 10.0.
    assert arm(runtime.step(0.1, obs(0.1))) == pytest.approx((1.0 + 10.0 * w) / (1 + w))
    # Between policy steps both are interpolated, then combined: A 1.5, B 10.5.
    assert arm(runtime.step(0.15, obs(0.1))) == pytest.approx((1.5 + 10.5 * w) / (1 + w))


def test_without_ensembling_the_newest_chunk_wins():
    runtime = PolicyRuntime(ScriptedChunks([A, B]), RuntimeConfig(asynchronous=False, replan_steps=1))
    runtime.step(0.0, obs(0.0))
    assert arm(runtime.step(0.15, obs(0.1))) == pytest.approx(10.5)


def test_max_action_age_cuts_a_chunk_short():
    runtime = PolicyRuntime(ScriptedChunks([A]), RuntimeConfig(asynchronous=False, replan_steps=100,
                                                               max_action_age_s=0.2))
    runtime.step(0.0, obs(0.0))
    assert arm(runtime.step(0.15, obs(0.0))) == pytest.approx(1.5)
    command = runtime.step(0.2, obs(0.0))  # an action computed from an observation 0.2 s old: never sent
    assert command.holding and arm(command) == pytest.approx(1.5)


def test_stale_observation_is_not_inferred_from():
    policy = ScriptedChunks([A])
    runtime = PolicyRuntime(policy, RuntimeConfig(asynchronous=False, max_observation_age_s=0.1))
    command = runtime.step(5.0, obs(4.8, q=0.7))
    assert policy.calls == [] and runtime.stats.stale_observations == 1
    assert command.reason == "waiting for the first chunk" and arm(command) == 0.7  # holds where it is
    runtime.step(5.01, obs(4.8, q=0.7))
    assert runtime.stats.stale_observations == 1  # one stale observation counts once
    runtime.step(5.02, obs(4.95))
    assert policy.calls == [4.95]


def _deadline_run(on_miss):
    """Chunk A at t=0; the inference started at 0.2 hangs past the 0.15 s deadline."""
    gate = threading.Event()
    policy = ScriptedChunks([A, B], gates={1: gate})
    runtime = PolicyRuntime(policy, RuntimeConfig(deadline_s=0.15, on_deadline_miss=on_miss, replan_steps=2))
    runtime.step(0.0, obs(0.0))
    assert runtime.wait_idle(10)
    assert arm(runtime.step(0.1, obs(0.1))) == pytest.approx(1.0)
    runtime.step(0.2, obs(0.2))  # submits inference #2, which blocks
    assert policy.wait_calls(2)
    assert runtime.stats.deadline_misses == 0
    during = runtime.step(0.36, obs(0.3))  # 0.16 s in flight: a miss
    assert runtime.stats.deadline_misses == 1
    gate.set()
    assert runtime.wait_idle(10)
    after = runtime.step(0.38, obs(0.3))  # the late chunk B arrived: discarded, never executed
    assert runtime.stats.discarded == 1 and runtime.stats.inferences == 1
    return runtime, during, after


def test_deadline_miss_continue_keeps_executing_the_current_chunk():
    runtime, during, after = _deadline_run("continue")
    assert arm(during) == pytest.approx(3.0) and not during.holding  # chunk A at 0.36 (its last target)
    assert arm(after) == pytest.approx(3.0)
    assert runtime.step(0.41, obs(0.4)).reason == "no chunk to execute"  # A spent; a new inference is on its way


def test_deadline_miss_hold_holds_the_last_command_until_a_fresh_chunk():
    runtime, during, after = _deadline_run("hold")
    assert during.holding and "deadline miss" in during.reason
    assert arm(during) == arm(after) == pytest.approx(2.0)  # the command sent at t=0.2, from chunk A
    assert after.holding and runtime.fault == ""  # a miss holds, but the policy did not fail
    runtime.step(0.41, obs(0.4))  # the next inference (chunk B, stamped 0.4) ends the hold
    assert runtime.wait_idle(10)
    resumed = runtime.step(0.45, obs(0.4))
    assert not resumed.holding and arm(resumed) == pytest.approx(10.5)


def test_a_failing_policy_is_held_and_reported():
    policy = ScriptedChunks([A], error_on=1)
    runtime = PolicyRuntime(policy, RuntimeConfig(asynchronous=False, replan_steps=1))
    runtime.step(0.0, obs(0.0))
    command = runtime.step(0.1, obs(0.1))
    assert command.reason == "policy error: model exploded" and arm(command) == 0.0
    assert runtime.stats.errors == 1 and runtime.stats.last_error == "model exploded"
    assert runtime.fault == "model exploded"
    assert runtime.step(0.15, obs(0.1)).holding  # no chunk of the failed episode runs again


def test_a_chunk_of_the_wrong_layout_is_an_error_not_a_command():
    class WrongLayout(ScriptedChunks):
        def act(self, observation):
            return ActionChunk(observation.stamp, DT, {"left_arm": np.zeros((4, 1))})
    runtime = PolicyRuntime(WrongLayout([A]), RuntimeConfig(asynchronous=False))
    command = runtime.step(0.0, obs(0.0, q=0.3))
    assert "lacks group 'arm'" in command.reason and arm(command) == 0.3


def test_a_policy_that_returns_no_chunk_is_held_not_raised_into_the_loop():
    class NotAChunk(ScriptedChunks):
        def act(self, observation):
            return {"actions": [1.0]}
    runtime = PolicyRuntime(NotAChunk([A]))
    runtime.step(0.0, obs(0.0, q=0.4))
    assert runtime.wait_idle(10)
    command = runtime.step(0.01, obs(0.0, q=0.4))
    assert command.reason.startswith("policy error: AttributeError") and arm(command) == 0.4


def test_reset_forgets_chunks_and_ignores_the_inference_in_flight():
    gate = threading.Event()
    policy = ScriptedChunks([A, B], gates={0: gate})
    runtime = PolicyRuntime(policy)
    runtime.step(0.0, obs(0.0))
    runtime.reset()
    gate.set()
    assert runtime.wait_idle(10)
    command = runtime.step(0.05, obs(0.05, q=0.2))
    assert command.reason == "waiting for the first chunk" and arm(command) == 0.2
    assert runtime.stats.inferences == 0 and runtime.stats.discarded == 0


def test_runtime_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="on_deadline_miss: expected one of continue, hold, got 'skip'"):
        RuntimeConfig.from_dict({"on_deadline_miss": "skip"})
    with pytest.raises(ConfigError, match="deadline_s: expected a number greater than 0"):
        RuntimeConfig.from_dict({"deadline_s": 0})
    with pytest.raises(ConfigError, match="unknown key"):
        RuntimeConfig.from_dict({"deadline": 0.1})
    assert RuntimeConfig.from_dict({"ensemble_coefficient": 0.01}).ensemble_coefficient == 0.01


# -- observation assembly ------------------------------------------------------------------------------
FR3 = get_robot("franka_fr3")


def fr3_sample(stamp, arm_q, fingers=(0.01, 0.015)):
    names = FR3.group("arm").joints + FR3.gripper_joint_names
    position = np.concatenate([arm_q, fingers])
    return JointSample(stamp, names, position, np.zeros(9), np.zeros(9))


def test_joint_states_map_to_groups_and_gripper_openings():
    meta = PolicyMetadata.for_robot(FR3)
    assembler = ObservationAssembler(meta.observation, JointLayout.from_robot(FR3))
    assert assembler.latest() is None
    q = np.linspace(-0.5, 0.5, 7)
    assembler.add_joints(fr3_sample(3.0, q))
    observation = assembler.latest()
    assert observation.stamp == 3.0
    np.testing.assert_array_equal(observation.joints["arm"], q)
    assert observation.grippers["gripper"] == pytest.approx(0.025)  # the sum of the finger joints
    np.testing.assert_allclose(observation.state(meta.observation), [*q, 0.025])


def test_images_join_the_joint_state_and_the_observation_is_as_old_as_its_oldest_part():
    space = ObservationSpace({"arm": 7}, ("gripper",), {"wrist": None})
    assembler = ObservationAssembler(space, JointLayout.from_robot(FR3), tolerance_s=0.05)
    assembler.add_joints(fr3_sample(1.00, np.zeros(7)))
    assert assembler.latest() is None  # no image yet
    image = np.full((4, 6, 3), 7, np.uint8)
    assembler.add_image("wrist", 0.98, image)
    observation = assembler.latest()
    assert observation.stamp == pytest.approx(0.98)
    np.testing.assert_array_equal(observation.images["wrist"], image)
    with pytest.raises(PolicyError, match="camera 'scene' is not observed; the policy's cameras are wrist"):
        assembler.add_image("scene", 1.0, image)


def test_joint_states_without_the_robots_joints_are_rejected_by_name():
    assembler = ObservationAssembler(PolicyMetadata.for_robot(FR3).observation, JointLayout.from_robot(FR3))
    sample = JointSample(0.0, ("joint1",), [0.0], [0.0], [0.0])
    with pytest.raises(PolicyError, match=r"joint_states lacks joints \['fr3_joint1'"):
        assembler.add_joints(sample)


def test_a_policy_for_another_robot_layout_is_refused():
    space = ObservationSpace({"arm": 6}, ("gripper",))
    with pytest.raises(PolicyError, match="observes 6 joints in group 'arm'; the robot has 7"):
        ObservationAssembler(space, JointLayout.from_robot(FR3))
