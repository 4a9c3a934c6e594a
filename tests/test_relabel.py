"""Relabelling (DAgger): franka_block_in_bowl's expert in its state-feedback form acts from any
state of the task, and `r2s2r collect --relabel` writes its actions, not the acting policy's.

- from states the stage expert never visits (the arm first sent elsewhere with its gripper
  shut) the feedback law opens the gripper, picks the block and puts it in the bowl;
- a relabelled rollout's every action is what the feedback law commands from that frame's
  state, rebuilt from the dataset alone, while the acting policy held still.
"""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.data.collect import CollectOptions, collect
from r2s2r.data.lerobot_v3 import DatasetError, open_dataset
from r2s2r.eval.runner import TrialPool, TrialSpec, TrialWorker, plan_eval
from r2s2r.eval.tasks import load_task
from r2s2r.policy import Observation, PolicyMetadata, load_policy
from r2s2r.policy.loader import PolicyConfig
from r2s2r.policy.types import ActionChunk
from r2s2r.robots import get_robot

TASK = "franka_block_in_bowl"
FEEDBACK = PolicyConfig(uri=f"scripted:{TASK}", params={"feedback": True})
DETOUR_S = 2.0


class DetourThenExpert:
    """For DETOUR_S seconds the arm is sent away from home with its gripper shut, then the
    feedback law takes over from wherever that left the task."""

    def __init__(self, defaults: PolicyMetadata):
        self.feedback = load_policy(FEEDBACK, defaults)
        self.metadata = self.feedback.metadata
        self.stages: list[str] = []

    def reset(self) -> None:
        self.feedback.reset()
        self.stages = []

    def act(self, observation: Observation) -> ActionChunk:
        if observation.stamp < DETOUR_S:
            md = self.metadata
            joints = {g: np.repeat(np.asarray(observation.joints[g], float)[None], md.chunk_length, 0)
                      for g in md.action.joints}
            joints["arm"][:] = np.array([0.5, 0.3, -0.3, -1.6, 0.0, 1.9, 0.4])  # aside, low, turned
            grippers = {g: np.zeros(md.chunk_length) for g in md.action.grippers}
            return ActionChunk(observation.stamp, md.dt, joints, grippers)
        chunk = self.feedback.act(observation)
        if not self.stages or self.stages[-1] != self.feedback.stage:
            self.stages.append(self.feedback.stage)
        return chunk


def detour_then_expert(params, defaults):  # scripted:tests.test_relabel:detour_then_expert
    return DetourThenExpert(defaults)


def test_the_feedback_law_finishes_the_task_from_states_the_expert_never_visits():
    task = load_task(TASK)
    worker = TrialWorker()
    uri = "scripted:tests.test_relabel:detour_then_expert"
    robot = get_robot(task.robot)
    # Where the stage expert succeeds from home (a heavy, slippery block defeats both: that is
    # the expert's own failure, not this one's).
    drawn = [TrialSpec.of(uri, TASK, {}, 1)] + [p.spec for p in plan_eval(uri, task, 4, seed=11,
                                                                          envelope="operating")]
    feasible = [spec for spec in drawn
                if worker.run(TrialSpec.of(task.expert, TASK, spec.values, spec.seed)).success]
    assert len(feasible) >= 3
    for spec in feasible:
        result = worker.run(spec)
        policy, _ = worker.policy(uri, robot)
        assert result.success, (spec.values, result.stage, policy.stages)
        # Shut on nothing after the detour, the gripper is opened first; then the expert's stages in order.
        assert policy.stages[0] == "open" and policy.stages[-1] == "retreat", policy.stages
        order = [s for s in ("approach", "descend", "grasp", "lift", "move", "place", "release") if s in policy.stages]
        assert order == ["approach", "descend", "grasp", "lift", "move", "place", "release"], policy.stages


def test_relabelled_rollouts_hold_the_experts_actions_not_the_policys(tmp_path):
    task = load_task(TASK)
    options = CollectOptions(TASK, "scripted:hold", 1, seed=4, keep="all", envelope="operating", cameras=(),
                             privileged=True, relabel=True)
    with TrialPool(1) as pool:
        collect(options, tmp_path / "relabelled", pool, progress=False)
    dataset = open_dataset(tmp_path / "relabelled")
    assert dataset.episodes[0]["r2s2r/actions"] == f"{task.expert} (state feedback)"
    frames = dataset.episode(0, videos=False).frames
    states, actions, objects = (frames[k] for k in ("observation.state", "action", "observation.environment_state"))
    robot = get_robot(task.robot)
    defaults = PolicyMetadata.for_robot(robot)
    labeller = load_policy(FEEDBACK, defaults)
    labeller.reset()
    names = [f.rsplit(".", 1)[0] for f in dataset.features["observation.environment_state"].names][::7]
    arm = len(robot.group("arm").joints)
    for k in range(len(states)):
        observation = Observation(k / dataset.fps, {"arm": states[k, :arm].astype(float)},
                                  {robot.grippers[0].name: float(states[k, arm])},
                                  objects={n: (objects[k, 7 * i:7 * i + 3].astype(float),
                                               objects[k, 7 * i + 3:7 * i + 7].astype(float))
                                           for i, n in enumerate(names)})
        chunk = labeller.act(observation)
        expected = np.concatenate([chunk.joints["arm"][0], [chunk.grippers[robot.grippers[0].name][0]]])
        # float32 in the dataset, and the state it was labelled from rounded to float32 too
        np.testing.assert_allclose(actions[k], expected, atol=2e-3, err_msg=f"frame {k}")
    # The acting policy held still: its commands were the states; the labels move toward the block.
    assert np.abs(states - states[0]).max() < 0.01
    assert np.abs(actions[:, :arm] - states[:, :arm]).max(axis=1).min() > 0.01


def test_a_task_whose_expert_cannot_label_is_refused_by_name(tmp_path):
    options = CollectOptions("franka_cup_in_microwave", "scripted:hold", 1, keep="all", cameras=(), relabel=True)
    with TrialPool(1) as pool, pytest.raises(DatasetError, match="no state-feedback form"):
        collect(options, tmp_path / "refused", pool, progress=False)
