"""Build a robot's MuJoCo model from its URDF and RobotSpec.

MuJoCo's own URDF importer (via MjSpec) reads kinematics, inertia, limits and primitive
geometry; this module adds what URDF cannot carry: position actuators with per-joint gains
and force limits, gravity compensation routed through the actuators (the real controllers
compensate gravity too), joint damping and armature, a tendon-driven gripper whose control
is its opening in metres, `<group>_flange` / `<group>_tcp` sites, cameras and colours.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import mujoco
import numpy as np

from r2s2r.robots.spec import CameraSpec, RobotSpec

# Geom groups: what a viewer shows by default (0-2) and what it hides (3+).
VISUAL_GROUP = 0
COLLISION_GROUP = 0

# How far beyond the datasheet's position limits a revolute joint's hard stop lies, rad. A real
# arm's mechanical stops lie beyond its software limits; the twin's servos, stopping on a limit at
# speed, overshoot it by about a milliradian, and a stop at the limit itself turned that into an
# acceleration spike (RB-Y1 right_arm_3, 1.065x its limit; docs/safety.md).
HARD_STOP_MARGIN = 0.02


def _link_colours(urdf_path) -> dict[str, tuple[float, float, float, float]]:
    """Link name -> RGBA of its first visual's material, from the URDF."""
    root = ET.parse(urdf_path).getroot()
    named = {}
    for material in root.findall("material"):
        colour = material.find("color")
        if colour is not None:
            named[material.get("name")] = tuple(float(v) for v in colour.get("rgba").split())
    colours = {}
    for link in root.findall("link"):
        visual = link.find("visual")
        material = visual.find("material") if visual is not None else None
        if material is None:
            continue
        colour = material.find("color")
        if colour is not None:
            colours[link.get("name")] = tuple(float(v) for v in colour.get("rgba").split())
        elif material.get("name") in named:
            colours[link.get("name")] = named[material.get("name")]
    return colours


def look_at_quat(pos, target, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """Quaternion (wxyz) of a MuJoCo camera at `pos` looking at `target` (camera looks along -z)."""
    pos, target, up = (np.asarray(v, float) for v in (pos, target, up))
    forward = target - pos
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, up)
    if np.linalg.norm(right) < 1e-9:  # looking straight along `up`
        right = np.cross(forward, (0.0, 1.0, 0.0))
    right /= np.linalg.norm(right)
    cam_up = np.cross(right, forward)
    rot = np.column_stack([right, cam_up, -forward])
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, rot.flatten())
    return quat


def add_camera(parent: mujoco.MjsBody, camera: CameraSpec) -> mujoco.MjsCamera:
    cam = parent.add_camera(name=camera.name, pos=list(camera.pos), fovy=camera.fovy)
    if camera.quat is not None:
        cam.quat = list(camera.quat)
    elif camera.lookat is not None:
        cam.quat = look_at_quat(camera.pos, camera.lookat).tolist()
    cam.resolution = [camera.width, camera.height]
    return cam


def build_robot_spec(robot: RobotSpec) -> mujoco.MjSpec:
    """The robot alone, as an MjSpec a scene can add to (table, objects, cameras)."""
    spec = mujoco.MjSpec.from_file(str(robot.urdf_path))
    spec.modelname = robot.name
    # The URDF's importer element drops its <visual> duplicates at parse time; at compile time the
    # same flag would also drop every material and texture a scene adds (the floor, boards).
    spec.compiler.discardvisual = False
    spec.compiler.autolimits = True
    spec.option.timestep = 1.0 / 1000.0
    # Implicit-fast integration keeps stiff position actuators and damping stable at 1 kHz.
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST

    colours = _link_colours(robot.urdf_path)
    for body in spec.bodies:
        if body.name == "world":
            continue
        body.gravcomp = 1.0
        rgba = colours.get(body.name)
        for geom in body.geoms:
            geom.group = COLLISION_GROUP
            if rgba is not None:
                geom.rgba = list(rgba)

    base = spec.body(robot.base_link)
    if base is None:
        raise ValueError(f"robot {robot.name}: base link {robot.base_link} not in {robot.urdf}")
    base.pos = list(robot.mount_pos)
    base.quat = list(robot.mount_quat)

    limits = robot.limits
    index = 0
    for group in robot.groups:
        for k, name in enumerate(group.joints):
            joint = spec.joint(name)
            if joint is None:
                raise ValueError(f"robot {robot.name}: joint {name} of group {group.name} not in {robot.urdf}")
            joint.damping = [group.damping[k] if group.damping else 0.0, 0.0, 0.0]
            joint.armature = group.armature[k] if group.armature else 0.0
            joint.frictionloss = group.frictionloss[k] if group.frictionloss else 0.0
            joint.actgravcomp = True
            if joint.type == mujoco.mjtJoint.mjJNT_HINGE:
                joint.range = [limits.lower[index] - HARD_STOP_MARGIN, limits.upper[index] + HARD_STOP_MARGIN]
            act = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
            act.set_to_position(kp=group.kp[k], kv=group.kv[k])
            act.ctrlrange = [limits.lower[index], limits.upper[index]]
            act.forcerange = [-limits.effort[index], limits.effort[index]]
            act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
            index += 1
        for role, where in (("flange", group.flange), ("tcp", group.tcp)):
            if where is None:
                continue
            link, offset = where
            body = spec.body(link)
            if body is None:
                raise ValueError(f"robot {robot.name}: {role} link {link} not in {robot.urdf}")
            body.add_site(name=f"{group.name}_{role}", pos=list(offset), size=[0.005, 0.005, 0.005],
                          rgba=[1, 0, 0, 0.0])

    for gripper in robot.grippers:
        _add_gripper(spec, robot, gripper)

    for camera in robot.cameras:
        parent = spec.worldbody if camera.parent is None else spec.body(camera.parent)
        if parent is None:
            raise ValueError(f"robot {robot.name}: camera {camera.name} parent {camera.parent} not in {robot.urdf}")
        add_camera(parent, camera)

    return spec


