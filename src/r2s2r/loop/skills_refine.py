"""`r2s2r skills refine`: rules that fix the expert where its failure atlas says it fails.

    refined = refine_skills(RefineConfig(task="franka_block_in_bowl", budget=300), "refine_out", workers=2)
    refined.skills       # refine_out/SKILLS.yaml, for scripted:franka_block_in_bowl with skills: SKILLS.yaml

1. A failure search of the task's expert (the current skill program), and its atlas.
2. For each failure cluster, largest first: its conditions on what the robot can perceive
   (objects' and fixtures' positions and yaw, objects' sizes, the arm's joints at the start:
   skills.rules.FEATURE_OF_KIND) become the rule's condition; the other conditions (mass,
   friction, light ...) are dropped from it, since the robot cannot see them.
3. Each of the skill's parameter alternatives (VARIANTS: grasp axis, grasp depth, closing
   force, transport speed, recovery) runs on the same trials drawn where the condition holds;
   the best, if it beats the expert there, is the rule's candidate.
4. The candidate is validated on fresh trials drawn where the condition holds: it is kept only
   if it succeeds more often than the expert on them, significantly (McNemar's exact test on
   the same trials). Otherwise it is dropped, and SKILLS.yaml says why.

Before the clusters, changes for everywhere: the alternatives run on the search's failures
(wherever they are: a block too heavy or slippery to see is in no region a condition can name).
The few that beat the expert there most (EVERYWHERE_CANDIDATES) are validated in turn, each on
its own fresh trials over the whole space (EVERYWHERE_VALIDATION times `validation_trials`), by
the same test at alpha divided among them; the first to pass is kept. Rounds repeat over the
changes kept (at most `everywhere_rounds`, 0 for none) until none passes. The changes make one
rule without conditions, and the clusters' candidates are searched and validated against the
expert with it.

Trials are stored in OUT/trials.sqlite, so a killed refinement resumes without rerunning them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import yaml

from r2s2r.eval.runner import Planned, TrialPool, TrialSpec, run_trials, trial_seed
from r2s2r.eval.stats import mcnemar_exact
from r2s2r.eval.store import TrialStore
from r2s2r.eval.tasks import load_task
from r2s2r.processes import sole_writer
from r2s2r.search.campaign import SearchSpace, run_search
from r2s2r.robots import get_robot
from r2s2r.skills.rules import FEATURE_OF_KIND, JOINT_FEATURE, SIZE_FEATURES, Rule
from r2s2r.skills.stages import yaw_of

# The skill parameters' alternatives, one change from the expert's defaults each (skills.experts).
VARIANTS = {
    "franka_block_in_bowl": [{"grasp_yaw": "object"}, {"grasp_offset": 0.01}, {"grasp_offset": -0.01},
                             {"squeeze": 0.02}, {"squeeze": 0.03}, {"speed": 0.15}, {"grasp_retries": 1}],
}
SKILLS_FILE = "SKILLS.yaml"
EVERYWHERE = 2**20  # the rule for everywhere's stream of draws, apart from every cluster's
# Its validation draws this many times --validation-trials over the whole space: a change that
# helps a tenth of the space needs that many to show it.
EVERYWHERE_VALIDATION = 3
EVERYWHERE_ROUNDS = 3  # changes kept for everywhere, at most, by default
EVERYWHERE_CANDIDATES = 3  # alternatives validated over the whole space per round, at most


class _Plain(yaml.SafeDumper):
    """Each value written out where it stands (no &anchors for repeated ones): a file to read."""

    def ignore_aliases(self, data) -> bool:
        return True


class RefineError(ValueError):
    """A refinement cannot start; the message says what is wrong and what was expected."""


@dataclass(frozen=True)
class RefineConfig:
    task: str
    budget: int = 300  # failure-search trials of the expert
    sampler: str = "uniform"
    factors: tuple[str, ...] | None = None  # None: every factor of the space (or envelope)
    envelope: str | None = None
    trials_per_variant: int = 20  # trials where a rule's condition holds, per alternative
    validation_trials: int = 40  # fresh trials where it holds, to keep or drop the rule
    max_rules: int = 5
    everywhere_rounds: int = EVERYWHERE_ROUNDS  # changes for everywhere kept, at most (0: none tried)
    alpha: float = 0.05
    seed: int = 0


@dataclass
class Refined:
    skills: Path
    rules: list[Rule]
    dropped: list[dict] = field(default_factory=list)


def perceivable_condition(cluster, space: SearchSpace, scene) -> dict[str, tuple[float, float]]:
    """The cluster's conditions on what the robot perceives, as feature bounds in the world."""
    when = {}
    home = get_robot(scene.robot).home
    for condition in cluster.conditions:
        factor = space.space.factor(condition.factor)
        body = next((b for b in (*scene.objects, *scene.fixtures) if b.name == factor.target), None)
        if body is None and factor.target not in home:
            continue
        for feature in FEATURE_OF_KIND.get(factor.kind, ()):
            if feature == JOINT_FEATURE:  # an offset from the joint's home position
                low, high = home[factor.target] + condition.low, home[factor.target] + condition.high
            elif feature in SIZE_FEATURES:  # a scale of the nominal extents
                nominal = body.extents[SIZE_FEATURES.index(feature)]
                low, high = nominal * condition.low, nominal * condition.high
            else:  # an offset from the nominal pose
                yaw = body.yaw if hasattr(body, "yaw") else yaw_of(body.quat)  # a fixture's yaw, an object's quaternion
                nominal = {"x": body.pos[0], "y": body.pos[1], "yaw": yaw}[feature]
                low, high = nominal + condition.low, nominal + condition.high
            key = f"{factor.target}.{feature}"
            if key in when:  # two factors on one feature: where both hold
                low, high = max(low, when[key][0]), min(high, when[key][1])
            when[key] = (float(low), float(high))
    return when


