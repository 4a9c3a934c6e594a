"""A skill library's rules: "when <what the robot sees at the start> use <these skill parameters>".

A SKILLS.yaml (written by `r2s2r skills refine`, loaded by `scripted:<task>` with the parameter
`skills: SKILLS.yaml`):

    task: franka_block_in_bowl
    rules:
      - when: {block.yaw: [1.05, 1.5708]}      # perceived features, each within [low, high]
        use: {grasp_yaw: object}                # the expert's parameters (skills.experts)
        found: {cluster: missed_grasp, ...}     # what refinement measured; not read here

A condition names only what the robot can perceive: an object's or fixture's position
(`NAME.x`, `NAME.y`, metres, world frame) and yaw (`NAME.yaw`, radians about the vertical), and
an object's size (`NAME.size_x`, `NAME.size_y`, `NAME.size_z`: its bounding box's extents along
its own axes, metres), and the robot's own joints (`JOINT.position`, radians), read from the
first observation of the episode. Hidden quantities (mass, friction, gains) are never
conditions. The first rule whose conditions all hold chooses the parameters, over the policy's
own; with none, the expert runs as it is.

A rule without conditions (`when: {}`, at most one) holds everywhere: its parameters lie under
every other rule's and apply alone where no other rule holds. Refinement writes one when a
change helps where what sets the failures apart is hidden (a heavy or slippery block: a harder
grip) and breaks nothing over the whole space.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from r2s2r.config import Section, load_yaml
from r2s2r.policy.types import Observation, PolicyError
from r2s2r.skills.stages import yaw_of

POSE_FEATURES = ("x", "y", "yaw")
SIZE_FEATURES = ("size_x", "size_y", "size_z")
JOINT_FEATURE = "position"
FEATURES = POSE_FEATURES + SIZE_FEATURES + (JOINT_FEATURE,)
FEATURES_EXPECTED = "NAME.x, NAME.y, NAME.yaw, NAME.size_x, NAME.size_y, NAME.size_z or JOINT.position"
# Perturbation kinds whose value features perceive: kind -> the features of its target (a scale
# changes every extent of the object).
FEATURE_OF_KIND = {"object_x": ("x",), "object_y": ("y",), "object_yaw": ("yaw",),
                   "fixture_x": ("x",), "fixture_y": ("y",), "fixture_yaw": ("yaw",),
                   "object_scale": SIZE_FEATURES, "joint_offset": (JOINT_FEATURE,)}


def perceive(observation: Observation, feature: str, joints: Mapping[str, tuple[str, int]] | None = None) -> float:
    """The value of `feature` (FEATURES_EXPECTED) in what `observation` shows; `joints` places
    each joint of the robot in the observation (name -> (group, index))."""
    name, _, what = feature.rpartition(".")
    if what == JOINT_FEATURE:
        if not joints or name not in joints or joints[name][0] not in observation.joints:
            raise KeyError(f"feature {feature!r}: the observation gives the position of "
                           f"{', '.join(sorted(joints or {})) or 'no joint'}")
        group, index = joints[name]
        return float(np.asarray(observation.joints[group], float)[index])
    if what in SIZE_FEATURES:
        if name not in observation.object_sizes:
            raise KeyError(f"feature {feature!r}: the observation gives the size of "
                           f"{', '.join(sorted(observation.object_sizes)) or 'no object'} (sizes come from the "
                           "twin: the evaluation engine, or policy_node's privileged_poses in front of it)")
        return float(np.asarray(observation.object_sizes[name], float)[SIZE_FEATURES.index(what)])
    if what not in POSE_FEATURES or name not in observation.objects:
        raise KeyError(f"feature {feature!r}: expected {FEATURES_EXPECTED} of one of "
                       f"{', '.join(sorted(observation.objects)) or 'no object'}")
    pos, quat = observation.objects[name]
    return float(pos[0] if what == "x" else pos[1] if what == "y" else yaw_of(quat))


@dataclass(frozen=True)
class Rule:
    when: dict[str, tuple[float, float]]  # feature -> [low, high]
    use: dict  # the expert's parameters
    found: dict = field(default_factory=dict)  # what refinement measured

    def applies(self, observation: Observation, joints: Mapping[str, tuple[str, int]] | None = None) -> bool:
        for feature, (low, high) in self.when.items():
            value = perceive(observation, feature, joints)
            if feature.endswith(".yaw"):  # the same angle, in [low, low + 2 pi)
                value = low + (value - low) % (2 * math.pi)
            if not low - 1e-9 <= value <= high + 1e-9:
                return False
        return True

    def to_dict(self) -> dict:
        return {"when": {k: [float(a), float(b)] for k, (a, b) in self.when.items()}, "use": dict(self.use),
                "found": dict(self.found)}


def read_skills(path: str | Path) -> tuple[str, list[Rule]]:
    """(task, rules) of a SKILLS.yaml, checked."""
    top = Section(load_yaml(Path(path)), Path(path))
    top.reject_unknown({"task", "rules", "dropped", "description"})
    rules = []
    for sec in top.sections("rules") if top.has("rules") else []:
        sec.reject_unknown({"when", "use", "found"})
        when = {}
        for feature in sec.section("when").data:
            if feature.rpartition(".")[2] not in FEATURES:
                raise sec.error("when", f"features {FEATURES_EXPECTED} (what the robot perceives)", feature)
            low, high = sec.section("when").vector(feature, 2)
            if low > high:
                raise sec.error("when", f"[low, high] with low <= high for {feature}", [low, high])
            when[feature] = (float(low), float(high))
        if not when and any(not r.when for r in rules):
            raise sec.error("when", "at most one rule without conditions (it holds everywhere)", {})
        rules.append(Rule(when, dict(sec.section("use").data), dict(sec.section("found", {}).data)))
    return top.string("task"), rules


class RuleExpert:
    """An expert whose parameters the first applicable rule chooses at each episode's first
    observation; `build(overrides)` makes the expert with those parameters over its own. `robot`
    (a RobotSpec) places the joints a rule perceives."""

    def __init__(self, build: Callable[[Mapping], object], rules: list[Rule], robot=None):
        self.build, self.rules = build, rules
        self.joints = {} if robot is None else {j: (g.name, i) for g in robot.groups for i, j in enumerate(g.joints)}
        self.default = build({})
        metadata = self.default.metadata
        sized = tuple(sorted({f.rpartition(".")[0] for r in rules for f in r.when
                              if f.rpartition(".")[2] in SIZE_FEATURES}))
        # It perceives the sizes its rules name: policy_node waits for them as for the poses.
        self.metadata = replace(metadata, observation=replace(metadata.observation, object_sizes=sized))
        self._variants: dict[str, object] = {}  # built once: an expert compiles its IK model
        self.reset()

    def reset(self) -> None:
        self.current = None
        self.rule: Rule | None = None

    def act(self, observation: Observation):
        if self.current is None:
            base = next((r for r in self.rules if not r.when), None)  # holds everywhere, under the others
            try:
                self.rule = next((r for r in self.rules if r.when and r.applies(observation, self.joints)), base)
            except KeyError as exc:
                raise PolicyError(f"skill rules: {exc.args[0]}") from None
            use = {**(base.use if base else {}), **(self.rule.use if self.rule else {})}
            self.current = self._variant(use) if use else self.default
            self.current.reset()
        return self.current.act(observation)

    def _variant(self, use: Mapping):
        key = json.dumps(use, sort_keys=True)
        if key not in self._variants:
            self._variants[key] = self.build(use)
        return self._variants[key]


__all__ = ["Rule", "RuleExpert", "read_skills", "perceive", "FEATURES", "SIZE_FEATURES", "JOINT_FEATURE",
           "FEATURE_OF_KIND"]
