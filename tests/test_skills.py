"""Skills: IK on the robot's own model, and the scripted experts of the evaluation tasks, run in
a minimal in-process loop: they succeed on the nominal scenes, fail with the right stage where
their weak spots are, and give the same outcome bit for bit for the same trial."""

import numpy as np
import pytest

from r2s2r.config import ConfigError
from r2s2r.eval.tasks import load_task
from r2s2r.policy import Observation, PolicyError, PolicyMetadata, load_policy
from r2s2r.robots import get_robot
from r2s2r.skills.ik import ArmIK
from r2s2r.skills.stages import line, min_jerk, slerp, top_down, yaw_of
from r2s2r.sim.twin import Twin
from tests.task_helpers import run_trial

FR3 = get_robot("franka_fr3")
TASKS = {name: load_task(name) for name in ("franka_block_in_bowl", "franka_cup_in_microwave",
                                            "aloha_cube_handover")}


# -- IK and paths ----------------------------------------------------------------------------------
@pytest.mark.parametrize("robot,group", [("franka_fr3", "arm"), ("aloha", "left_arm"), ("aloha", "right_arm")])
def test_ik_reaches_poses_fk_produced_from_nearby_seeds(robot, group):
    spec = get_robot(robot)
    ik = ArmIK(spec, group)
    home = np.array([spec.home[j] for j in spec.group(group).joints])
    rng = np.random.default_rng(7)
    for _ in range(10):
        goal_q = np.clip(home + rng.uniform(-0.3, 0.3, home.size), ik.lower, ik.upper)
        pos, rot = ik.fk(goal_q)
        result = ik.solve(pos, rot, home, iterations=100)
        assert result.reached(position_tol=1e-4, rotation_tol=1e-3), (result.position_error, result.rotation_error)
        got_pos, got_rot = ik.fk(result.q)
        np.testing.assert_allclose(got_pos, pos, atol=1e-4)
        assert np.all(result.q >= ik.lower) and np.all(result.q <= ik.upper)


def test_ik_beyond_reach_stretches_toward_the_goal_and_says_so():
    ik = ArmIK(FR3)
    result = ik.solve([1.2, 0.0, 0.2], top_down(0.0), FR3.home_positions, iterations=100)
    assert not result.reached() and result.position_error > 0.2
    reach, _ = ik.fk(result.q)
    assert np.linalg.norm(reach[:2]) > 0.8  # as far out as the arm goes


def test_ik_works_on_its_own_model_not_the_twins():
    twin = Twin(TASKS["franka_block_in_bowl"].scene())
    before = twin.data.qpos.copy()
    ik = ArmIK(FR3)
    ik.solve([0.5, 0.2, 0.1], top_down(0.3), FR3.home_positions, iterations=50)
    assert ik.model is not twin.model and np.array_equal(twin.data.qpos, before)
    # FK on the private model agrees with the twin's own TCP site.
    np.testing.assert_allclose(ik.fk(twin.arm_positions)[0], twin.site_pose("arm_tcp")[0], atol=1e-9)


def test_paths_are_minimum_jerk_lines_with_slerped_rotation():
    assert [min_jerk(s) for s in (0.0, 0.5, 1.0)] == [0.0, 0.5, 1.0]
    assert min_jerk(0.1) < 0.1 and min_jerk(-1) == 0.0 and min_jerk(2) == 1.0
    from r2s2r.skills.stages import Pose
    path = line(Pose(np.zeros(3), top_down(0.0)), Pose(np.array([0.2, 0.0, 0.0]), top_down(1.0)))
    mid = path(0.5)
    np.testing.assert_allclose(mid.pos, [0.1, 0, 0])
    from r2s2r.skills.ik import mat_to_quat
    assert yaw_of(mat_to_quat(mid.rot)) == pytest.approx(0.5)
    q = slerp(np.array([1.0, 0, 0, 0]), -np.array([np.cos(0.5), 0, 0, np.sin(0.5)]), 0.5)
    assert 2 * np.arctan2(q[3], q[0]) == pytest.approx(0.5)  # takes the short way round


# -- the experts -------------------------------------------------------------------------------------
def test_experts_load_by_task_name_and_command_every_group_at_the_tasks_rate():
    for name, task in TASKS.items():
        robot = get_robot(task.robot)
        policy = load_policy(f"scripted:{name}", PolicyMetadata.for_robot(robot))
        md = policy.metadata
        assert md.control_rate_hz == task.control_rate_hz and md.name == f"scripted:{name}"
        assert md.action.joints == {g.name: len(g.joints) for g in robot.groups}
        assert md.action.grippers == tuple(g.name for g in robot.grippers)
    with pytest.raises(Exception, match="speed: expected a number greater than 0"):
        load_policy("scripted:franka_block_in_bowl", None, {"speed": -1})