def _add_gripper(spec: mujoco.MjSpec, robot: RobotSpec, gripper) -> None:
    driver, *followers = gripper.joints
    finger_bodies = []
    for name in gripper.joints:
        joint = spec.joint(name)
        if joint is None:
            raise ValueError(f"robot {robot.name}: finger joint {name} of {gripper.name} not in {robot.urdf}")
        joint.damping = [2.0, 0.0, 0.0]
        joint.armature = 0.01
        finger_bodies.append(joint.parent)
        for geom in joint.parent.geoms:
            geom.friction = list(gripper.friction)
            geom.condim = 4  # torsional friction: a pinched object does not spin out
            geom.priority = 1  # the pads' friction wins over the object's
    # Fingers move together, as the real linkage makes them. MuJoCo's importer already turns a
    # URDF <mimic> into a joint equality: stiffen that one rather than add a second.
    coupled = {(e.name1, e.name2): e for e in spec.equalities if e.type == mujoco.mjtEq.mjEQ_JOINT}
    for name in followers:
        equality = coupled.get((name, driver)) or spec.add_equality(
            type=mujoco.mjtEq.mjEQ_JOINT, name1=name, name2=driver, data=[0, 1] + [0] * 10)
        equality.solref = [0.005, 1.0]
    tendon = spec.add_tendon(name=f"{gripper.name}_opening")
    for name in gripper.joints:
        tendon.wrap_joint(name, 1.0)
    act = spec.add_actuator(name=gripper.name, target=tendon.name, trntype=mujoco.mjtTrn.mjTRN_TENDON)
    act.set_to_position(kp=gripper.kp, dampratio=1.0)
    act.ctrlrange = list(gripper.opening_range)
    act.forcerange = [-gripper.max_force, gripper.max_force]
    act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
    # Sibling fingers may touch when fully closed; that is not a collision to resolve.
    for i, a in enumerate(finger_bodies):
        for b in finger_bodies[i + 1:]:
            spec.add_exclude(bodyname1=a.name, bodyname2=b.name)


def subtree(model: mujoco.MjModel, roots) -> np.ndarray:
    """Per body of `model`, whether it is one of the bodies `roots` or below one of them.
    (MuJoCo numbers a body after its parent, so one pass in order finds them all.)"""
    inside = np.zeros(model.nbody, dtype=bool)
    inside[list(roots)] = True
    for body in range(1, model.nbody):
        inside[body] |= inside[model.body_parentid[body]]
    return inside


def joint_bodies(model: mujoco.MjModel, joints) -> list[int]:
    """The bodies that `joints` (names) move directly."""
    return [int(model.jnt_bodyid[model.joint(name).id]) for name in joints]


def home_qpos(robot: RobotSpec, model: mujoco.MjModel, qpos: np.ndarray | None = None) -> np.ndarray:
    """qpos with the robot at home (arm joints and grippers); other joints keep `qpos`'s values."""
    qpos = model.qpos0.copy() if qpos is None else qpos.copy()
    for name, value in robot.home.items():
        qpos[model.joint(name).qposadr[0]] = value
    openings = [g.opening_range[1] if g.home_opening is None else g.home_opening for g in robot.grippers]
    return with_openings(robot, model, qpos, openings)


def with_openings(robot: RobotSpec, model: mujoco.MjModel, qpos: np.ndarray, openings) -> np.ndarray:
    """`qpos` (changed in place, and returned) with each gripper's finger joints sharing its opening."""
    for gripper, opening in zip(robot.grippers, openings):
        for name in gripper.joints:
            qpos[model.joint(name).qposadr[0]] = opening / len(gripper.joints)
    return qpos


def home_ctrl(robot: RobotSpec, model: mujoco.MjModel) -> np.ndarray:
    ctrl = np.zeros(model.nu)
    for name, value in robot.home.items():
        ctrl[model.actuator(name).id] = value
    for gripper in robot.grippers:
        ctrl[model.actuator(gripper.name).id] = (
            gripper.opening_range[1] if gripper.home_opening is None else gripper.home_opening)
    return ctrl


def build_model(robot: RobotSpec) -> mujoco.MjModel:
    return build_robot_spec(robot).compile()
