"""Tasks: loading with errors that say where, and each task's success predicate, margin, stage
classifier and early stop checked by hand on states built by setting qpos."""

import math
import textwrap

import mujoco
import numpy as np
import pytest

from r2s2r.config import ConfigError
from r2s2r.contract.types import CommandError, JointCommand
from r2s2r.eval.tasks import Outcome, Task, load_task, task_names
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.sim.twin import Twin
from r2s2r.skills.ik import ArmIK
from r2s2r.skills.stages import top_down

TASKS = ("aloha_cube_handover", "franka_block_in_bowl", "franka_cup_in_microwave")


def started(task: Task, perturbation=None) -> Twin:
    task.new_episode(perturbation)
    twin = Twin(task.scene(perturbation))
    task.start(twin)
    return twin


def place(twin: Twin, name: str, pos, quat=(1.0, 0.0, 0.0, 0.0)) -> None:
    """Teleport a free object (at rest) and recompute the state."""
    joint = twin.model.joint(f"{name}_free")
    adr, dof = joint.qposadr[0], joint.dofadr[0]
    twin.data.qpos[adr:adr + 7] = [*pos, *quat]
    twin.data.qvel[dof:dof + 6] = 0.0
    mujoco.mj_forward(twin.model, twin.data)


def settle(task: Task, twin: Twin, seconds: float) -> None:
    """Step physics and the task's tracking at the task's rate."""
    period = 1.0 / task.control_rate_hz
    for _ in range(int(round(seconds / period))):
        twin.step(int(round(period / twin.timestep)))
        task.step(twin)


def test_every_task_loads_with_its_scene_space_and_expert():
    assert set(TASKS) <= set(task_names())
    for name in TASKS:
        task = load_task(name)
        assert task.name == name and task.time_limit_s > 0 and task.control_rate_hz > 0
        assert task.robot == task.base_scene.robot and task.expert == f"scripted:{name}"
        assert task.perturbations.scene is task.base_scene and task.graspable
    assert load_task("config/tasks/franka_block_in_bowl.yaml").name == "franka_block_in_bowl"


@pytest.mark.parametrize("body,key,expected", [
    ("time_limit: 5\n", "time_limit", "one of the keys"),
    ("time_limit_s: -1\n", "time_limit_s", "a number greater than 0"),
    ("logic: no_such_module\n", "logic", "a module of r2s2r.eval.task_library"),
    ("logic: r2s2r.eval.tasks\n", "logic", "a module defining LOGIC"),
    ("graspable: [mug]\n", "graspable", "names of the scene's objects: block"),
    ("params: {object: block, container: bowl, colour: red}\n", "params.colour", "one of the keys"),
    ("params: {object: mug, container: bowl}\n", "params.object", "one of block"),
    ("params: {object: block, container: tray}\n", "params.container", "one of bowl"),
    ("scene: 3\n", "scene", "a scene mapping or the path of a scene YAML"),
])
def test_malformed_task_names_file_key_and_expectation(tmp_path, body, key, expected):
    base = {
        "name": "t", "logic": "block_in_bowl", "time_limit_s": 5, "graspable": "[block]",
        "params": "{object: block, container: bowl}",
        "scene": "\n  robot: franka_fr3\n  objects: [{name: block, shape: box, size: [0.05, 0.05, 0.05], "
                 "pos: [0.4, 0.1, 0.025]}]\n  fixtures: [{name: bowl, kind: bowl, pos: [0.4, -0.2, 0]}]",
    }
    override = body.split(":")[0]
    lines = [f"{k}: {v}" for k, v in base.items() if k != override] + [body.rstrip("\n")]
    path = tmp_path / "task.yaml"
    path.write_text(textwrap.dedent("\n".join(lines)) + "\n")
    with pytest.raises(ConfigError) as info:
        load_task(path)
    message = str(info.value)
    assert str(path) in message and key in message and expected in message


def test_an_unknown_task_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"expected a task name \(aloha_cube_handover, franka_block_in_bowl, "
                                          r"franka_cup_in_microwave.*\) or a task YAML, got 'stack_blocks'"):
        load_task("stack_blocks")


# -- franka_block_in_bowl ------------------------------------------------------------------------------
def bowl_floor(twin, bowl="bowl"):
    f = next(f for f in twin.scene.fixtures if f.name == bowl)
    return twin.data.body(bowl).xpos.copy(), f


def test_block_resting_in_the_bowl_succeeds_with_a_positive_margin():
    task = load_task("franka_block_in_bowl")
    twin = started(task)
    centre, bowl = bowl_floor(twin)
    place(twin, "block", centre + [0.01, 0.0, bowl.wall + 0.025 + 0.002])
    settle(task, twin, 0.3)
    outcome = task.outcome(twin, timed_out=True)
    assert isinstance(outcome, Outcome) and outcome.success and outcome.stage == "success"
    # The nearest of: radius - offset (7 cm), rim - bottom (4.2 cm), finger clearance (capped 5 cm).
    assert outcome.margin == pytest.approx(bowl.height - bowl.wall, abs=2e-3)
    assert outcome.metrics["radial_margin"] == pytest.approx(bowl.radius - 0.01, abs=2e-3)


