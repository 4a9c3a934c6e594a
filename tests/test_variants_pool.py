"""The real-to-sim variant pool as a perturbation space draws from it: `r2s2r variants` writes a
pool of validated scenes, a `kind: variant` factor starts a trial from one of them with the
space's other factors on top, through the trial runner deterministically; a pool that is not
the task's scene's is an error at load time."""

import shutil
from dataclasses import replace

import numpy as np
import pytest
import yaml

from r2s2r import cli
from r2s2r.config import ConfigError, load_yaml
from r2s2r.eval.runner import TrialObserver, TrialSpec, TrialWorker
from r2s2r.eval.tasks import load_task
from r2s2r.paths import config_path
from r2s2r.real2sim import variants
from r2s2r.real2sim.validate import validate
from r2s2r.search.perturbations import load_space, parse_space
from r2s2r.sim.scene import load_scene
from r2s2r.sim.twin import Twin

BLOCK = load_task("franka_block_in_bowl")
SPACE = BLOCK.perturbations
POOL = config_path("variants", "franka_block_in_bowl")
EXPERT = "scripted:franka_block_in_bowl"


def index_of(factor, value, space=SPACE):
    """The scene_variant value of the shipped pool's variant that changed `factor` by `value`."""
    return next(v.index for v in space.factor("scene_variant").pool if (v.factor, v.value) == (factor, value))


def twin_at(values):
    BLOCK.new_episode(values)
    twin = Twin(BLOCK.scene(values))
    BLOCK.start(twin)
    return twin


