"""The MoveIt configuration `r2s2r robots moveit` writes (sim.moveit), for every robot: the SRDF
parses and names only the URDF's joints and links, its groups are the robot's groups and
grippers, every link pair it lets MoveIt skip is one MuJoCo never finds in contact at poses sampled
independently here (another seed, no margin), the limits are the datasheet's, and the controllers are driver_node's actions.
MoveIt itself is not installable here: move_group reading these files is not tested (docs/moveit.md)."""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np
import pytest
import yaml

from r2s2r.cli import main
from r2s2r.contract.interface import driver_interface
from r2s2r.robots import get_robot, registry
from r2s2r.robots.model import build_robot_spec
from r2s2r.sim import moveit

ROBOTS = sorted(n for n, r in registry().items() if not r.variant_of)


@pytest.fixture(scope="module", params=ROBOTS)
def config(request, tmp_path_factory):
    robot = get_robot(request.param)
    out = tmp_path_factory.mktemp(robot.name)
    moveit.write(robot, out)
    return robot, out


def contacts_seen_independently(robot, samples: int = 400, seed: int = 12345) -> dict[tuple[str, str], int]:
    """Per link pair, at how many of `samples` random poses of the robot alone MuJoCo finds it
    touching (no margin), every geom colliding with every other (parent and child excepted, as
    MuJoCo does)."""
    model = build_robot_spec(robot).compile()
    model.geom_contype[:] = 1
    model.geom_conaffinity[:] = 1
    model.geom_margin[:] = 0.0
    data = mujoco.MjData(model)
    rng = np.random.default_rng(seed)
    adr = [model.joint(n).qposadr[0] for n in robot.joint_names]
    seen: dict[tuple[str, str], int] = {}
    for _ in range(samples):
        data.qpos[:] = 0.0
        data.qpos[adr] = rng.uniform(robot.limits.lower, robot.limits.upper)
        mujoco.mj_kinematics(model, data)
        mujoco.mj_collision(model, data)
        pairs = {tuple(sorted(model.body(model.geom_bodyid[g]).name for g in geoms))
                 for geoms in data.contact.geom[:data.ncon]}
        for pair in pairs:
            if pair[0] != pair[1]:
                seen[pair] = seen.get(pair, 0) + 1
    return seen


def test_the_srdf_names_the_robots_groups_joints_and_links(config):
    robot, out = config
    root = ET.parse(out / f"{robot.name}.srdf").getroot()
    urdf = ET.parse(out / f"{robot.name}.urdf").getroot()
    joints = {j.get("name"): (j.find("parent").get("link"), j.find("child").get("link")) for j in urdf.iter("joint")}
    links = {link.get("name") for link in urdf.iter("link")}
    assert root.get("name") == urdf.get("name")
    groups = {g.get("name"): [j.get("name") for j in g.findall("joint")] for g in root.findall("group")}
    assert groups == {**{g.name: list(g.joints) for g in robot.groups},
                      **{g.name: list(g.joints) for g in robot.grippers}}
    assert all(j in joints for members in groups.values() for j in members)
    for state in root.findall("group_state"):
        values = {j.get("name"): float(j.get("value")) for j in state.findall("joint")}
        assert values == pytest.approx({j: robot.home[j] for j in groups[state.get("group")]}, abs=1e-5)
    effectors = root.findall("end_effector")
    assert sorted(e.get("group") for e in effectors) == sorted(g.name for g in robot.grippers)
    for e in effectors:
        assert e.get("parent_link") in links and e.get("parent_group") in groups
    assert root.find("virtual_joint").get("child_link") == robot.base_link
    pairs = [(d.get("link1"), d.get("link2"), d.get("reason")) for d in root.findall("disable_collisions")]
    assert pairs and all(a in links and b in links for a, b, _ in pairs)
    assert {reason for _, _, reason in pairs} <= {"Adjacent", "Default", "Always", "Never"}
    # Every joint's two links that both have collision shapes are skipped as adjacent.
    shaped = {a for a, _, _ in pairs} | {b for _, b, _ in pairs}
    skipped = {tuple(sorted((a, b))): reason for a, b, reason in pairs}
    for name, (parent, child) in joints.items():
        if parent in shaped and child in shaped:
            assert skipped.get(tuple(sorted((parent, child)))) == "Adjacent", name


def test_pairs_skipped_as_never_touching_are_not_seen_touching(config):
    # "Never" is a sample's verdict, as in MoveIt's setup assistant: a pair no pose of 10,000
    # touched may touch in one pose of many thousands; one that touches in more than 1 % of
    # poses sampled here (another seed, no margin) would be a wrong verdict.
    robot, out = config
    root = ET.parse(out / f"{robot.name}.srdf").getroot()
    reasons = {tuple(sorted((d.get("link1"), d.get("link2")))): d.get("reason")
               for d in root.findall("disable_collisions")}
    samples = 400
    seen = contacts_seen_independently(robot, samples)
    assert seen, "no self contact at all in the sampled poses: the check would prove nothing"
    often = {pair: n for pair, n in seen.items() if reasons.get(pair) == "Never" and n > 0.01 * samples}
    assert not often, often
    assert set(seen) - set(reasons), "every pair seen touching is skipped: MoveIt would check nothing"


def test_limits_kinematics_planning_and_controllers(config):
    robot, out = config
    limits = yaml.safe_load((out / "joint_limits.yaml").read_text())["joint_limits"]
    for i, joint in enumerate(robot.joint_names):
        assert limits[joint]["max_velocity"] == pytest.approx(robot.limits.velocity[i])
        assert limits[joint]["max_acceleration"] == pytest.approx(robot.limits.acceleration[i])
    assert all(limits[j]["has_acceleration_limits"] for j in robot.gripper_joint_names)
    assert set(yaml.safe_load((out / "kinematics.yaml").read_text())) == set(robot.group_names)
    planning = yaml.safe_load((out / "ompl_planning.yaml").read_text())
    assert all(planning[g]["planner_configs"] for g in robot.group_names)
    manager = yaml.safe_load((out / "moveit_controllers.yaml").read_text())["moveit_simple_controller_manager"]
    actions = {f"{name}/{manager[name]['action_ns']}": manager[name]["type"] for name in manager["controller_names"]}
    interface = driver_interface(robot.group_names, [g.name for g in robot.grippers], simulated=False)
    assert actions == {name: kind.rsplit("/", 1)[-1] for name, kind in interface.actions.items()}
    for name in manager["controller_names"]:
        members = manager[name]["joints"]
        assert members in [list(g.joints) for g in robot.groups] + [list(g.joints) for g in robot.grippers]


def test_the_command_writes_the_files(tmp_path, capsys):
    assert main(["robots", "moveit", "xarm7", "--out", str(tmp_path), "--samples", "50"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.format(robot="xarm7") for f in moveit.FILES)
    assert "sampling 50 poses" in capsys.readouterr().out
    assert main(["robots", "moveit", "xarm7", "--out", str(tmp_path), "--samples", "-1"]) == 2


def test_the_launch_file_runs_move_group_on_the_written_configuration():
    """launch_ros and MoveIt are not installable here: the launch file is parsed and checked to
    write the configuration and start move_group and robot_state_publisher on it."""
    source = Path("launch/moveit.launch.py").read_text()
    tree = ast.parse(source)
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "moveit.write" in calls
    assert '"moveit_ros_move_group"' in source and '"robot_state_publisher"' in source
    assert "bringup.launch.py" in source
