"""How the twin's position drives take their setpoints, and what they can follow.

Setpoints written once per control period are interpolated over the next period (hold_steps,
interpolated): a drive fed a staircase would jump at every step, its joint accelerating far
beyond the limits the staircase keeps on average. And per joint, the acceleration its actuator
can still deliver after holding the arm up, in the worst of the poses sampled over the joint
limits, of which the twin plans with a share.

The twin's actuators are force-limited, and gravity compensation draws on the same force range
(actgravcomp). A setpoint that accelerates faster than the remaining torque allows leaves the
saturated servo behind, and it overshoots the setpoint's speed when it catches up; so the twin
narrows its command limits to this (SimHardware.command_limits), never the datasheet's.
"""

from __future__ import annotations

import dataclasses
import hashlib

import mujoco
import numpy as np

from r2s2r.robots import RobotSpec
from r2s2r.robots.model import joint_bodies, subtree

SAMPLES = 256

# The share of what a joint's actuator can deliver after holding the arm up that the twin plans
# with: the rest is for the other joints' pull. FR3 joint 2, planned at its datasheet limit (0.93
# of that budget), saturated and reached 1.5x its acceleration limit (docs/safety.md).
SERVO_TORQUE_SHARE = 0.65


def hold_steps(robot: RobotSpec, timestep: float) -> int:
    """Physics steps over which a drive moves from one setpoint to the next: one control period."""
    return max(1, round(1.0 / (robot.control_rate_hz * timestep)))


def interpolated(rows: np.ndarray, steps: int) -> np.ndarray:
    """Per physics step targets as the drives apply them from `rows` (one per physics step, as the
    controller held them): each the mean of the last `steps` rows, the first row standing in
    before the start. Written once per period, setpoints are so reached along a line, one period
    late. Twin._step_each does the same step by step."""
    rows = np.asarray(rows, float)
    if steps <= 1 or len(rows) == 0:
        return rows
    padded = np.concatenate([np.repeat(rows[:1], steps, axis=0), rows])
    total = np.cumsum(padded, axis=0)
    return (total[steps:] - total[:-steps]) / steps


_cache: dict[str, np.ndarray] = {}
CACHE_SIZE = 16  # models a process keeps the figures of


def _key(robot: RobotSpec, model: mujoco.MjModel) -> str:
    """What the figures depend on: the robot's own bodies, joints and actuators. A scene's objects
    (a perturbed mass, a distractor) change nothing, so every trial of a campaign shares one entry."""
    bodies = np.flatnonzero(subtree(model, joint_bodies(model, robot.joint_names)))
    dofs = [model.joint(name).dofadr[0] for name in robot.joint_names]
    actuators = [model.actuator(name).id for name in robot.joint_names]
    digest = hashlib.sha256(robot.name.encode())
    for array in (model.dof_armature[dofs], model.actuator_forcerange[actuators], model.body_mass[bodies],
                  model.body_inertia[bodies]):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def twin_command_limits(robot: RobotSpec, model: mujoco.MjModel, limits):
    """`limits` (hardware.safety.SafetyLimits) as the twin's driver commands with them: each joint's
    acceleration at its twin_acceleration_shares and within SERVO_TORQUE_SHARE of what its
    servo can deliver after holding the arm up, the velocities at its twin_velocity_scale. The
    twin's backend and the replay of an episode on the twin (real2sim.replay.setpoints) both plan
    with these."""
    cap = servo_acceleration_limits(robot, model)
    velocity = limits.velocity * min(1.0, robot.twin_velocity_scale)
    acceleration = np.minimum(limits.acceleration * robot.twin_acceleration_shares,
                              cap * SERVO_TORQUE_SHARE)
    return dataclasses.replace(limits, velocity=velocity, acceleration=acceleration)


def servo_acceleration_limits(robot: RobotSpec, model: mujoco.MjModel) -> np.ndarray:
    """Per joint of `robot.joint_names`: the least, over sampled poses, of
    (force range - |gravity compensation|) / own inertia, in rad/s^2 (cached per model). The other
    joints' pull through the off-diagonal inertia is left to SERVO_TORQUE_SHARE and the robot's
    twin_acceleration_shares, their centrifugal pull at speed to its twin_velocity_scale."""
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
    while len(_cache) >= CACHE_SIZE:
        _cache.pop(next(iter(_cache)))
    _cache[key] = np.maximum(budget, 0.0)
    return _cache[key].copy()