def test_the_variants_command_writes_a_pool_whose_variants_load_and_pass_validation(tmp_path, monkeypatch, capsys):
    # The second pose_x value puts the block off the table: rejected, with the check that failed.
    monkeypatch.setitem(variants.DEFAULT_VALUES, "pose_x", (0.04, 0.9))
    out = tmp_path / "pool"
    assert cli.main(["variants", "franka_block_in_bowl", "--out", str(out), "--factors",
                     "geometry,material,pose_x"]) == 0
    assert "5 variants of task franka_block_in_bowl" in capsys.readouterr().out
    pool = load_yaml(out / "pool.yaml")
    assert pool["robot"] == "franka_fr3" and pool["factors"] == ["geometry", "material", "pose_x"]
    assert [(v["index"], v["factor"], v["target"], v["value"]) for v in pool["variants"]] == [
        (1, "geometry", "block", 0.8), (2, "geometry", "block", 1.2), (3, "material", "block", 0.3),
        (4, "material", "block", 1.5), (5, "pose_x", "block", 0.04)]
    (bad,) = pool["rejected"]
    assert (bad["factor"], bad["value"]) == ("pose_x", 0.9) and "failed on block" in bad["why"]
    assert bad["failed"] and {f["object"] for f in bad["failed"]} == {"block"}
    base = load_scene(out / pool["base"])
    assert base.fixtures == BLOCK.base_scene.fixtures and base.objects == BLOCK.base_scene.objects
    block = BLOCK.base_scene.objects[0]
    for entry in pool["variants"]:
        scene = load_scene(out / entry["file"])
        assert validate(scene).passed, entry
        assert scene.fixtures == base.fixtures  # the bowl is kept: the writer stores fixtures too
        changed = scene.objects[0]
        if entry["factor"] == "geometry":
            assert changed.size == pytest.approx([s * entry["value"] for s in block.size])
            assert changed.mass == pytest.approx(block.mass * entry["value"] ** 3)
            assert changed.pos[2] == pytest.approx(changed.size[2] / 2)  # still on the table
        elif entry["factor"] == "material":
            assert changed.friction == entry["value"] and changed.size == block.size
        else:
            assert changed.pos[0] == pytest.approx(block.pos[0] + entry["value"])
    # A space over the task's scene draws from the pool just written.
    space = parse_space({"factors": [{"name": "v", "kind": "variant", "pool": str(out / "pool.yaml")}]},
                        BLOCK.base_scene, str(tmp_path / "space.yaml"))
    assert space.factor("v").levels == 6
    assert space.apply(BLOCK.base_scene, {"v": 3}).objects[0].friction == 0.3
    # Regenerating replaces the pool's scene files.
    assert cli.main(["variants", "franka_block_in_bowl", "--out", str(out), "--factors", "material"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["01_material_block_0.3.yaml", "02_material_block_1.5.yaml",
                                                     "base.yaml", "pool.yaml"]


@pytest.mark.parametrize("argv,message", [
    (["variants", "no/such/scene.yaml", "--out", "x"], "no/such/scene.yaml: expected an existing YAML file"),
    (["variants", "franka_block", "--out", "x"], "SCENE: expected a scene YAML, or a task name or YAML"),
    (["variants", "franka_block_in_bowl", "--out", "x", "--factors", "size"], "--factors: expected variant factors"),
])
def test_the_variants_command_names_a_missing_or_unknown_scene(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_an_invalid_scene_makes_no_pool(tmp_path, capsys):
    data = load_yaml(config_path("tasks", "franka_block_in_bowl.yaml"))["scene"]
    data["objects"][0]["pos"] = [0.45, 0.12, 0.3]  # in the air: it falls, so it does not settle
    (tmp_path / "floating.yaml").write_text(yaml.safe_dump(data))
    assert cli.main(["variants", str(tmp_path / "floating.yaml"), "--out", str(tmp_path / "pool")]) == 2
    assert "the scene fails validation (settle failed on block" in capsys.readouterr().err
    assert not (tmp_path / "pool").exists()


def test_nominal_is_the_tasks_own_scene_and_every_variant_is_one_change_of_it():
    factor = SPACE.factor("scene_variant")
    assert factor.discrete and factor.nominal == 0 and factor.low == 0 and factor.high == len(factor.pool) == 20
    assert SPACE.nominal()["scene_variant"] == 0
    assert BLOCK.scene({"scene_variant": 0}) == BLOCK.base_scene
    assert SPACE.describe({"scene_variant": 0})["scene_variant"] == "none"
    assert SPACE.describe({"scene_variant": 2})["scene_variant"] == "geometry of block 1.2"
    assert {v.factor for v in factor.pool} == set(variants.FACTORS)
    for v in factor.pool:
        assert BLOCK.scene({"scene_variant": v.index}) is v.scene != BLOCK.base_scene
    # Samplers and the atlas see it as one more discrete coordinate of the unit cube.
    assert [factor.from_unit(u) for u in (0.0, 0.5 / 21, 20.5 / 21, 1.0)] == [0, 0, 20, 20]
    assert factor.from_unit(factor.to_unit(7)) == 7


def test_a_trial_that_leaves_the_variant_out_is_the_trial_it_was_without_the_factor():
    data = load_yaml(config_path("perturbations", "franka_block_in_bowl.yaml"))
    data["factors"] = [f for f in data["factors"] if f["kind"] != "variant"]
    before = parse_space(data, BLOCK.base_scene, "before.yaml")
    assert SPACE.names == before.names + ("scene_variant",)  # the others keep their coordinates
    rng = np.random.default_rng(5)
    for u in rng.random((15, before.dim)):
        values = before.from_unit(u)
        assert SPACE.from_unit(np.append(u, 0.0)) == {**values, "scene_variant": 0}
        assert BLOCK.scene(values) == before.apply(BLOCK.base_scene, values)
        assert BLOCK.runtime(values) == before.runtime(values)


def test_the_variant_is_what_the_twin_is_compiled_from_and_the_other_factors_apply_on_top():
    pool = {v.index: v.scene for v in SPACE.factor("scene_variant").pool}
    big, slippery, raised = index_of("geometry", 1.2), index_of("material", 0.3), index_of("support_height", 0.03)
    nominal = twin_at(None)
    m0 = nominal.model
    geom, body = m0.geom("block").id, m0.body("block").id

    twin = twin_at({"scene_variant": big})
    np.testing.assert_allclose(twin.model.geom_size[geom], 1.2 * m0.geom_size[geom])
    assert twin.model.body_mass[body] == pytest.approx(1.2 ** 3 * m0.body_mass[body])
    assert twin.data.body("block").xpos[2] == pytest.approx(0.03)  # resting on the table
    # block_scale scales the variant's block, block_x moves it from where the variant has it.
    twin = twin_at({"scene_variant": big, "block_scale": 1.25, "block_x": 0.1})
    np.testing.assert_allclose(twin.model.geom_size[geom], 1.5 * m0.geom_size[geom])
    assert twin.data.body("block").xpos == pytest.approx([pool[big].objects[0].pos[0] + 0.1, 0.12, 0.0375])

    # A factor at its nominal leaves the variant's own friction; set, it replaces it.
    assert twin_at({"scene_variant": slippery}).model.geom_friction[geom][0] == pytest.approx(0.3)
    twin = twin_at({"scene_variant": slippery, "block_friction": 0.8, "block_colour": 2})
    assert twin.model.geom_friction[geom][0] == pytest.approx(0.8)
    np.testing.assert_allclose(twin.model.geom_rgba[geom], [0.15, 0.3, 0.85, 1.0], atol=1e-6)

    # The FR3 is bolted to the table, so a raised table carries it and the whole cell: in the
    # robot's frame only the light is lower. bowl_x and camera_x apply as on the task's scene.
    twin = twin_at({"scene_variant": raised, "bowl_x": 0.05, "camera_x": 0.02})
    top = twin.model.geom("table_top").id
    assert twin.data.geom_xpos[top][2] + twin.model.geom_size[top][2] == pytest.approx(0.0)
    assert twin.data.body("bowl").xpos == pytest.approx([0.5, -0.18, 0.0])
    assert twin.data.body("block").xpos[2] == pytest.approx(0.025)
    cam = m0.camera("scene").id
    assert twin.data.cam_xpos[cam] - nominal.data.cam_xpos[cam] == pytest.approx([0.02, 0.0, 0.0], abs=1e-9)
    key = m0.light("key").id
    assert twin.model.light_pos[key] - m0.light_pos[key] == pytest.approx([0.0, 0.0, -0.03], abs=1e-9)

    # The space's distractors come on top of a variant's own.
    crowded = twin_at({"scene_variant": index_of("distractors", 2.0), "distractors": 1})
    assert crowded.object_names == ("block", "variant_distractor_0", "variant_distractor_1", "distractor_0")


def test_a_raised_support_carries_a_robot_bolted_to_it_and_rises_around_one_beside_it():
    scene = BLOCK.base_scene  # the FR3's base stands on the table, inside its footprint
    carried = variants.apply(scene, "support_height", None, 0.03)
    assert (carried.table, carried.objects, carried.fixtures, carried.cameras) == \
        (scene.table, scene.objects, scene.fixtures, scene.cameras)
    assert carried.lights[0].pos[2] == pytest.approx(scene.lights[0].pos[2] - 0.03)
    # A table that starts in front of the robot's pedestal rises alone, the block and the bowl with it.
    beside = replace(scene, table=replace(scene.table, center=(0.75, 0.0), size=(0.6, 1.2, 0.04)))
    raised = variants.apply(beside, "support_height", None, 0.03)
    assert raised.table.height == pytest.approx(0.03) and raised.lights == scene.lights
    assert raised.objects[0].pos[2] == pytest.approx(0.055) and raised.fixtures[0].pos[2] == pytest.approx(0.03)
    high, low = Twin(raised), Twin(beside)
    assert high.data.body("fr3_link0").xpos == pytest.approx(low.data.body("fr3_link0").xpos)  # on its pedestal


class _Compiled(TrialObserver):
    def start(self, twin, loop, task):
        self.scene = twin.scene
        self.size = twin.model.geom_size[twin.model.geom("block").id].copy()


def test_a_trial_with_a_scene_variant_runs_deterministically_through_the_runner():
    big = index_of("geometry", 1.2)
    spec = TrialSpec.of(EXPERT, "franka_block_in_bowl", {"scene_variant": big, "block_x": 0.05}, seed=3)
    nominal = TrialSpec.of(EXPERT, "franka_block_in_bowl", {"block_x": 0.05}, seed=3)
    worker = TrialWorker()
    seen = _Compiled()
    first = worker.run(spec, seen)
    assert seen.scene == BLOCK.scene(spec.values) and seen.scene.objects[0].size == pytest.approx((0.132, 0.06, 0.06))
    np.testing.assert_allclose(seen.size, [0.066, 0.03, 0.03])
    plain = worker.run(nominal)
    other = worker.run(TrialSpec.of(EXPERT, "franka_block_in_bowl", {"scene_variant": index_of("material", 0.3)}, 4))
    again = worker.run(spec)  # its twin from the worker's cache, after two other scenes
    fresh = TrialWorker().run(spec)
    assert first.deterministic() == again.deterministic() == fresh.deterministic()
    assert first.perturbation == {"block_x": 0.05, "scene_variant": float(big)}
    # The bigger block leaves the fingers less room: the variant is what the trial ran.
    assert first.margin != plain.margin and first.metrics["finger_clearance"] < plain.metrics["finger_clearance"]
    assert other.stage and first.id != plain.id


def _copied_pool(tmp_path, edit=None):
    pool = tmp_path / "pool"
    shutil.copytree(POOL, pool)
    if edit:
        name, old, new = edit
        text = (pool / name).read_text()
        assert old in text
        (pool / name).write_text(text.replace(old, new, 1))
    return pool / "pool.yaml"


@pytest.mark.parametrize("edit,key,expected", [
    (None, "factors[0].pool", "expected a variant pool (the pool.yaml `r2s2r variants` writes)"),
    (("pool.yaml", "robot: franka_fr3", "robot: xarm7"), "robot",
     "expected variants of the task's scene, whose robot is franka_fr3, got 'xarm7'"),
    (("base.yaml", "pos: [0.45, 0.12, 0.025]", "pos: [0.5, 0.12, 0.025]"), "base",
     "got 'variants of another scene (objects[block].pos[0]: 0.5, not 0.45)'"),
    (("03_pose_x_block_-0.05.yaml", "robot: franka_fr3", "robot: xarm7"), "variants[2].file",
     "expected a variant of the task's scene, whose robot is franka_fr3"),
    (("02_geometry_block_1.2.yaml", "name: bowl", "name: basin"), "variants[1].file",
     "which lacks bowl"),
    (("pool.yaml", "file: 04_pose_x_block_0.05.yaml", "file: 04_gone.yaml"), "variants[3].file",
     "expected a scene file of the pool"),
    (("pool.yaml", "{index: 2,", "{index: 7,"), "variants[1].index", "expected 2"),
])
def test_a_pool_that_is_not_of_the_tasks_scene_is_an_error_naming_the_file(tmp_path, edit, key, expected):
    pool = _copied_pool(tmp_path, edit) if edit else tmp_path / "nowhere" / "pool.yaml"
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"factors": [{"name": "v", "kind": "variant",
                                                  "pool": str(pool.relative_to(tmp_path))}]}))
    with pytest.raises(ConfigError) as err:
        load_space(space, BLOCK.base_scene)
    where = space if key.startswith("factors") else pool  # the file the mistake is in
    assert str(err.value).startswith(f"{where}: {key}: ")
    assert expected in str(err.value)