def test_an_expert_without_privileged_poses_says_what_it_needs():
    policy = load_policy("scripted:franka_block_in_bowl")
    observation = Observation(0.0, {"arm": FR3.home_positions}, {"gripper": 0.08})
    with pytest.raises(PolicyError, match=r"no pose of 'block'.*Observation.objects from Task.object_poses"):
        policy.act(observation)


@pytest.fixture(scope="module")
def nominal():
    return {name: run_trial(task, control_rate_hz=250.0) for name, task in TASKS.items()}


@pytest.mark.parametrize("name", list(TASKS))
def test_each_expert_succeeds_on_its_tasks_nominal_scene(nominal, name):
    trial = nominal[name]
    outcome = trial.outcome
    assert outcome.success and outcome.stage == "success" and outcome.margin > 0.01, outcome
    assert trial.twin.time < TASKS[name].time_limit_s  # it ended early, on success held
    assert trial.rejected == 0 and trial.policy.log.unreachable == []
    assert outcome.metrics["max_collision_force"] < 30.0


@pytest.mark.parametrize("name,perturbation,stage,limit", [
    # Beyond the arm's reach (0.95 m out): it never gets near.
    ("franka_block_in_bowl", {"block_x": 0.5}, "out_of_reach", 6.0),
    # Turned 75 deg: its 11 cm length across the 8 cm opening; the fingers land on top.
    ("franka_block_in_bowl", {"block_yaw": 1.3}, "missed_grasp", 6.0),
    # Smaller than the nominal width minus the squeeze: the fingers never close on it.
    ("franka_block_in_bowl", {"block_scale": 0.6}, "missed_grasp", 6.0),
    # Slippery, or heavy: it slides out as the arm lifts.
    ("franka_block_in_bowl", {"block_friction": 0.02}, "slip_or_drop", 6.0),
    ("franka_block_in_bowl", {"block_mass_scale": 20.0}, "slip_or_drop", 6.0),
    ("aloha_cube_handover", {"cube_friction": 0.03}, "slip_or_drop", 5.0),
    # A door nearly shut is in the cup's way: the cup is knocked off its place.
    ("franka_cup_in_microwave", {"door_angle": 0.4}, "missed_place", 11.0),
])
def test_experts_fail_at_their_weak_spots_with_the_right_stage(name, perturbation, stage, limit):
    outcome = run_trial(TASKS[name], perturbation, control_rate_hz=250.0, time_limit_s=limit).outcome
    assert not outcome.success and outcome.margin < 0
    assert outcome.stage == stage, outcome


def test_the_same_trial_gives_the_same_outcome_bit_for_bit(nominal):
    task = TASKS["franka_block_in_bowl"]
    perturbation = {"block_x": 0.05, "block_yaw": 0.3, "command_latency": 0.04, "actuator_gain": 0.7,
                    "joint1_offset": 0.1}
    first = run_trial(task, perturbation, seed=3, control_rate_hz=250.0)
    again = run_trial(task, perturbation, seed=3, control_rate_hz=250.0)
    assert first.outcome == again.outcome and first.outcome.success
    assert np.array_equal(first.twin.data.qpos, again.twin.data.qpos)
    assert first.policy.log.entries == again.policy.log.entries
    # And a different trial does differ: the perturbation is really applied.
    assert first.outcome.margin != nominal["franka_block_in_bowl"].outcome.margin


def test_the_study_policies_load_and_a_grasp_offset_beyond_the_block_is_refused(tmp_path):
    from pathlib import Path
    study = sorted(Path("config/policies/block_in_bowl_study").glob("*.yaml"))
    assert len(study) >= 6
    for path in study:
        assert load_policy(str(path)).metadata.name
    bad = tmp_path / "deep.yaml"
    bad.write_text("uri: scripted:franka_block_in_bowl\nparams: {grasp_offset: 0.04}\n")
    with pytest.raises((PolicyError, ConfigError), match="grasp_offset"):
        load_policy(str(bad))


def test_a_shallower_grasp_closes_the_fingers_higher_on_the_block(tmp_path):
    task = TASKS["franka_block_in_bowl"]
    above = {}
    for offset in (0.0, 0.018):
        path = tmp_path / f"offset_{offset}.yaml"
        path.write_text(f"uri: scripted:franka_block_in_bowl\nparams: {{grasp_offset: {offset}}}\n")
        # When the fingers start to close; then the same trial (deterministic) stopped just after.
        entries = run_trial(task, policy=load_policy(str(path)), control_rate_hz=250.0,
                            time_limit_s=6.0).policy.log.entries
        closing = next(t for t, stage in entries if stage == "grasp")
        trial = run_trial(task, policy=load_policy(str(path)), control_rate_hz=250.0, time_limit_s=closing + 0.2)
        tcp = trial.twin.data.site("arm_tcp").xpos
        above[offset] = tcp[2] - trial.twin.object_poses()["block"][0][2]
    assert above[0.018] - above[0.0] == pytest.approx(0.018, abs=0.004), above
