"""The twin core: scenes from YAML (with errors that say where), determinism, snapshots,
privileged state and rendering."""

import textwrap

import numpy as np
import pytest

from r2s2r.config import ConfigError
from r2s2r.hardware.loop import ControlLoop
from r2s2r.hardware.sim import SimHardware
from r2s2r.sim.render import TwinRenderer
from r2s2r.sim.scene import Scene, load_scene, parse_scene
from r2s2r.sim.twin import Twin

SCENE = "config/scenes/franka_table.yaml"


def write(tmp_path, text, name="scene.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("body,key,expected", [
    ("robot: franka_fr3\nobjects:\n  - name: a\n    shape: box\n    size: [0.1, 0.1]\n    pos: [0, 0, 0]\n",
     "objects[0].size", "a list of 3 finite numbers"),
    ("robot: franka_fr3\nobjects:\n  - name: a\n    shape: cone\n    size: [1]\n    pos: [0, 0, 0]\n",
     "objects[0].shape", "one of box, cylinder, sphere, capsule"),
    ("robot: franka_fr3\ntable:\n  height: high\n", "table.height", "a finite number"),
    ("robot: franka_fr3\ntimestep: -1\n", "timestep", "a number greater than 0"),
    ("robot: franka_fr3\nlihgts: []\n", "lihgts", "one of the keys"),
    ("robot: franka_fr3\nobjects:\n  - name: a\n    shape: sphere\n    size: [0.02]\n    pos: [0, 0, .1]\n"
     "    mass: .nan\n", "objects[0].mass", "a finite number"),
])
def test_malformed_scene_names_file_key_and_expectation(tmp_path, body, key, expected):
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        load_scene(path)
    message = str(info.value)
    assert str(path) in message and key in message and expected in message


def test_unknown_robot_in_scene_lists_known_robots(tmp_path):
    with pytest.raises(ConfigError, match=r"robot: expected a registered robot: .*franka_fr3.*got 'ur5'"):
        load_scene(write(tmp_path, "robot: ur5\n"))


def test_bad_yaml_syntax_names_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"scene.yaml: line 3: expected valid YAML"):
        load_scene(write(tmp_path, "robot: franka_fr3\nobjects: [\n"))


def test_objects_rest_on_the_table_and_report_contacts():
    twin = Twin(load_scene(SCENE))
    twin.step(500)
    poses = twin.object_poses()
    scene = twin.scene
    for obj in scene.objects:
        pos, _ = poses[obj.name]
        assert pos[2] == pytest.approx(scene.table.height + obj.half_height, abs=2e-3)
    contacts = [c for c in twin.contacts() if {"table", "red_block"} == {c.body1, c.body2}]
    # The block's weight is carried by its contacts with the table.
    assert sum(c.normal_force for c in contacts) == pytest.approx(0.08 * 9.81, rel=0.05)


def run_scripted(twin_seed=0, steps=1500):
    hw = SimHardware(load_scene(SCENE), seed=twin_seed)
    hw.on_configure()
    loop = ControlLoop(hw)
    target = hw.robot.home_positions + np.array([0.3, 0.2, -0.2, 0.3, 0.1, -0.2, 0.3])
    loop.controller.command_positions("arm", target)
    loop.controller.command_gripper("gripper", [0.01])
    for _ in range(steps):
        loop.cycle()
    return hw.twin.snapshot()


def test_stepping_is_deterministic_bit_for_bit():
    assert np.array_equal(run_scripted(), run_scripted())


def test_snapshot_restore_replays_exactly():
    twin = Twin(load_scene(SCENE))
    twin.set_arm_targets(twin.robot.home_positions + 0.2)
    twin.step(200)
    snap = twin.snapshot()
    twin.step(300)
    after = twin.snapshot()
    twin.restore(snap)
    twin.step(300)
    assert np.array_equal(twin.snapshot(), after)


