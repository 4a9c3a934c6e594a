"""What the twin's position servos can follow: per joint, the acceleration its actuator can still
deliver after holding the arm up, in the worst of the poses sampled over the joint limits.

The twin's actuators are force-limited, and gravity compensation draws on the same force range
(actgravcomp). A setpoint that accelerates faster than the remaining torque allows leaves the
saturated servo behind, and it overshoots the setpoint's speed when it catches up; so the twin
narrows its command limits to this (SimHardware.command_limits), never the datasheet's.
"""

from __future__ import annotations

import hashlib

import mujoco
import numpy as np

from r2s2r.robots import RobotSpec

SAMPLES = 256

_cache: dict[str, np.ndarray] = {}


def _key(robot: RobotSpec, model: mujoco.MjModel) -> str:
    digest = hashlib.sha256(robot.name.encode())
    for array in (model.dof_armature, model.actuator_forcerange, model.body_mass, model.body_inertia):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def servo_acceleration_limits(robot: RobotSpec, model: mujoco.MjModel) -> np.ndarray:
    """Per joint of `robot.joint_names`: the least, over sampled poses, of
    (force range - |gravity compensation|) / own inertia, in rad/s^2 (cached per model). The other
    joints' pull through the off-diagonal inertia and the velocity terms is left to the twin's
    following-error bound (Twin.servo_lag) and, where it is not enough, the robot's
    twin_velocity_scale."""
    key = _key(robot, model)
    if key in _cache:
        return _cache[key].copy()
    data = mujoco.MjData(model)
    limits = robot.limits
    joints = [model.joint(name) for name in robot.joint_names]
    qpos = np.array([j.qposadr[0] for j in joints])
    dofs = np.array([j.dofadr[0] for j in joints])
    effort = np.array([model.actuator(name).forcerange[1] for name in robot.joint_names])
    rng = np.random.default_rng(0)
    poses = rng.uniform(limits.lower, limits.upper, (SAMPLES, len(joints)))
    budget = np.full(len(joints), np.inf)
    inertia = np.zeros((model.nv, model.nv))
    for pose in poses:
        data.qpos[:] = model.qpos0
        data.qpos[qpos] = pose
        mujoco.mj_forward(model, data)
        mujoco.mj_fullM(model, data, inertia)
        own = inertia[dofs, dofs]
        budget = np.minimum(budget, (effort - np.abs(data.qfrc_gravcomp[dofs])) / own)
    _cache[key] = np.maximum(budget, 0.0)
    return _cache[key].copy()
