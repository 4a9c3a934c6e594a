"""Perturbation spaces: YAML with errors that say where, the unit cube, and every factor applied
consistently to the scene the twin builds (geometry, mass, resting height, colours, friction,
cameras, lights, distractors) or at run time (gains, latency, initial joints)."""

import textwrap
from dataclasses import replace

import numpy as np
import pytest
import yaml

from r2s2r.config import ConfigError
from r2s2r.eval.tasks import load_task, task_names
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.search.perturbations import apply_runtime, load_space, parse_space
from r2s2r.sim.dynamics import DynamicsSpec
from r2s2r.sim.render import TwinRenderer
from r2s2r.sim.twin import Twin

BLOCK = load_task("franka_block_in_bowl")


def twin_at(task, perturbation):
    task.new_episode(perturbation)
    twin = Twin(task.scene(perturbation))
    task.start(twin)
    return twin


@pytest.mark.parametrize("name", task_names())
def test_the_nominal_point_is_the_task_as_written(name):
    task = load_task(name)
    space = task.perturbations
    assert space.dim >= 20 and len(set(space.names)) == space.dim
    assert task.scene(space.nominal()) == task.scene() == task.base_scene
    runtime = task.runtime(space.nominal())
    assert runtime["actuator_gain_scale"] == 1.0 and runtime["command_latency_s"] == 0.0
    assert runtime["initial_joint_offsets"] and set(runtime["initial_joint_offsets"].values()) == {0.0}
    kinds = {f.kind for f in space.factors}
    # What the issue asks every space to cover.
    assert {"object_x", "object_y", "object_scale", "object_mass_scale", "object_friction",
            "joint_offset", "light_intensity", "light_tilt", "object_color", "table_color", "distractors",
            "actuator_gain", "command_latency"} <= kinds
    assert kinds & {"camera_x", "camera_y", "camera_z"} and kinds & {"camera_yaw", "camera_pitch", "camera_roll"}
    assert kinds & {"object_yaw", "door_angle"}  # the block's and cube's turn, the cup's door


def test_unit_cube_maps_to_values_and_back():
    space = BLOCK.perturbations
    rng = np.random.default_rng(3)
    for u in rng.random((20, space.dim)):
        values = space.from_unit(u)
        for f in space.factors:
            assert f.low <= values[f.name] <= f.high
        again = space.from_unit(space.to_unit(values))
        assert again == pytest.approx(values, rel=1e-12, abs=1e-12)
    corners = space.from_unit(np.zeros(space.dim)), space.from_unit(np.ones(space.dim))
    friction = space.factor("block_friction")
    assert (corners[0]["block_friction"], corners[1]["block_friction"]) == pytest.approx((friction.low, friction.high))
    # Log scale: the middle of the cube is the geometric mean.
    assert space.from_unit(np.full(space.dim, 0.5))["block_friction"] == pytest.approx(np.sqrt(0.02 * 1.5))
    colour = space.factor("block_colour")
    assert [space.factor("block_colour").from_unit(u) for u in (0.0, 0.17, 0.5, 0.99, 1.0)] == [0, 1, 3, 5, 5]
    assert colour.levels == 6 and space.factor("distractors").levels == 4
    with pytest.raises(ValueError, match="has 27 coordinates"):
        space.from_unit([0.5, 0.5])


@pytest.mark.parametrize("values,match", [
    ({"block_size": 1.0}, r"block_size: expected factors of this space: block_x, .*got 'unknown factor'"),
    ({"block_x": 0.9}, r"block_x: expected a number from -0.15 to 0.5, got 0.9"),
    ({"distractors": 1.5}, r"distractors: expected an integer from 0 to 3, got 1.5"),
    ({"block_colour": "red"}, r"block_colour: expected an integer from 0 to 5, got 'red'"),
])
def test_perturbation_values_are_checked_by_name(values, match):
    with pytest.raises(ConfigError, match=match):
        BLOCK.scene(values)