def test_block_beside_the_bowl_fails_by_its_distance_to_the_rim():
    task = load_task("franka_block_in_bowl")
    margins = []
    for distance in (0.12, 0.2, 0.3):
        twin = started(task)
        centre, bowl = bowl_floor(twin)
        place(twin, "block", [centre[0], centre[1] + distance, 0.025])
        settle(task, twin, 0.1)
        outcome = task.outcome(twin, timed_out=True)
        assert not outcome.success
        assert outcome.stage == "out_of_reach"  # the arm never came near it
        assert outcome.margin == pytest.approx(bowl.radius - distance, abs=1e-3)
        margins.append(outcome.margin)
    assert margins[0] > margins[1] > margins[2]


def test_block_held_above_the_bowl_is_not_in_it():
    task = load_task("franka_block_in_bowl")
    twin = started(task)
    centre, bowl = bowl_floor(twin)
    place(twin, "block", centre + [0, 0, bowl.height + 0.025 + 0.03])  # its bottom 3 cm over the rim
    outcome = task.outcome(twin, timed_out=True)
    assert not outcome.success and outcome.margin == pytest.approx(-0.03, abs=1e-6)


def test_success_ends_the_trial_once_held_and_a_block_off_the_table_ends_it_too():
    task = load_task("franka_block_in_bowl")
    twin = started(task)
    centre, bowl = bowl_floor(twin)
    place(twin, "block", centre + [0, 0, bowl.wall + 0.027])
    settle(task, twin, 0.3)
    assert not task.done(twin)  # in the bowl for 0.3 s: not yet settled
    settle(task, twin, 0.3)
    assert task.done(twin)
    twin = started(task)
    place(twin, "block", [1.3, 0.0, -0.2])
    task.step(twin)
    assert task.done(twin)


def test_pressing_the_hand_into_the_table_is_a_collision():
    """The command path refuses the pose (the collision check); setpoints written straight to the
    twin, as an outside shove would, press the hand in, and the task scores the collision."""
    task = load_task("franka_block_in_bowl")
    task.new_episode()
    hardware = SimHardware(task.scene())
    hardware.on_configure()
    task.start(hardware.twin)
    loop = ControlLoop(hardware, 250.0)
    loop.hold_here()
    ik = ArmIK(hardware.robot)
    home = hardware.robot.home_positions
    below = ik.solve([0.45, 0.35, -0.04], top_down(0.0), home, iterations=80).q
    with pytest.raises(CommandError, match="mm into table"):
        loop.controller.command_positions("arm", below, now=hardware.now)
    openings = loop.controller.gripper_openings()
    for s in np.linspace(0.0, 1.0, 500):  # 2 s from home into the table, then pressing
        hardware.write(JointCommand(hardware.robot.joint_names, home + s * (below - home)), openings)
        hardware.advance(4)
        task.step(hardware.twin)
    for _ in range(125):
        hardware.advance(4)
        task.step(hardware.twin)
    outcome = task.outcome(hardware.twin, timed_out=True)
    assert outcome.stage == "collision" and outcome.metrics["max_collision_force"] > 60.0


# -- franka_cup_in_microwave ----------------------------------------------------------------------------
def cup_in_box(twin, depth=0.12, upright=True):
    box = next(f for f in twin.scene.fixtures if f.name == "microwave")
    frame = twin.data.body("microwave")
    (x0, _), _, (z0, _) = box.inner_extent
    local = np.array([x0 + depth, 0.0, z0 + (0.05 if upright else 0.028) + 0.001])
    quat = (1.0, 0.0, 0.0, 0.0) if upright else (math.cos(math.pi / 4), math.sin(math.pi / 4), 0.0, 0.0)
    place(twin, "cup", frame.xpos + frame.xmat.reshape(3, 3) @ local, quat)
    return box


def set_door(twin, angle):
    twin.data.qpos[twin.model.joint("microwave_hinge").qposadr[0]] = angle
    mujoco.mj_forward(twin.model, twin.data)


def test_cup_inside_with_the_door_closed_succeeds():
    task = load_task("franka_cup_in_microwave")
    twin = started(task)
    box = cup_in_box(twin)
    set_door(twin, 0.0)
    settle(task, twin, 0.2)
    outcome = task.outcome(twin, timed_out=True)
    assert outcome.success and outcome.margin > 0.02
    assert outcome.metrics["door"] == pytest.approx(0.08 * box.door_width, abs=2e-3)


