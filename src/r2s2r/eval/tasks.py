"""Tasks: a scene, a perturbation space, a time limit and a module that judges each trial.

A task file (config/tasks/<name>.yaml):

    name: franka_block_in_bowl
    description: pick the block from the table and place it in the bowl
    logic: block_in_bowl          # a module of r2s2r.eval.task_library, or package.module
    time_limit_s: 12.0
    control_rate_hz: 20.0         # the policy's rate; the twin steps at the robot's own
    scene: {robot: franka_fr3, ...}                 # inline, or the path of a scene YAML
    perturbations: config/perturbations/franka_block_in_bowl.yaml
    graspable: [block]            # objects whose friction also governs their grip (see start())
    params: {object: block, container: bowl}        # what the logic module takes

One trial, as the runner drives it:

    task = load_task("franka_block_in_bowl")
    task.new_episode(perturbation)                # fresh tracking state, this trial's values
    driver = Driver(SimHardware(task.scene(perturbation), seed)); driver.start()
    task.start(driver.hardware.twin); driver.hold_here()  # gains, latency, initial joints; hold there
    every 1 / control_rate_hz: observation with objects=task.object_poses(twin) -> policy ->
        command -> driver.command_positions / command_gripper; driver.step(next tick); task.step(twin)
        stop when task.done(twin) or time_limit_s has passed
    outcome = task.outcome(twin, timed_out)

A Task object carries one episode's tracking state at a time: `new_episode()` resets it, so a
worker reuses one Task for many trials but never runs two trials on it at once.
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from r2s2r import paths, plugins
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.search.perturbations import PerturbationSpace, apply_runtime, load_space
from r2s2r.sim.scene import Scene, load_scene, parse_scene

LIBRARY = "r2s2r.eval.task_library"
# Finger pads take priority 1 (robots/model.py); above that an object's own friction decides its grip.
_GRIP_PRIORITY = 2


@dataclass(frozen=True)
class Outcome:
    success: bool
    margin: float  # > 0 succeeded by that much, < 0 failed by that much; units per task (docs/tasks.md)
    stage: str  # "success" or the failure stage
    metrics: dict[str, float] = field(default_factory=dict)


class TaskLogic(abc.ABC):
    """What a task module provides: one instance per episode, built by new_episode().

    Subclasses read their `params` in __init__ (errors name the task file and key) and
    implement outcome, usually step and done; start and object_poses have useful defaults.
    """

    def __init__(self, task: "Task", params: Section):
        self.task = task
        self.params = params

    def start(self, twin) -> None:  # noqa: B027 (an optional hook)
        """After the runtime settings are applied, before the first cycle."""

    def step(self, twin) -> None:  # noqa: B027 (an optional hook)
        """Once per policy tick (1 / control_rate_hz): track what outcome() needs. Keep it cheap."""

    def done(self, twin) -> bool:
        return False

    @abc.abstractmethod
    def outcome(self, twin, timed_out: bool) -> Outcome:
        """The trial's judgement from the privileged state now and what step() tracked."""

    def object_poses(self, twin) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Privileged poses (position, quaternion wxyz) a scripted expert may observe: the
        scene's objects and every fixture body (bowls, boxes, doors)."""
        return twin.object_poses() | twin.fixture_poses()

    def object_sizes(self, twin) -> dict[str, np.ndarray]:
        """The objects' bounding-box extents (m), which a scripted expert's rules may perceive."""
        return twin.object_sizes()


class Task:
    def __init__(self, name: str, scene: Scene, perturbations: PerturbationSpace, time_limit_s: float,
                 control_rate_hz: float, logic: type[TaskLogic], params: dict, graspable: tuple[str, ...] = (),
                 description: str = "", source: str = "<task>"):
        self.name = name
        self.base_scene = scene
        self.robot = scene.robot
        self.perturbations = perturbations
        self.time_limit_s = time_limit_s
        self.control_rate_hz = control_rate_hz
        self.logic_class = logic
        self.params = params
        self.graspable = graspable
        self.description = description
        self.source = source
        self.fixture_bodies = tuple(name for f in scene.fixtures for name in f.bodies)
        self.new_episode()

    @property
    def expert(self) -> str:
        """The policy URI of this task's scripted expert."""
        return f"scripted:{self.name}"

    # -- one episode ----------------------------------------------------------------------------
    def new_episode(self, perturbation: Mapping[str, float] | None = None) -> None:
        """Forget the last trial; the next one runs at `perturbation` (None: nominal)."""
        self.perturbation = self.perturbations.complete(perturbation)
        self.logic = self.logic_class(self, Section(self.params, self.source, "params"))

    def scene(self, perturbation: Mapping[str, float] | None = None) -> Scene:
        return self.perturbations.apply(self.base_scene, perturbation)

    def runtime(self, perturbation: Mapping[str, float] | None = None) -> dict:
        return self.perturbations.runtime(perturbation)

    def start(self, twin) -> None:
        """Per-trial set-up of a freshly reset twin built from scene(perturbation): actuator gains,
        command latency and initial joints of this episode's perturbation, graspable objects'
        grip friction.
        The runner then calls driver.hold_here() so the controller holds where the arm starts."""
        apply_runtime(twin, self.runtime(self.perturbation))
        for name in self.graspable:
            twin.model.geom_priority[twin.model.geom(name).id] = _GRIP_PRIORITY
        self.logic.start(twin)

    def step(self, twin) -> None:
        self.logic.step(twin)

    def done(self, twin) -> bool:
        return self.logic.done(twin)

    def outcome(self, twin, timed_out: bool) -> Outcome:
        return self.logic.outcome(twin, timed_out)

    def object_poses(self, twin) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return self.logic.object_poses(twin)

    def object_sizes(self, twin) -> dict[str, np.ndarray]:
        return self.logic.object_sizes(twin)