@pytest.mark.parametrize("factor,key,expected", [
    ("{name: a, kind: object_size, target: block, range: [0, 1]}", "factors[0].kind", "one of object_x"),
    ("{name: a, kind: object_x, target: cube, range: [0, 1]}", "factors[0].target", "an object of the scene: block"),
    ("{name: a, kind: object_x, target: block, range: [0.1, 0.2]}", "factors[0].range",
     "a range that holds the nominal value 0"),
    ("{name: a, kind: object_x, target: block, range: [0.2, -0.1]}", "factors[0].range", "low <= high"),
    ("{name: a, kind: object_friction, target: block, range: [0, 2], log: true}", "factors[0].range",
     "a positive range"),
    ("{name: a, kind: object_color, target: block, choices: [green, red]}", "factors[0].choices[0]",
     "the scene's own colour"),
    ("{name: a, kind: object_color, target: block, choices: [[0.85, 0.15, 0.12, 1], crimson]}",
     "factors[0].choices[1]", "a colour name"),
    ("{name: a, kind: door_angle, target: bowl, range: [0, 1]}", "factors[0].target", "a door of the scene: none"),
    ("{name: a, kind: distractors, range: [0, 2], objects: []}", "factors[0].objects", "at least 2 objects"),
    ("{name: a, kind: joint_offset, target: joint9, range: [-1, 1]}", "factors[0].target", "a joint of the scene"),
    ("{name: a, kind: object_x, target: block, range: [0, 1], scale: 2}", "factors[0].scale", "one of the keys"),
])
def test_malformed_space_names_file_key_and_expectation(tmp_path, factor, key, expected):
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(f"factors:\n  - {factor}\n"))
    with pytest.raises(ConfigError) as info:
        load_space(path, BLOCK.base_scene)
    message = str(info.value)
    assert str(path) in message and key in message and expected in message


def test_two_factors_may_not_share_a_name_or_what_they_change():
    factor = {"name": "a", "kind": "object_x", "target": "block", "range": [0, 1]}
    with pytest.raises(ConfigError, match=r"factors\[1\].name: expected a factor name not used before"):
        parse_space({"factors": [factor] * 2}, BLOCK.base_scene)
    with pytest.raises(ConfigError, match=r"factors\[1\].kind: expected a kind and target no other factor has "
                                          r"\(a is object_x of block\)"):
        parse_space({"factors": [factor, dict(factor, name="b")]}, BLOCK.base_scene)


@pytest.mark.parametrize("envelope, key, expected", [
    ("{a: [0, 2]}", "envelopes.x.a", "[low, high] with 0 <= low < high <= 1"),
    ("{a: [0.5, 0.2]}", "envelopes.x.a", "[low, high] with 0 <= low < high <= 1"),
    ("{b: [0, 1]}", "envelopes.x.b", "a factor of this space (a)"),
])
def test_malformed_envelopes_name_the_factor_and_the_range_expected(envelope, key, expected):
    data = {"factors": [{"name": "a", "kind": "object_x", "target": "block", "range": [0, 1]}],
            "envelopes": {"x": yaml.safe_load(envelope)}}
    with pytest.raises(ConfigError) as info:
        parse_space(data, BLOCK.base_scene)
    assert key in str(info.value) and expected in str(info.value)


def test_an_envelope_narrows_its_factors_and_leaves_the_rest():
    from r2s2r.search.campaign import SearchSpace
    space = BLOCK.perturbations
    operating = space.within("operating")
    assert (operating.factor("block_yaw").low, operating.factor("block_yaw").high) == (-0.9, 0.9)
    assert operating.factor("bowl_x") == space.factor("bowl_x")
    search = SearchSpace(space, ["block_yaw", "block_friction", "bowl_x"], envelope="operating")
    corner, other = search.values([0.0, 0.0, 0.0]), search.values([1.0, 1.0, 1.0])
    assert corner == {"block_yaw": -0.9, "block_friction": 0.25, "bowl_x": space.factor("bowl_x").low}
    assert other["block_yaw"] == pytest.approx(0.9) and other["bowl_x"] == pytest.approx(space.factor("bowl_x").high)
    space.complete(corner)  # values of the envelope are values of the whole space
    with pytest.raises(KeyError, match="no envelope 'lab'; envelopes: operating"):
        SearchSpace(space, None, envelope="lab")


def test_a_resized_block_changes_geometry_mass_and_resting_height_together():
    nominal = twin_at(BLOCK, None)
    big = twin_at(BLOCK, {"block_scale": 1.4, "block_mass_scale": 2.0})
    geom = nominal.model.geom("block").id
    np.testing.assert_allclose(big.model.geom_size[geom], 1.4 * nominal.model.geom_size[geom])
    body = nominal.model.body("block").id
    assert big.model.body_mass[body] == pytest.approx(nominal.model.body_mass[body] * 1.4 ** 3 * 2.0)
    for twin, scale in ((nominal, 1.0), (big, 1.4)):
        twin.step(300)
        # It rests on the table: its centre half its (scaled) height above the top.
        assert twin.object_poses()["block"][0][2] == pytest.approx(0.025 * scale, abs=5e-4)