def test_cup_inside_with_the_door_open_fails_by_the_doors_opening():
    task = load_task("franka_cup_in_microwave")
    twin = started(task)
    box = cup_in_box(twin)
    settle(task, twin, 0.2)
    angle = task.logic.door_angle(twin)
    assert angle == pytest.approx(1.1, abs=1e-3)
    outcome = task.outcome(twin, timed_out=True)
    assert not outcome.success and outcome.stage == "door_not_closed"
    assert outcome.margin == pytest.approx((0.08 - angle) * box.door_width, rel=1e-6)


def test_cup_lying_on_its_side_is_knocked_over_and_a_cup_outside_is_not_placed():
    task = load_task("franka_cup_in_microwave")
    twin = started(task)
    cup_in_box(twin, upright=False)
    set_door(twin, 0.0)
    settle(task, twin, 0.2)
    outcome = task.outcome(twin, timed_out=True)
    assert not outcome.success and outcome.stage == "knocked_over" and outcome.metrics["upright"] < 0
    twin = started(task)
    set_door(twin, 0.0)
    outcome = task.outcome(twin, timed_out=True)
    assert not outcome.success and outcome.metrics["inside"] < 0 and outcome.metrics["door"] > 0


# -- aloha_cube_handover ---------------------------------------------------------------------------------
def test_a_cube_in_the_bowl_without_a_handover_is_no_success():
    task = load_task("aloha_cube_handover")
    twin = started(task)
    centre, bowl = bowl_floor(twin)
    place(twin, "cube", centre + [0, 0, bowl.wall + 0.0225 + 0.002])
    settle(task, twin, 1.0)
    assert not task.done(twin)
    outcome = task.outcome(twin, timed_out=True)
    assert not outcome.success and outcome.stage == "out_of_reach"
    assert outcome.metrics["radial_margin"] > 0.06 and outcome.metrics["handover"] < 0
    taker_tcp = twin.data.site("right_arm_tcp").xpos
    assert outcome.margin == pytest.approx(-np.linalg.norm(taker_tcp - twin.object_poses()["cube"][0]), abs=0.02)


# -- fixtures -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fixture,key,expected", [
    ("{name: f, kind: shelf, pos: [0.5, 0, 0]}", "fixtures[0].kind", "one of bowl, hinged_box"),
    ("{name: f, kind: bowl, pos: [0.5, 0, 0], door_angle: 1}", "fixtures[0].door_angle", "one of the keys"),
    ("{name: f, kind: bowl, pos: [0.5, 0, 0], height: 0.005}", "fixtures[0].height",
     "a height greater than the wall thickness"),
    ("{name: f, kind: hinged_box, pos: [0.5, 0, 0], door_angle: 3.0}", "fixtures[0].door_angle",
     "a number <= 2.8"),
    ("{name: f, kind: hinged_box, pos: [0.5, 0, 0], hinge: top}", "fixtures[0].hinge", "one of right, left"),
    ("{name: table_top, kind: bowl, pos: [0.5, 0, 0]}\n  - {name: table_top, kind: bowl, pos: [0.2, 0, 0]}",
     "objects", "unique object, fixture and camera names"),
])
def test_malformed_fixture_names_file_key_and_expectation(tmp_path, fixture, key, expected):
    from r2s2r.sim.scene import load_scene
    path = tmp_path / "scene.yaml"
    path.write_text(f"robot: franka_fr3\nfixtures:\n  - {fixture}\n")
    with pytest.raises(ConfigError) as info:
        load_scene(path)
    message = str(info.value)
    assert str(path) in message and key in message and expected in message


def test_the_hinged_door_swings_between_shut_and_its_limit_and_the_bowl_holds_a_block():
    task = load_task("franka_cup_in_microwave")
    twin = started(task)
    hinge = twin.model.joint("microwave_hinge")
    assert tuple(twin.model.jnt_range[hinge.id]) == pytest.approx((0.0, 2.8))
    set_door(twin, 0.0)
    door = twin.data.body("microwave_door")
    # Shut, the door's panel covers the opening: its centre on the box's front plane, mid-width.
    box = twin.data.body("microwave")
    centre = door.xpos + door.xmat.reshape(3, 3) @ twin.model.geom_pos[twin.model.geom("microwave_door").id]
    local = box.xmat.reshape(3, 3).T @ (centre - box.xpos)
    assert local == pytest.approx([-0.17 - 0.006, 0.0, 0.252], abs=1e-3)
    twin.data.qvel[hinge.dofadr[0]] = -2.0  # swung shut hard: the frame stops it
    twin.step(200)
    assert task.logic.door_angle(twin) > -0.02
    block = load_task("franka_block_in_bowl")
    twin = started(block)
    centre, bowl = bowl_floor(twin)
    place(twin, "block", centre + [0.015, 0.0, bowl.height + 0.1])  # dropped from 10 cm over the rim
    twin.step(800)
    pos = twin.object_poses()["block"][0]
    assert np.hypot(*(pos - centre)[:2]) < bowl.radius - 0.04  # caught by the walls, not beside them
    assert pos[2] == pytest.approx(centre[2] + bowl.wall + 0.025, abs=2e-3)  # resting on the bottom
