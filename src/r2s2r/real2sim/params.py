"""The twin's physical parameters that alignment fits, by name, applied to a compiled MjModel.

Names (`<group>` a joint group of the robot, `<object>` an object of the scene):

| name | what it sets | unit | nominal |
|---|---|---|---|
| `<group>.kp_scale` | position-actuator stiffness of every joint of the group, times its RobotSpec value | - | 1 |
| `<group>.kv_scale` | position-actuator damping, times its RobotSpec value | - | 1 |
| `<group>.damping_scale` | passive joint damping, times its RobotSpec value | - | 1 |
| `<group>.armature_scale` | reflected rotor inertia, times its RobotSpec value | - | 1 |
| `<group>.frictionloss` | dry friction of every joint of the group | N m | the RobotSpec's mean |
| `<group>.inertia_scale` | mass and inertia of every link the group moves | - | 1 |
| `latency_s` | delay between a command's recorded time and its effect | s | 0 |
| `<object>.mass` | the object's mass (its inertia scales with it) | kg | the scene's |
| `<object>.friction` | the object's sliding friction, against everything it touches | - | the scene's |

Changing them on the compiled model (rather than recompiling a spec) costs microseconds, so
a fit can try thousands of candidates. Objects get geom priority 2 in every twin alignment
builds, above the finger pads' 1: an object's own friction then governs both its grip and
its sliding, the convention eval.tasks uses for graspable objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import mujoco
import numpy as np

from r2s2r.robots import RobotSpec
from r2s2r.robots.model import joint_bodies, subtree
from r2s2r.sim.dynamics import write_joint_dynamics

OBJECT_PRIORITY = 2
GROUP_KINDS = ("kp_scale", "kv_scale", "damping_scale", "armature_scale", "frictionloss", "inertia_scale")
OBJECT_KINDS = ("mass", "friction")
UNITS = {"kp_scale": "", "kv_scale": "", "damping_scale": "", "armature_scale": "", "frictionloss": "N m",
         "inertia_scale": "", "latency_s": "s", "mass": "kg", "friction": ""}


@dataclass(frozen=True)
class ParameterInfo:
    name: str
    kind: str
    target: str | None  # group or object; None for latency
    nominal: float
    lower: float
    upper: float
    unit: str


def _subtree_bodies(model: mujoco.MjModel, joints) -> np.ndarray:
    """Bodies moved by any of `joints` (the joints' bodies and everything below them)."""
    return np.flatnonzero(subtree(model, joint_bodies(model, joints)))


class TwinParameters:
    """Knows where each parameter lives in one compiled model and its nominal values there."""

    def __init__(self, model: mujoco.MjModel, robot: RobotSpec, objects=()):
        self.robot = robot
        self.objects = {o.name: o for o in objects if not o.fixed}
        m = model
        self._groups = {}
        for g in robot.groups:
            act = np.array([m.actuator(j).id for j in g.joints])
            dof = np.array([m.joint(j).dofadr[0] for j in g.joints])
            bodies = _subtree_bodies(m, g.joints)
            self._groups[g.name] = {"act": act, "dof": dof, "bodies": bodies}
        self._object_body = {n: m.body(n).id for n in self.objects}
        self._object_geom = {n: m.geom(n).id for n in self.objects}
        self.nominal_model = {
            "gainprm": m.actuator_gainprm.copy(), "biasprm": m.actuator_biasprm.copy(),
            "damping": m.dof_damping.copy(), "armature": m.dof_armature.copy(),
            "frictionloss": m.dof_frictionloss.copy(), "mass": m.body_mass.copy(),
            "inertia": m.body_inertia.copy(), "friction": m.geom_friction.copy(),
        }

    # -- what there is ----------------------------------------------------------------------------
    def info(self, name: str) -> ParameterInfo:
        """Name, nominal and prior bounds of a parameter; an unknown name lists the known ones."""
        if name == "latency_s":
            return ParameterInfo(name, "latency_s", None, 0.0, 0.0, 0.1, "s")
        target, _, kind = name.rpartition(".")
        if target in self._groups and kind in GROUP_KINDS:
            if kind == "frictionloss":
                nominal = float(np.mean(self.nominal_model["frictionloss"][self._groups[target]["dof"]]))
                return ParameterInfo(name, kind, target, nominal, 0.0, max(5.0, 4 * nominal), "N m")
            lower, upper = (0.2, 5.0) if kind in ("kp_scale", "kv_scale") else (0.0, 10.0)
            if kind == "inertia_scale":
                lower, upper = 0.3, 3.0
            return ParameterInfo(name, kind, target, 1.0, lower, upper, "")
        if target in self.objects and kind in OBJECT_KINDS:
            obj = self.objects[target]
            if kind == "mass":
                return ParameterInfo(name, kind, target, obj.mass, 0.01, 5.0, "kg")
            return ParameterInfo(name, kind, target, obj.friction, 0.05, 2.5, "")
        raise KeyError(f"no twin parameter {name!r}; parameters are latency_s, "
                       + ", ".join(f"{g}.{k}" for g in self._groups for k in GROUP_KINDS) + ", "
                       + ", ".join(f"{o}.{k}" for o in self.objects for k in OBJECT_KINDS))

    def names(self, groups: bool = True, objects: bool = True) -> list[str]:
        out = ["latency_s"]
        if groups:
            out += [f"{g}.{k}" for g in self._groups for k in GROUP_KINDS]
        if objects:
            out += [f"{o}.{k}" for o in self.objects for k in OBJECT_KINDS]
        return out

    def nominal(self, names) -> dict[str, float]:
        return {n: self.info(n).nominal for n in names}

    # -- applying them ----------------------------------------------------------------------------
    def prepare(self, model: mujoco.MjModel) -> None:
        """Alignment's conventions on a freshly compiled model (object friction governs its contacts)."""
        for geom in self._object_geom.values():
            model.geom_priority[geom] = OBJECT_PRIORITY

    def apply(self, model: mujoco.MjModel, values: Mapping[str, float]) -> None:
        """Set every parameter to `values` (missing ones to nominal); latency is not a model
        field and is ignored here (replay shifts the setpoints by it)."""
        n = self.nominal_model
        model.actuator_gainprm[:] = n["gainprm"]
        model.actuator_biasprm[:] = n["biasprm"]
        model.dof_damping[:] = n["damping"]
        model.dof_armature[:] = n["armature"]
        model.dof_frictionloss[:] = n["frictionloss"]
        model.body_mass[:] = n["mass"]
        model.body_inertia[:] = n["inertia"]
        model.geom_friction[:] = n["friction"]
        for name, value in values.items():
            if name == "latency_s":
                continue
            info = self.info(name)
            value = float(value)
            if info.target in self._groups:
                idx = self._groups[info.target]
                act, dof = idx["act"], idx["dof"]
                if info.kind == "kp_scale":
                    write_joint_dynamics(model, act, dof, kp=n["gainprm"][act, 0] * value)
                elif info.kind == "kv_scale":
                    write_joint_dynamics(model, act, dof, kv=-n["biasprm"][act, 2] * value)
                elif info.kind == "damping_scale":
                    write_joint_dynamics(model, act, dof, damping=n["damping"][dof] * value)
                elif info.kind == "armature_scale":
                    write_joint_dynamics(model, act, dof, armature=n["armature"][dof] * value)
                elif info.kind == "frictionloss":
                    write_joint_dynamics(model, act, dof, frictionloss=value)
                elif info.kind == "inertia_scale":
                    bodies = idx["bodies"]
                    model.body_mass[bodies] = n["mass"][bodies] * value
                    model.body_inertia[bodies] = n["inertia"][bodies] * value
            else:
                if info.kind == "mass":
                    body = self._object_body[info.target]
                    ratio = value / n["mass"][body]
                    model.body_mass[body] = value
                    model.body_inertia[body] = n["inertia"][body] * ratio
                else:
                    model.geom_friction[self._object_geom[info.target], 0] = value

    def joint_values(self, values: Mapping[str, float]) -> dict[str, dict[str, float]]:
        """Per-joint kp, kv, damping, armature, frictionloss that `values` give (for the fitted
        dynamics file the twin loads)."""
        n = self.nominal_model
        scratch = {"gainprm": n["gainprm"].copy(), "biasprm": n["biasprm"].copy()}
        out = {}
        for g in self.robot.groups:
            idx = self._groups[g.name]
            for k, joint in enumerate(g.joints):
                a, d = idx["act"][k], idx["dof"][k]

                def get(kind, base, group=g.name):
                    return base * float(values.get(f"{group}.{kind}", 1.0))
                fl = values.get(f"{g.name}.frictionloss")
                out[joint] = {"kp": get("kp_scale", float(scratch["gainprm"][a, 0])),
                              "kv": get("kv_scale", float(-scratch["biasprm"][a, 2])),
                              "damping": get("damping_scale", float(n["damping"][d])),
                              "armature": get("armature_scale", float(n["armature"][d])),
                              "frictionloss": float(n["frictionloss"][d]) if fl is None else float(fl)}
        return out


__all__ = ["TwinParameters", "ParameterInfo", "GROUP_KINDS", "OBJECT_KINDS", "OBJECT_PRIORITY"]
