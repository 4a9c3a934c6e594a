"""A MoveIt 2 configuration for a registered robot, written from what r2s2r knows about it:
planning groups, end effectors and home states from the RobotSpec, the collision pairs MoveIt may
skip from MuJoCo's collision checks on the twin's shapes at sampled poses, joint limits with the
datasheet accelerations, and controllers that are driver_node's follow_joint_trajectory and
gripper_cmd actions. `r2s2r robots moveit ROBOT --out DIR` writes it; launch/moveit.launch.py
runs move_group with it on a full ROS 2 install (docs/moveit.md).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np
import yaml

from r2s2r.contract.names import Topics
from r2s2r.robots.model import build_robot_spec, home_qpos
from r2s2r.robots.spec import RobotSpec
from r2s2r.sim.collision import SELF_MARGIN_M

# Poses sampled for the collision matrix (MoveIt's setup assistant samples 10,000 by default).
COLLISION_SAMPLES = 10000
ALWAYS_SHARE = 0.95  # in contact this often: always, as the setup assistant counts it
# Finger joints carry no datasheet acceleration: MoveIt's time parameterisation needs one, so the
# gripper is taken to reach its top speed in this long.
FINGER_RAMP_S = 0.1
ARM_SOLVER = {"kinematics_solver": "kdl_kinematics_plugin/KDLKinematicsPlugin",
              "kinematics_solver_search_resolution": 0.005, "kinematics_solver_timeout": 0.05}
PLANNERS = {
    "RRTConnectkConfigDefault": {"type": "geometric::RRTConnect", "range": 0.0},
    "RRTstarkConfigDefault": {"type": "geometric::RRTstar", "range": 0.0, "goal_bias": 0.05,
                              "delay_collision_checking": 1},
    "PRMkConfigDefault": {"type": "geometric::PRM", "max_nearest_neighbors": 10},
}


def _owning_group(robot: RobotSpec, link: str) -> str:
    """The joint group whose motion carries `link` (walking up the URDF to a group's joint)."""
    by_child = {j["child"]: name for name, j in robot.urdf_joints.items()}
    group_of = {name: g.name for g in robot.groups for name in g.joints}
    while link in by_child:
        joint = by_child[link]
        if joint in group_of:
            return group_of[joint]
        link = robot.urdf_joints[joint]["parent"]
    raise ValueError(f"robot {robot.name}: no joint group moves link {link}")


def self_contacts(robot: RobotSpec, samples: int = COLLISION_SAMPLES, seed: int = 0):
    """(links with collision shapes, pairs in contact at home, contacts per pair, poses sampled):
    MuJoCo's collision pipeline on the robot's own model (every shape against every other, parent
    and child excepted as MuJoCo does), a pair counting as in contact within SELF_MARGIN_M, at home
    and at `samples` random poses of the joints and the fingers."""
    model = build_robot_spec(robot).compile()
    model.geom_contype[:] = 1
    model.geom_conaffinity[:] = 1
    model.geom_margin[:] = SELF_MARGIN_M
    model.geom_gap[:] = 0.0
    data = mujoco.MjData(model)
    home = home_qpos(robot, model)
    arm = [model.joint(n).qposadr[0] for n in robot.joint_names]
    fingers = [(model.joint(n).qposadr[0], g.opening_range[1] / len(g.joints)) for g in robot.grippers
               for n in g.joints]
    rng = np.random.default_rng(seed)

    def touching() -> set[tuple[str, str]]:
        mujoco.mj_kinematics(model, data)
        mujoco.mj_collision(model, data)
        if data.warning[mujoco.mjtWarning.mjWARN_CONTACTFULL].number:
            raise RuntimeError(f"robot {robot.name}: MuJoCo's contact buffer overflowed; contacts were lost")
        bodies = model.geom_bodyid[data.contact.geom[:data.ncon]]
        close = data.contact.dist[:data.ncon] < SELF_MARGIN_M
        return {tuple(sorted((model.body(a).name, model.body(b).name))) for (a, b), c in zip(bodies, close)
                if c and a != b}

    data.qpos[:] = home
    at_home = touching()
    counts: dict[tuple[str, str], int] = {}
    for _ in range(samples):
        data.qpos[:] = home
        data.qpos[arm] = rng.uniform(robot.limits.lower, robot.limits.upper)
        for adr, travel in fingers:
            data.qpos[adr] = rng.uniform(0.0, travel)
        for pair in touching():
            counts[pair] = counts.get(pair, 0) + 1
    links = sorted({model.body(b).name for b in model.geom_bodyid if b != 0})
    return links, at_home, counts, samples


def disabled_collisions(robot: RobotSpec, samples: int = COLLISION_SAMPLES, seed: int = 0) -> dict[tuple, str]:
    """Link pairs MoveIt need not check, with the setup assistant's reasons: Adjacent (joined by
    a joint), Default (in contact at home), Always (in contact in ALWAYS_SHARE of the sampled
    poses or more), Never (in contact in none of them); self_contacts says what contact is."""
    links, at_home, counts, samples = self_contacts(robot, samples, seed)
    adjacent = {tuple(sorted((j["parent"], j["child"]))) for j in robot.urdf_joints.values()}
    reasons: dict[tuple, str] = {}
    for i, a in enumerate(links):
        for b in links[i + 1:]:
            pair = (a, b)
            if pair in adjacent:
                reasons[pair] = "Adjacent"
            elif pair in at_home:
                reasons[pair] = "Default"
            elif counts.get(pair, 0) >= ALWAYS_SHARE * samples:
                reasons[pair] = "Always"
            elif pair not in counts:
                reasons[pair] = "Never"
    return reasons


def srdf(robot: RobotSpec, disabled: dict[tuple, str]) -> str:
    """The SRDF: a group per joint group and per gripper, home states, end effectors, the virtual
    joint to the world, and the disabled collision pairs."""
    root = ET.Element("robot", name=robot.urdf_name)
    root.append(ET.Comment(f" written by `r2s2r robots moveit {robot.name}`; edit the RobotSpec, not this file "))
    for group in robot.groups:
        element = ET.SubElement(root, "group", name=group.name)
        for joint in group.joints:
            ET.SubElement(element, "joint", name=joint)
    for gripper in robot.grippers:
        element = ET.SubElement(root, "group", name=gripper.name)
        for joint in gripper.joints:
            ET.SubElement(element, "joint", name=joint)
    for group in robot.groups:
        state = ET.SubElement(root, "group_state", name="home", group=group.name)
        for joint in group.joints:
            ET.SubElement(state, "joint", name=joint, value=f"{robot.home[joint]:.6g}")
    for gripper in robot.grippers:
        hand = robot.urdf_joints[gripper.joints[0]]["parent"]
        ET.SubElement(root, "end_effector", name=f"{gripper.name}_ee", parent_link=hand, group=gripper.name,
                      parent_group=_owning_group(robot, hand))
    ET.SubElement(root, "virtual_joint", name="world_joint", type="fixed", parent_frame="world",
                  child_link=robot.base_link)
    for (a, b), reason in sorted(disabled.items()):
        ET.SubElement(root, "disable_collisions", link1=a, link2=b, reason=reason)
    ET.indent(root)
    return '<?xml version="1.0"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def controllers(robot: RobotSpec) -> dict:
    """moveit_controllers.yaml: MoveIt's simple controller manager on driver_node's actions."""
    names, config = [], {}
    for group in robot.groups:
        controller, action = Topics.follow_joint_trajectory(group.name).split("/")
        names.append(controller)
        config[controller] = {"type": "FollowJointTrajectory", "action_ns": action, "default": True,
                              "joints": list(group.joints)}
    for gripper in robot.grippers:
        controller, action = Topics.gripper_action(gripper.name).split("/")
        names.append(controller)
        # parallel: MoveIt sends the two fingers' sum, the opening gripper_cmd takes.
        config[controller] = {"type": "GripperCommand", "action_ns": action, "default": True,
                              "parallel": len(gripper.joints) == 2, "joints": list(gripper.joints)}
    return {"moveit_controller_manager": "moveit_simple_controller_manager/MoveItSimpleControllerManager",
            "moveit_simple_controller_manager": {"controller_names": names, **config}}


def joint_limits(robot: RobotSpec) -> dict:
    """joint_limits.yaml: the datasheet velocities and accelerations (MoveIt's URDF has no
    accelerations), and slow default scaling for a first motion."""
    limits = robot.limits
    out = {name: {"has_velocity_limits": True, "max_velocity": float(limits.velocity[i]),
                  "has_acceleration_limits": True, "max_acceleration": float(limits.acceleration[i])}
           for i, name in enumerate(robot.joint_names)}
    for gripper in robot.grippers:
        speed = gripper.max_speed / len(gripper.joints)  # each finger's share of the opening speed
        for name in gripper.joints:
            out[name] = {"has_velocity_limits": True, "max_velocity": speed,
                         "has_acceleration_limits": True, "max_acceleration": speed / FINGER_RAMP_S}
    return {"default_velocity_scaling_factor": 0.1, "default_acceleration_scaling_factor": 0.1,
            "joint_limits": out}


def kinematics(robot: RobotSpec) -> dict:
    return {group.name: dict(ARM_SOLVER) for group in robot.groups}


def ompl_planning(robot: RobotSpec) -> dict:
    groups = [g.name for g in robot.groups] + [g.name for g in robot.grippers]
    return {
        "planning_plugins": ["ompl_interface/OMPLPlanner"],
        "request_adapters": ["default_planning_request_adapters/ResolveConstraintFrames",
                             "default_planning_request_adapters/ValidateWorkspaceBounds",
                             "default_planning_request_adapters/CheckStartStateBounds",
                             "default_planning_request_adapters/CheckStartStateCollision"],
        "response_adapters": ["default_planning_response_adapters/AddTimeOptimalParameterization",
                              "default_planning_response_adapters/ValidateSolution",
                              "default_planning_response_adapters/DisplayMotionPath"],
        "planner_configs": PLANNERS,
        **{g: {"planner_configs": list(PLANNERS)} for g in groups},
    }


FILES = ("{robot}.urdf", "{robot}.srdf", "kinematics.yaml", "joint_limits.yaml", "moveit_controllers.yaml",
         "ompl_planning.yaml")


def write(robot: RobotSpec, out: Path | str, samples: int = COLLISION_SAMPLES, seed: int = 0) -> list[Path]:
    """Write the configuration into `out`; the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    header = f"# written by `r2s2r robots moveit {robot.name}`; edit the RobotSpec, not this file\n"

    def dump(data) -> str:
        return header + yaml.safe_dump(data, sort_keys=False)

    contents = {
        f"{robot.name}.urdf": Path(robot.urdf_path).read_text(),
        f"{robot.name}.srdf": srdf(robot, disabled_collisions(robot, samples, seed)),
        "kinematics.yaml": dump(kinematics(robot)),
        "joint_limits.yaml": dump(joint_limits(robot)),
        "moveit_controllers.yaml": dump(controllers(robot)),
        "ompl_planning.yaml": dump(ompl_planning(robot)),
    }
    written = []
    for name, text in contents.items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written
