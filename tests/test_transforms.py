"""Link transforms from the URDF (robots.transforms), as robot_state_publisher computes them,
against the twin's own forward kinematics (MuJoCo's, from its own import of the same URDF) for
every robot at random poses: every link within 1 mm and 1 mrad. (On the live graph:
test_driver_dds.)"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from r2s2r.robots import get_robot, registry
from r2s2r.robots.model import build_robot_spec, home_qpos
from r2s2r.robots.transforms import fixed_transforms, link_poses, mount_transform, moving_transforms

ROBOTS = sorted(registry())


def twin_poses(robot, model, data, positions: dict) -> dict[str, np.ndarray]:
    """Each body's world pose (4x4) in MuJoCo at `positions` (joint name -> value)."""
    data.qpos[:] = home_qpos(robot, model)
    for name, value in positions.items():
        data.qpos[model.joint(name).qposadr[0]] = value
    mujoco.mj_kinematics(model, data)
    out = {}
    for b in range(1, model.nbody):
        pose = np.eye(4)
        pose[:3, :3] = data.xmat[b].reshape(3, 3)
        pose[:3, 3] = data.xpos[b]
        out[model.body(b).name] = pose
    return out


def assert_same_poses(ours: dict, twin: dict, links) -> None:
    for link in links:
        assert np.linalg.norm(ours[link][:3, 3] - twin[link][:3, 3]) < 1e-3, link
        turn = Rotation.from_matrix(ours[link][:3, :3].T @ twin[link][:3, :3]).magnitude()
        assert turn < 1e-3, (link, turn)


@pytest.mark.parametrize("robot_name", ROBOTS)
def test_link_transforms_match_the_twins_forward_kinematics(robot_name):
    robot = get_robot(robot_name)
    model = build_robot_spec(robot).compile()
    data = mujoco.MjData(model)
    rng = np.random.default_rng(7)
    fingers = [j for g in robot.grippers for j in g.joints]
    drivers = [g.joints[0] for g in robot.grippers]  # the others mimic these
    links = [model.body(b).name for b in range(1, model.nbody)]
    assert robot.base_link in links and len(links) > len(robot.joint_names)
    static = fixed_transforms(robot) + [mount_transform(robot, "world")]
    for _ in range(20):
        positions = dict(zip(robot.joint_names, rng.uniform(robot.limits.lower, robot.limits.upper)))
        for g in robot.grippers:
            positions[g.joints[0]] = rng.uniform(0.0, g.opening_range[1] / len(g.joints))
        ours = link_poses(static + moving_transforms(robot, positions), "world")
        mimics = {j: positions[robot.urdf_joints[j]["mimic"]] * robot.urdf_joints[j]["multiplier"]
                  + robot.urdf_joints[j]["offset"] for j in fingers if j not in drivers}
        twin = twin_poses(robot, model, data, {**positions, **mimics})
        assert set(links) <= set(ours), set(links) - set(ours)
        assert_same_poses(ours, twin, links)