def test_rgb_and_depth_rendering_of_a_scene_camera(tmp_path):
    scene = parse_scene({
        "robot": "franka_fr3", "robot_cameras": False,
        "cameras": [{"name": "top", "width": 160, "height": 120, "fovy": 45, "pos": [0.45, 0.0, 1.0],
                     "lookat": [0.45, 0.0, 0.0]}],
        "objects": [{"name": "marker", "shape": "box", "size": [0.1, 0.1, 0.1], "pos": [2.0, 2.0, 0.05],
                     "rgba": [0, 1, 0, 1]}],
    })
    twin = Twin(scene)
    with TwinRenderer(twin) as renderer:
        rgb = renderer.rgb("top")
        depth = renderer.depth("top")
    assert rgb.shape == (120, 160, 3) and rgb.dtype == np.uint8
    # Straight down at the table top (z = 0) from 1 m: depth is 1 m at the centre.
    assert depth[60, 80] == pytest.approx(1.0, abs=5e-3)
    assert twin.camera_names == ("top",)


def test_cameras_larger_than_the_default_framebuffer_render():
    scene = parse_scene({"robot": "franka_fr3", "robot_cameras": False,
                         "cameras": [{"name": "hd", "width": 1280, "height": 720, "pos": [1.5, 0, 1],
                                      "lookat": [0.4, 0, 0.2]}]})
    twin = Twin(scene)
    with TwinRenderer(twin) as renderer:
        assert renderer.rgb("hd").shape == (720, 1280, 3)


def test_shadows_are_a_scene_option():
    on = TwinRenderer(Twin(Scene(robot="franka_fr3", shadows=True)))
    off = TwinRenderer(Twin(Scene(robot="franka_fr3")))
    a, b = on.rgb("scene"), off.rgb("scene")
    on.close(), off.close()
    assert not np.array_equal(a, b)


def test_twins_of_perturbed_scenes_share_a_gl_context_with_the_same_frames():
    """SharedContexts: twins whose scenes differ in poses and colours render through one context,
    pixel for pixel as a renderer of their own; another model's assets get a context of their
    own; a set of contexts garbage-collected while another is current leaves that one intact."""
    import gc

    from r2s2r.eval.tasks import load_task
    from r2s2r.sim.render import SharedContexts
    task = load_task("franka_block_in_bowl")
    factor = task.perturbations.factor
    points = [{}, {"block_x": 0.05, "block_yaw": 0.7, "camera_x": factor("camera_x").from_unit(0.9)},
              {"block_colour": factor("block_colour").from_unit(0.9),
               "block_scale": factor("block_scale").from_unit(0.9),
               "light_intensity": factor("light_intensity").from_unit(0.1)}]
    twins = [Twin(task.scene(p)) for p in points] + [Twin(Scene(robot="xarm7"))]
    shared = SharedContexts()
    for twin in twins:
        with TwinRenderer(twin) as own:
            expected = own.rgb("scene")
        assert np.array_equal(TwinRenderer(twin, shared=shared).rgb("scene"), expected)
    assert len(shared._contexts) == 2  # the FR3 cell's perturbed scenes, and the xArm7's
    doomed = SharedContexts()
    TwinRenderer(twins[1], shared=doomed).rgb("scene")
    survivor = TwinRenderer(twins[0], shared=shared)
    first = survivor.rgb("scene")
    del doomed
    gc.collect()
    assert np.array_equal(survivor.rgb("scene"), first)


def test_each_objects_size_is_its_bounding_box_along_its_own_axes():
    from r2s2r.sim.scene import ObjectSpec
    expected = {"box": ([0.11, 0.05, 0.04], (0.11, 0.05, 0.04)), "cylinder": ([0.025, 0.1], (0.05, 0.05, 0.1)),
                "capsule": ([0.02, 0.1], (0.04, 0.04, 0.14)), "sphere": ([0.03], (0.06, 0.06, 0.06))}
    for shape, (size, extents) in expected.items():
        np.testing.assert_allclose(ObjectSpec(shape, shape, tuple(size)).extents, extents, err_msg=shape)
    # The twin's, against the geoms MuJoCo compiled (half sizes; a cylinder's radius and half height).
    scene = load_scene("config/scenes/franka_table.yaml")
    twin = Twin(scene)
    sizes = twin.object_sizes()
    assert set(sizes) == {o.name for o in scene.objects}
    for obj in scene.objects:
        geom = twin.model.body(obj.name).geomadr[0]
        half = twin.model.geom_size[geom]
        compiled = {"box": 2 * half, "sphere": [2 * half[0]] * 3, "cylinder": [2 * half[0], 2 * half[0], 2 * half[1]],
                    "capsule": [2 * half[0], 2 * half[0], 2 * (half[1] + half[0])]}[obj.shape]
        np.testing.assert_allclose(sizes[obj.name], compiled, err_msg=obj.name)