# -- loading ---------------------------------------------------------------------------------------
SHIPPED_TASKS = paths.config_path("tasks")  # r2s2r's own, registered as the `r2s2r` task folder


def task_files() -> dict[str, Path]:
    """Every registered task (the `r2s2r.tasks` plug-ins: folders of task YAMLs) by name; one
    name in two folders is an error that names both files."""
    found: dict[str, Path] = {}
    for folder_name in plugins.names("tasks"):
        folder = Path(plugins.load("tasks", folder_name))
        for path in sorted(folder.glob("*.yaml")):
            if path.stem in found:
                raise ConfigError(path, "", f"a task name of its own ({found[path.stem]} is task {path.stem!r} "
                                  "already)", path.stem)
            found[path.stem] = path
    return dict(sorted(found.items()))


def task_names() -> list[str]:
    return list(task_files())


def _beside(source: Path, name: str) -> Path:
    """A file a task names: relative to the task file's folder first, else as paths.resolve finds it."""
    path = source.parent / name
    return path if not Path(name).is_absolute() and path.is_file() else paths.resolve(name)


def _logic_class(top: Section) -> type[TaskLogic]:
    name = top.string("logic")
    module_name = name if "." in name else f"{LIBRARY}.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise top.error("logic", f"a module of {LIBRARY} or an importable package.module ({exc})", name) from None
    logic = getattr(module, "LOGIC", None)
    if not (isinstance(logic, type) and issubclass(logic, TaskLogic)):
        raise top.error("logic", f"a module defining LOGIC, a TaskLogic subclass ({module_name} does not)", name)
    return logic


SCENE_SEPARATOR = "@"  # TASK@SCENE.yaml: the task in another scene (a user's own cell)


def task_in_scene(task: str, scene: str | Path) -> str:
    """The reference of `task` run in the scene file `scene` (what trial specs and workers carry)."""
    return f"{task}{SCENE_SEPARATOR}{Path(scene).resolve()}"


def load_task(name_or_path: str | Path, scene: str | Path | None = None, skip_missing: bool = False) -> Task:
    """A task by name (config/tasks/<name>.yaml) or by path; errors name the file, key and expectation.

    `scene`: a scene file to run the task in instead of its own (a user's reconstructed or fitted
    cell); also given as TASK@SCENE.yaml. The task's perturbation space applies to it: factors that
    act on what the scene lacks are refused in one line naming them, or left out with
    `skip_missing` (a TASK@SCENE reference leaves them out: the command that made it checked)."""
    text = str(name_or_path)
    head, sep, tail = text.rpartition(SCENE_SEPARATOR)
    if sep and tail.endswith((".yaml", ".yml")) and scene is None:
        text, scene, skip_missing = head, tail, True
    if text.endswith((".yaml", ".yml")) or Path(text).is_file():
        path = paths.resolve(text)
    else:
        known = task_files()
        if text not in known:
            raise ConfigError("task", "", "a task name (" + ", ".join(known) + ") or a task YAML", text)
        path = known[text]
    top = Section(load_yaml(path), path)
    top.reject_unknown({"name", "description", "logic", "time_limit_s", "control_rate_hz", "scene",
                        "perturbations", "graspable", "params"})
    raw_scene = top.raw("scene")
    own_scene = scene is None  # the space was written for it: a factor that misses is the file's mistake
    if scene is not None:
        scene_path = paths.resolve(scene)
        if not scene_path.is_file():
            raise ConfigError(str(scene), "", "a scene YAML (what r2s2r reconstruct or align --fit writes)",
                              "no such file")
        scene = load_scene(scene_path)
    elif isinstance(raw_scene, str):
        scene = load_scene(_beside(path, raw_scene))
    elif isinstance(raw_scene, dict):
        scene = parse_scene(raw_scene, f"{path}: scene")
    else:
        raise top.error("scene", "a scene mapping or the path of a scene YAML", raw_scene)
    if top.has("perturbations"):
        space = load_space(_beside(path, top.string("perturbations")), scene, skip_missing=not own_scene)
        if space.skipped and not skip_missing:
            raise ConfigError(space.source, "factors", f"factors that apply to {scene.source}; "
                              + ", ".join(f"{n} ({why})" for n, why in space.skipped.items())
                              + " do not (--skip-missing-factors evaluates without them)")
    else:
        space = PerturbationSpace((), scene, f"{path}: perturbations")
    graspable = tuple(top.raw("graspable", []) or [])
    objects = [o.name for o in scene.objects]
    for name in graspable:
        if name not in objects:
            raise top.error("graspable", "names of the scene's objects: " + ", ".join(objects), name)
    params = top.raw("params", {}) or {}
    if not isinstance(params, dict):
        raise top.error("params", "a mapping of the task module's parameters", params)
    # Building the first episode checks the module's parameters against the scene.
    return Task(name=top.string("name", path.stem), scene=scene, perturbations=space,
                time_limit_s=top.number("time_limit_s", positive=True),
                control_rate_hz=top.number("control_rate_hz", 20.0, positive=True), logic=_logic_class(top),
                params=params, graspable=graspable, description=top.raw("description", "") or "",
                source=str(path))


__all__ = ["Outcome", "Task", "TaskLogic", "load_task", "task_in_scene", "task_names", "SCENE_SEPARATOR"]