def _region(cluster, space: SearchSpace, count: int, rng: np.random.Generator) -> list[dict]:
    """`count` perturbations drawn uniformly over the space, the cluster's perceivable factors
    within its bounds: where its rule would fire (None: the whole space)."""
    low, high = np.zeros(space.dim), np.ones(space.dim)
    for condition in cluster.conditions if cluster is not None else ():
        if FEATURE_OF_KIND.get(space.space.factor(condition.factor).kind):
            i = space.names.index(condition.factor)
            low[i], high[i] = condition.unit_low, condition.unit_high
    return [space.values(rng.uniform(low, high)) for _ in range(count)]


def refine_skills(config: RefineConfig, out: str | Path, workers: int = 1, progress: bool = True) -> Refined:
    with sole_writer(Path(out).resolve(), "r2s2r skills refine", RefineError) as folder:
        return _refine(config, Path(folder), workers, progress)


def _refine(config: RefineConfig, out: Path, workers: int, progress: bool) -> Refined:
    task = load_task(config.task)
    if task.name not in VARIANTS:
        raise RefineError(f"task {task.name}: no skill alternatives to search; expected one of {', '.join(VARIANTS)}")
    space = SearchSpace(task.perturbations, config.factors, config.envelope)
    store = TrialStore(out / "trials.sqlite")
    variants_dir = out / "variants"
    variants_dir.mkdir(exist_ok=True)

    def policy_with(params: dict) -> str:
        """The expert with `params` over its own defaults, as a policy file (the expert for none)."""
        if not params:
            return task.expert
        text = yaml.safe_dump({"uri": task.expert, "params": params}, sort_keys=True)
        path = variants_dir / f"variant_{hashlib.sha256(text.encode()).hexdigest()[:10]}.yaml"
        if not path.is_file():
            path.write_text(text)
        return str(path)

    rules, dropped = [], []
    base: dict = {}  # the parameters of the rule that holds everywhere, once one is kept
    with TrialPool(workers) as pool:
        search = run_search(task, task.expert, config.budget, config.sampler, config.seed, factors=space.names,
                            envelope=config.envelope, store=store, pool=pool, progress=progress)

        def run(policy: str, points: list[dict], seed: int, name: str) -> list[bool]:
            name = f"{name}-{Path(policy).stem}"
            planned = [Planned(i, TrialSpec.of(policy, task.name, p, trial_seed(seed, i)), "refine")
                       for i, p in enumerate(points)]
            store.open_campaign(name, {"kind": "skills refine", "policy": policy, "seed": seed, "trials": len(points)})
            return [r.success for r in run_trials(planned, store, name, pool=pool, progress=progress)]

        def compare(before: list[bool], after: list[bool]) -> tuple[int, int, float]:
            fixed = sum(a and not b for a, b in zip(after, before))
            broke = sum(b and not a for a, b in zip(after, before))
            return fixed, broke, float(mcnemar_exact(fixed, broke))

        def alternatives_that_beat(points: list[dict], seed: int, label: str) -> tuple[dict, list[dict]]:
            """What the expert (with `base`) and each alternative do on `points`; those that beat the
            expert there, best first."""
            before = sum(run(policy_with(base), points, seed, label))
            scores = [(sum(run(policy_with({**base, **params}), points, seed, label)), params)
                      for params in VARIANTS[task.name]]
            search_entry = {"trials": len(points), "expert": before,
                            "alternatives": [{"use": p, "successes": k} for k, p in scores]}
            ranked = sorted((s for s in scores if s[0] > before), key=lambda s: -s[0])  # stable: VARIANTS' order on ties
            return search_entry, [params for _, params in ranked]

        def best_alternative(points: list[dict], seed: int, label: str) -> tuple[dict, dict | None]:
            entry, better = alternatives_that_beat(points, seed, label)
            return entry, (better[0] if better else None)

        def validate(points: list[dict], seed: int, label: str, use: dict, alpha: float) -> tuple[dict, str | None]:
            """The expert (with `base`) against it with `use` on fresh `points`; why it is dropped, or None."""
            before = run(policy_with(base), points, seed, label)
            after = run(policy_with({**base, **use}), points, seed, label)
            fixed, broke, p_value = compare(before, after)
            validation = {"trials": len(points), "expert": sum(before), "with_rule": sum(after), "p_value": p_value}
            if fixed > broke and p_value < alpha:
                return validation, None
            return validation, (f"did not help on {len(points)} fresh trials (expert {sum(before)}, with the rule "
                                f"{sum(after)}, p = {p_value:.3g})")

        # First, changes for everywhere (a harder grip for blocks too heavy or slippery to see): each
        # round tries the alternatives on the search's failures over the changes kept so far, and
        # keeps the first of the best that helps over the whole space; the rounds end when none does.
        failures = [dict(r.perturbation) for r in search.results if not r.success]
        everywhere: dict = {"cluster": "everywhere", "stage": "any", "size": len(failures),
                            "conditions": "the search's failures, wherever they are", "rounds": []}
        for round_ in range(config.everywhere_rounds):
            rng = np.random.default_rng([config.seed, EVERYWHERE, round_, 1])
            picked = [failures[i] for i in rng.permutation(len(failures))[:2 * config.trials_per_variant]]
            entry, better = alternatives_that_beat(picked, int(rng.integers(2**31)), f"refine-everywhere-{round_}")
            # The few best each get fresh draws over the whole space; testing several, each must
            # pass at alpha shared among them (Bonferroni).
            candidates = better[:EVERYWHERE_CANDIDATES]
            entry["why"] = "no alternative beat the expert on the search's failures"
            entry["validations"] = []
            best = None
            for k, use in enumerate(candidates):
                rng = np.random.default_rng([config.seed, EVERYWHERE, round_, 2, k])
                anywhere = _region(None, space, EVERYWHERE_VALIDATION * config.validation_trials, rng)
                validation, why = validate(anywhere, int(rng.integers(2**31)), f"validate-everywhere-{round_}-{k}",
                                           use, config.alpha / len(candidates))
                entry["validations"].append({"use": use, **validation})
                entry["why"] = None if why is None else why + " over the whole space"
                if why is None:
                    best = use
                    entry["use"], entry["validation"] = use, validation
                    break
            everywhere["rounds"].append(entry)
            if best is None:
                break
            base = {**base, **best}
        if base:
            everywhere["validation"] = [r["validation"] for r in everywhere["rounds"] if r["why"] is None]
            rules.append(Rule({}, dict(base), everywhere))
        elif everywhere["rounds"]:
            dropped.append({**everywhere, "why": everywhere["rounds"][-1]["why"]})

        # Then a rule per failure region the robot can tell apart, over the expert with that change.
        for cluster in search.atlas.clusters[:config.max_rules]:
            entry = {"cluster": int(cluster.index), "stage": str(cluster.stage), "size": int(cluster.size),
                     "conditions": cluster.describe()}
            when = perceivable_condition(cluster, space, task.base_scene)
            if not when:
                dropped.append({**entry, "why": "no perceivable condition (the robot cannot see what sets it apart)"})
                continue
            rng = np.random.default_rng([config.seed, cluster.index, 1])
            points = _region(cluster, space, config.trials_per_variant, rng)
            entry["search"], best = best_alternative(points, int(rng.integers(2**31)), f"refine-{cluster.index}")
            if best is None:
                dropped.append({**entry, "why": "no alternative beat the expert where the condition holds"})
                continue
            held = _region(cluster, space, config.validation_trials, np.random.default_rng([config.seed, cluster.index, 2]))
            held_seed = int(np.random.default_rng([config.seed, cluster.index, 3]).integers(2**31))
            validation, why = validate(held, held_seed, f"validate-{cluster.index}", best, config.alpha)
            found = {**entry, "use": best, "validation": validation}
            if why is None:
                rules.append(Rule(when, dict(best), found))
            else:
                dropped.append({**found, "why": why})
    store.close()
    path = out / SKILLS_FILE
    path.write_text(f"# r2s2r skills refine: {len(rules)} rules for {task.name} (docs/closed_loop.md)\n" + yaml.dump(
        {"task": task.name, "rules": [r.to_dict() for r in rules], "dropped": dropped}, Dumper=_Plain,
        sort_keys=False))
    (out / "refine.json").write_text(json.dumps({"config": asdict(config), "rules": [r.to_dict() for r in rules],
                                                 "dropped": dropped}, indent=1, default=str))
    return Refined(path, rules, dropped)


__all__ = ["RefineConfig", "Refined", "RefineError", "refine_skills", "perceivable_condition", "VARIANTS"]