def test_pose_colour_and_friction_factors_reach_the_twin():
    twin = twin_at(BLOCK, {"block_x": 0.1, "block_y": -0.05, "block_yaw": 0.5, "block_colour": 2,
                           "block_friction": 0.05, "table_colour": 3, "bowl_x": 0.05})
    pos, quat = twin.object_poses()["block"]
    np.testing.assert_allclose(pos[:2], [0.55, 0.07], atol=1e-9)
    assert 2 * np.arctan2(quat[3], quat[0]) == pytest.approx(0.5)
    m = twin.model
    block, table = m.geom("block").id, m.geom("table_top").id
    np.testing.assert_allclose(m.geom_rgba[block], [0.15, 0.3, 0.85, 1.0], atol=1e-6)  # blue
    np.testing.assert_allclose(m.geom_rgba[table], [0.92, 0.92, 0.92, 1.0], atol=1e-6)  # white
    assert m.geom_friction[block][0] == pytest.approx(0.05)
    # The block's friction governs its grip: above the finger pads' priority.
    finger = m.geom_bodyid == m.body("fr3_leftfinger").id
    assert m.geom_priority[block] > m.geom_priority[finger].max()
    assert twin.data.body("bowl").xpos[0] == pytest.approx(0.5)


def test_camera_jitter_moves_the_camera_and_light_factors_change_the_picture():
    nominal, jittered = twin_at(BLOCK, None), twin_at(BLOCK, {"camera_x": 0.05, "camera_yaw": 0.08})
    cam = nominal.model.camera("scene").id
    assert jittered.data.cam_xpos[cam] - nominal.data.cam_xpos[cam] == pytest.approx([0.05, 0, 0], abs=1e-9)
    turn = np.degrees(2 * np.arccos(abs(np.dot(nominal.model.cam_quat[cam], jittered.model.cam_quat[cam]))))
    assert turn == pytest.approx(np.degrees(0.08), abs=1e-6)
    dim = twin_at(BLOCK, {"light_intensity": 0.3})
    tilted = twin_at(BLOCK, {"light_tilt": 0.6, "light_azimuth": 0.0})
    light = nominal.model.light("key").id
    np.testing.assert_allclose(tilted.model.light_dir[light], [np.sin(0.6), 0, -np.cos(0.6)], atol=1e-6)
    brightness = {}
    for label, twin in (("nominal", nominal), ("jittered", jittered), ("dim", dim), ("tilted", tilted)):
        with TwinRenderer(twin) as renderer:
            brightness[label] = renderer.rgb("scene").astype(float)
    assert brightness["dim"].mean() < 0.8 * brightness["nominal"].mean()
    assert np.abs(brightness["tilted"] - brightness["nominal"]).mean() > 2.0
    assert np.abs(brightness["jittered"] - brightness["nominal"]).mean() > 5.0


def test_distractors_appear_in_order_and_rest_where_the_space_puts_them():
    twin = twin_at(BLOCK, {"distractors": 2})
    assert twin.object_names == ("block", "distractor_0", "distractor_1")
    twin.step(200)
    np.testing.assert_allclose(twin.object_poses()["distractor_1"][0][:2], [0.3, -0.02], atol=1e-3)
    assert twin_at(BLOCK, {"distractors": 0}).object_names == ("block",)


def test_a_distractor_the_block_was_moved_onto_is_left_out_and_the_rest_stay():
    # The block moved to where distractor_2 stands: both would start inside each other, and the
    # physics would throw the sphere off the table before the robot moved (a soak saw it).
    block = BLOCK.base_scene.objects[0].pos
    onto = {"distractors": 3, "block_x": 0.62 - block[0], "block_y": 0.28 - block[1]}
    twin = twin_at(BLOCK, onto)
    assert twin.object_names == ("block", "distractor_0", "distractor_1")
    start = {name: pose[0].copy() for name, pose in twin.object_poses().items()}
    twin.step(100)
    for name, (position, _) in twin.object_poses().items():
        np.testing.assert_allclose(position, start[name], atol=2e-3, err_msg=name)
    assert twin_at(BLOCK, {"distractors": 3}).object_names[-1] == "distractor_2"


