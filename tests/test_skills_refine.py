"""`r2s2r skills refine` (loop.skills_refine) and the rules it writes (skills.rules).

On franka_block_in_bowl searched over the block's yaw and reach: the block turned across the
fingers (long side 11 cm, the hand opens 8) is missed by the expert, which keeps its home yaw.
The refinement must find, by search, the alternative that turns the grasp, validate it, and
keep it as a rule on the block's perceived yaw; the cluster out of reach, which no alternative
fixes, is dropped. The expert loaded with the rules then succeeds where it failed, and runs
unchanged where no rule applies.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from types import SimpleNamespace

import numpy as np

from r2s2r.config import ConfigError
from r2s2r.eval.runner import TrialSpec, TrialWorker
from r2s2r.eval.store import TrialStore
from r2s2r.eval.tasks import load_task
from r2s2r.loop.skills_refine import RefineConfig, perceivable_condition, refine_skills
from r2s2r.policy import Observation, PolicyError, load_policy
from r2s2r.policy.loader import PolicyConfig
from r2s2r.robots import get_robot
from r2s2r.search.campaign import SearchSpace
from r2s2r.skills.rules import Rule, RuleExpert, read_skills

REPO = Path(__file__).resolve().parents[1]
TASK = "franka_block_in_bowl"


@pytest.fixture(scope="module")
def refined(tmp_path_factory):
    out = tmp_path_factory.mktemp("refine") / "SKILLS_refine"  # where `--out .../SKILLS.yaml` keeps its trials
    # No rule for everywhere here (turning every grasp would serve this space too): the rules on regions.
    config = RefineConfig(task=TASK, budget=30, factors=("block_yaw", "block_x"), trials_per_variant=4,
                          validation_trials=10, everywhere_rounds=0, seed=0)
    return refine_skills(config, out, workers=2, progress=False)


def test_the_search_finds_the_turned_grasp_and_drops_what_nothing_fixes(refined):
    assert refined.rules, refined.dropped
    for rule in refined.rules:
        # Found by the search among the alternatives, not written by hand; on what the robot sees.
        assert rule.use == {"grasp_yaw": "object"} and set(rule.when) <= {"block.yaw", "block.x"}
        low, high = rule.when["block.yaw"]
        assert min(abs(low), abs(high)) > 0.7  # the block turned well away from the fingers' home axis
        validation = rule.found["validation"]
        assert validation["with_rule"] > validation["expert"] and validation["p_value"] < 0.05
        assert rule.found["stage"] == "missed_grasp"
    unreachable = [d for d in refined.dropped if d["stage"] == "out_of_reach"]
    assert unreachable and all("no alternative beat the expert" in d["why"] for d in unreachable)
    task, rules = read_skills(refined.skills)
    assert task == TASK and [r.when for r in rules] == [r.when for r in refined.rules]


def test_the_expert_with_the_rules_grasps_the_turned_block(refined, tmp_path):
    config = tmp_path / "refined.yaml"
    config.write_text(yaml.safe_dump({"uri": f"scripted:{TASK}", "params": {"skills": str(refined.skills)}}))
    worker = TrialWorker()
    turned = {"block_yaw": 1.4, "block_x": 0.0}
    plain = worker.run(TrialSpec.of(f"scripted:{TASK}", TASK, turned, 3))
    with_rules = worker.run(TrialSpec.of(str(config), TASK, turned, 3))
    assert not plain.success and plain.stage == "missed_grasp"
    assert with_rules.success
    # The URI form, scripted:T?skills=SKILLS.yaml, loads the same rules.
    with_uri = worker.run(TrialSpec.of(f"scripted:{TASK}?skills={refined.skills}", TASK, turned, 3))
    assert with_uri.deterministic()[5:] == with_rules.deterministic()[5:]
    # Where no rule applies, the expert runs as it was.
    straight = {"block_yaw": 0.2, "block_x": 0.05}
    assert worker.run(TrialSpec.of(str(config), TASK, straight, 3)).deterministic()[5:] == \
        worker.run(TrialSpec.of(f"scripted:{TASK}", TASK, straight, 3)).deterministic()[5:]
    policy, _ = worker.policy(str(config), get_robot("franka_fr3"))
    assert policy.rule is None


def test_rules_name_only_what_the_robot_perceives_and_the_task_they_are_for(tmp_path):
    hidden = tmp_path / "hidden.yaml"
    hidden.write_text(yaml.safe_dump({"task": TASK, "rules": [{"when": {"block.mass": [1, 2]}, "use": {"speed": 0.1}}]}))
    with pytest.raises(ConfigError, match="NAME.x, NAME.y, NAME.yaw, NAME.size_x"):
        read_skills(hidden)
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"task": "franka_cup_in_microwave", "rules": []}))
    with pytest.raises(ConfigError, match="holds rules for franka_cup_in_microwave"):
        load_policy(PolicyConfig(uri=f"scripted:{TASK}", params={"skills": str(other)}))


def test_the_command_line_resumes_a_refinement_and_writes_the_skills_file(refined):
    out = refined.skills.parent.parent / "SKILLS.yaml"  # its trials in SKILLS_refine/: the fixture's, reused
    store = TrialStore(refined.skills.parent / "trials.sqlite")
    before = len(store.results())
    store.close()
    run = subprocess.run([sys.executable, "-m", "r2s2r.cli", "skills", "refine", "--task", TASK, "--factors",
                          "block_yaw,block_x", "--budget", "30", "--trials-per-variant", "4", "--validation-trials",
                          "10", "--everywhere-rounds", "0", "--workers", "2", "--no-progress", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "rule: when" in run.stdout and "dropped: cluster" in run.stdout
    assert read_skills(out)[1] == read_skills(refined.skills)[1]
    store = TrialStore(refined.skills.parent / "trials.sqlite")
    assert len(store.results()) == before  # nothing ran again: every trial was in the store
    store.close()


# The expert closes its fingers to the nominal block's width less 1 cm: a block scaled to 0.75 of
# its size (3.75 cm across) is never touched. A harder close (squeeze 2 cm) grasps it.
SMALL_BLOCK_RULE = {"task": TASK, "rules": [{"when": {"block.size_y": [0.02, 0.045]}, "use": {"squeeze": 0.02}}]}


def test_a_rule_on_the_blocks_perceived_size_grasps_a_small_block_and_leaves_the_others_alone(tmp_path):
    skills = tmp_path / "SKILLS.yaml"
    skills.write_text(yaml.safe_dump(SMALL_BLOCK_RULE))
    policy = f"scripted:{TASK}?skills={skills}"
    worker = TrialWorker()
    small = {"block_scale": 0.75}
    plain = worker.run(TrialSpec.of(f"scripted:{TASK}", TASK, small, 3))
    assert not plain.success and plain.stage == "missed_grasp"
    assert worker.run(TrialSpec.of(policy, TASK, small, 3)).success
    expert, _ = worker.policy(policy, get_robot("franka_fr3"))
    assert expert.rule is not None and expert.rule.use == {"squeeze": 0.02}
    # It says which sizes it perceives, so policy_node waits for them as for the poses.
    assert expert.metadata.observation.object_sizes == ("block",)
    nominal = {"block_scale": 1.0}
    assert worker.run(TrialSpec.of(policy, TASK, nominal, 3)).deterministic()[5:] == \
        worker.run(TrialSpec.of(f"scripted:{TASK}", TASK, nominal, 3)).deterministic()[5:]
    # Where nothing gives sizes, the rule cannot be judged: an error that says where sizes come from.
    loaded = load_policy(PolicyConfig(uri=f"scripted:{TASK}", params={"skills": str(skills)}))
    blind = Observation(0.0, {"arm": get_robot("franka_fr3").home_positions}, {"gripper": 0.08},
                        objects={"block": (np.array([0.45, 0.12, 0.025]), np.array([1.0, 0, 0, 0]))})
    with pytest.raises(PolicyError, match=r"block.size_y.*size of no object.*from the twin"):
        loaded.act(blind)


def test_a_cluster_of_scaled_blocks_becomes_a_condition_on_the_perceived_extents():
    task = load_task(TASK)
    space = SearchSpace(task.perturbations, None, None)
    cluster = SimpleNamespace(conditions=[SimpleNamespace(factor="block_scale", low=0.6, high=0.8),
                                          SimpleNamespace(factor="block_mass_scale", low=5.0, high=20.0)])
    when = perceivable_condition(cluster, space, task.base_scene)
    # The block is 11 x 5 x 5 cm: each extent scaled by the cluster's bounds; its mass, unseen, dropped.
    assert set(when) == {"block.size_x", "block.size_y", "block.size_z"}
    np.testing.assert_allclose(when["block.size_x"], (0.066, 0.088))
    np.testing.assert_allclose(when["block.size_y"], (0.03, 0.04))
    np.testing.assert_allclose(when["block.size_z"], (0.03, 0.04))


def test_a_rule_on_the_arms_start_perceives_its_own_joints(tmp_path):
    task = load_task(TASK)
    space = SearchSpace(task.perturbations, None, None)
    fr3 = get_robot("franka_fr3")
    cluster = SimpleNamespace(conditions=[SimpleNamespace(factor="joint1_offset", low=0.1, high=0.3)])
    when = perceivable_condition(cluster, space, task.base_scene)
    assert set(when) == {"fr3_joint1.position"}
    np.testing.assert_allclose(when["fr3_joint1.position"], (fr3.home["fr3_joint1"] + 0.1, fr3.home["fr3_joint1"] + 0.3))
    rule = {"when": {"fr3_joint1.position": list(when["fr3_joint1.position"])}, "use": {"speed": 0.15}}
    scene = {"block": (np.array([0.45, 0.12, 0.025]), np.array([1.0, 0, 0, 0])),
             "bowl": (np.array([0.45, -0.18, 0.0]), np.array([1.0, 0, 0, 0]))}

    def chosen(skills, joint1_offset):
        expert = load_policy(PolicyConfig(uri=f"scripted:{TASK}", params={"skills": str(skills)}))
        start = fr3.home_positions + np.eye(7)[0] * joint1_offset
        expert.act(Observation(0.0, {"arm": start}, {"gripper": 0.08}, objects=scene))
        return expert.rule

    skills = tmp_path / "SKILLS.yaml"
    skills.write_text(yaml.safe_dump({"task": TASK, "rules": [rule]}))
    assert chosen(skills, 0.2) is not None and chosen(skills, 0.2).use == {"speed": 0.15}
    assert chosen(skills, 0.0) is None and chosen(skills, 0.35) is None


def test_a_rule_without_conditions_lies_under_the_others_and_holds_where_none_does(tmp_path):
    built = []
    expert_itself = load_policy(PolicyConfig(uri=f"scripted:{TASK}"))

    def build(use):
        built.append(dict(use))
        return expert_itself

    turn = Rule({"block.yaw": (1.0, 2.0)}, {"grasp_yaw": "object"})
    harder = Rule({}, {"squeeze": 0.03})
    expert = RuleExpert(build, [harder, turn], get_robot("franka_fr3"))
    home = get_robot("franka_fr3").home_positions

    def first_action(yaw):
        expert.reset()
        quat = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
        expert.act(Observation(0.0, {"arm": home}, {"gripper": 0.08},
                               objects={"block": (np.array([0.45, 0.1, 0.025]), quat),
                                        "bowl": (np.array([0.45, -0.2, 0.0]), np.array([1.0, 0, 0, 0]))}))
        return built[-1], expert.rule

    # The conditioned rule wins where it holds, over the unconditioned one's parameters.
    assert first_action(1.4) == ({"squeeze": 0.03, "grasp_yaw": "object"}, turn)
    assert first_action(0.2) == ({"squeeze": 0.03}, harder)
    # One rule for everywhere at most: two would leave which one holds to their order.
    twice = tmp_path / "twice.yaml"
    twice.write_text(yaml.safe_dump({"task": TASK, "rules": [{"when": {}, "use": {"squeeze": 0.02}},
                                                             {"when": {}, "use": {"squeeze": 0.03}}]}))
    with pytest.raises(ConfigError, match="at most one rule without conditions"):
        read_skills(twice)


@pytest.fixture(scope="module")
def refined_hidden(tmp_path_factory):
    """Searched over the block's mass and friction alone: failures no condition can pick out."""
    out = tmp_path_factory.mktemp("refine_hidden") / "SKILLS_refine"
    config = RefineConfig(task=TASK, budget=30, factors=("block_mass_scale", "block_friction"), trials_per_variant=4,
                          validation_trials=16, max_rules=2, everywhere_rounds=1, seed=0)
    return refine_skills(config, out, workers=2, progress=False)


def test_a_failure_the_robot_cannot_see_gets_a_rule_for_everywhere(refined_hidden, tmp_path):
    assert [r.when for r in refined_hidden.rules] == [{}], refined_hidden.dropped
    rule = refined_hidden.rules[0]
    assert "squeeze" in rule.use  # a harder grip, found among the alternatives
    # Each change kept was tried on the search's failures, then was significantly better on fresh
    # trials over the whole space; the rounds end with one that found nothing more to keep.
    kept = rule.found["rounds"]
    assert len(kept) == 1 and kept[0]["why"] is None and kept[0]["use"] == rule.use
    for entry in kept:
        assert entry["trials"] == 8 and entry["expert"] < 8
        assert entry["validation"]["trials"] == 48
        assert entry["validation"]["with_rule"] > entry["validation"]["expert"]
        assert entry["validation"]["p_value"] < 0.05
    # The clusters, on mass and friction alone, get no rule of their own.
    assert all(d["why"].startswith("no perceivable condition") for d in refined_hidden.dropped)
    task, rules = read_skills(refined_hidden.skills)
    assert rules == refined_hidden.rules