def test_a_variant_factor_takes_only_its_pool_and_its_values_are_checked(tmp_path):
    pool = _copied_pool(tmp_path)
    factor = {"name": "v", "kind": "variant", "pool": str(pool)}
    with pytest.raises(ConfigError, match=r"factors\[0\].range: expected one of the keys .*got 'unknown key'"):
        parse_space({"factors": [{**factor, "range": [0, 3]}]}, BLOCK.base_scene)
    with pytest.raises(ConfigError, match=r"factors\[1\].kind: expected a kind and target no other factor has"):
        parse_space({"factors": [factor, {**factor, "name": "w"}]}, BLOCK.base_scene)
    clash = {"name": "d", "kind": "distractors", "range": [0, 1], "objects": [
        {"name": "variant_distractor_0", "shape": "box", "size": [0.03, 0.03, 0.03], "pos": [0.3, 0.3, 0.015]}]}
    with pytest.raises(ConfigError, match=r"factors\[1\].objects: expected names no variant of factors\[0\]'s pool "
                                          r"has \(variant 15, .*has variant_distractor_0\)"):
        parse_space({"factors": [factor, clash]}, BLOCK.base_scene)
    with pytest.raises(ConfigError, match=r"scene_variant: expected an integer from 0 to 20, got 21"):
        BLOCK.scene({"scene_variant": 21})