def test_door_angle_sets_where_the_door_starts():
    task = load_task("franka_cup_in_microwave")
    twin = twin_at(task, {"door_angle": 2.0})
    assert task.logic.door_angle(twin) == pytest.approx(2.0)
    twin.reset()
    assert task.logic.door_angle(twin) == pytest.approx(2.0)  # a reset restores it


def test_gains_scale_and_initial_joints_are_applied_at_start_idempotently():
    twin = twin_at(BLOCK, {"actuator_gain": 0.5, "joint1_offset": 0.2, "joint4_offset": -0.1})
    m, robot = twin.model, twin.robot
    kp = np.array(robot.group("arm").kp)
    acts = [m.actuator(j).id for j in robot.joint_names]
    np.testing.assert_allclose(m.actuator_gainprm[acts, 0], 0.5 * kp)
    np.testing.assert_allclose(m.actuator_biasprm[acts, 1], -0.5 * kp)
    expected = robot.home_positions + np.array([0.2, 0, 0, -0.1, 0, 0, 0])
    np.testing.assert_allclose(twin.arm_positions, expected)
    apply_runtime(twin, BLOCK.runtime({"actuator_gain": 0.5, "joint1_offset": 0.2, "joint4_offset": -0.1}))
    np.testing.assert_allclose(m.actuator_gainprm[acts, 0], 0.5 * kp)  # not 0.25
    np.testing.assert_allclose(twin.arm_positions, expected)


def test_softer_gains_let_a_load_push_the_arm_further():
    def deflection(gain):
        twin = twin_at(BLOCK, {"actuator_gain": gain})
        held = twin.arm_positions.copy()
        twin.set_arm_targets(held)
        twin.data.qfrc_applied[twin.model.joint("fr3_joint4").dofadr[0]] = 10.0  # N m, a payload's pull
        twin.step(1500)
        return abs(twin.arm_positions[3] - held[3])
    assert deflection(0.3) == pytest.approx(deflection(1.0) / 0.3, rel=0.05)


def first_motion(scene, runtime, gripper=False):
    """When the arm (or the gripper) starts moving after a command at t = 0, the twin set up with
    `runtime` as Task.start sets it up."""
    hardware = SimHardware(scene)
    hardware.on_configure()
    apply_runtime(hardware.twin, runtime)
    apply_runtime(hardware.twin, runtime)  # idempotent: the latency is set, not added again
    loop = ControlLoop(hardware, 250.0)
    start = loop.sample().position.copy()  # arm and finger joints
    if gripper:
        loop.controller.command_gripper("gripper", [0.01], now=hardware.now)
    else:
        loop.controller.command_positions("arm", loop.positions() + 0.2, now=hardware.now)
    while hardware.now < 0.4:
        loop.cycle()
        if np.abs(loop.sample().position - start).max() > 1e-3:
            return hardware.now
    return None


def test_command_latency_delays_when_a_command_reaches_the_actuators():
    def delayed(latency, gripper=False):
        values = {"command_latency": latency}
        return first_motion(BLOCK.scene(values), BLOCK.runtime(values), gripper)
    immediate, late = delayed(0.0), delayed(0.1)
    assert late - immediate == pytest.approx(0.1, abs=0.01)
    assert delayed(0.1, gripper=True) - delayed(0.0, gripper=True) == pytest.approx(0.1, abs=0.01)


def test_a_perturbations_latency_adds_to_the_twins_fitted_latency():
    fitted = replace(BLOCK.base_scene, dynamics=DynamicsSpec("franka_fr3", command_latency_s=0.04))
    nominal = BLOCK.runtime(None)
    base = first_motion(BLOCK.base_scene, nominal)
    assert first_motion(fitted, nominal) - base == pytest.approx(0.04, abs=0.01)
    assert first_motion(fitted, BLOCK.runtime({"command_latency": 0.1})) - base == pytest.approx(0.14, abs=0.01)
    twin = Twin(fitted)
    with pytest.raises(ValueError, match=r"command latency -0.01 s; expected a finite delay >= 0"):
        twin.set_command_latency(-0.01)
    assert twin.command_latency_s == 0.04
