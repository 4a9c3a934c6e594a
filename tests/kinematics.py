"""Independent forward kinematics for the tests: Denavit-Hartenberg tables evaluated with
numpy only, never through MuJoCo or the URDF, so a model error cannot hide in both; and the
comparison of a robot's joint limits with its datasheet."""

from __future__ import annotations

import numpy as np
import pytest


def rot_x(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1.0]])


def rot_z(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0, 0], [s, c, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])


def trans(x, y, z):
    t = np.eye(4)
    t[:3, 3] = (x, y, z)
    return t


def modified_dh(table, q):
    """Craig's convention: T_i = RotX(alpha_{i-1}) TransX(a_{i-1}) RotZ(theta_i + offset) TransZ(d_i).

    `table` rows are (a, d, alpha, theta_offset); len(q) may be shorter (trailing fixed frames).
    """
    t = np.eye(4)
    for i, (a, d, alpha, offset) in enumerate(table):
        theta = (q[i] if i < len(q) else 0.0) + offset
        t = t @ rot_x(alpha) @ trans(a, 0, 0) @ rot_z(theta) @ trans(0, 0, d)
    return t


def standard_dh(table, q):
    """Classic convention: T_i = RotZ(theta_i + offset) TransZ(d_i) TransX(a_i) RotX(alpha_i)."""
    t = np.eye(4)
    for i, (a, d, alpha, offset) in enumerate(table):
        theta = (q[i] if i < len(q) else 0.0) + offset
        t = t @ rot_z(theta) @ trans(0, 0, d) @ trans(a, 0, 0) @ rot_x(alpha)
    return t


def rotation_angle_deg(r1, r2) -> float:
    """Angle of the rotation taking r1 to r2, degrees."""
    cos = (np.trace(r1.T @ r2) - 1) / 2
    return float(np.degrees(np.arccos(np.clip(cos, -1, 1))))


def rot_y(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s, 0], [0, 1, 0, 0], [-s, 0, c, 0], [0, 0, 0, 1.0]])


def rot_axis(axis, a):
    """Rotation by `a` about the unit vector `axis` (Rodrigues' formula), as a 4x4 transform."""
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    skew = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    t = np.eye(4)
    t[:3, :3] = np.eye(3) + np.sin(a) * skew + (1 - np.cos(a)) * skew @ skew
    return t


def joint_origin_chain(chain, q):
    """Vendors that publish joint origins instead of a DH table: each row is (xyz, rpy, axis).

    T_i = Trans(xyz) RotZ(yaw) RotY(pitch) RotX(roll) Rot(axis, q_i), the URDF reading of a
    joint origin; a row whose axis is None is a fixed frame and consumes no joint value.
    """
    t = np.eye(4)
    values = iter(q)
    for xyz, (roll, pitch, yaw), axis in chain:
        t = t @ trans(*xyz) @ rot_z(yaw) @ rot_y(pitch) @ rot_x(roll)
        if axis is not None:
            t = t @ rot_axis(axis, next(values))
    return t


def check_site_against(twin, site: str, joints, low, high, forward, seed: int, samples: int = 25) -> None:
    """`site`'s world pose in the twin against `forward(q)` (an independent 4x4 FK) at `samples`
    random configurations of `joints` within [low, high]: under 1 mm and 0.1 degree."""
    import mujoco
    rng = np.random.default_rng(seed)
    adr = [twin.model.joint(j).qposadr[0] for j in joints]
    for _ in range(samples):
        q = rng.uniform(low, high)
        twin.data.qpos[adr] = q
        mujoco.mj_kinematics(twin.model, twin.data)
        expected = forward(q)
        pose = twin.data.site(site)
        assert np.linalg.norm(pose.xpos - expected[:3, 3]) < 1e-3, f"{site} at q={q}"
        assert rotation_angle_deg(pose.xmat.reshape(3, 3), expected[:3, :3]) < 0.1, f"{site} at q={q}"


def tcp_offset(twin, flange: str, tcp: str) -> np.ndarray:
    """Where site `tcp` is, in site `flange`'s frame, at the twin's current joint positions."""
    import mujoco
    mujoco.mj_kinematics(twin.model, twin.data)
    f, t = twin.data.site(flange), twin.data.site(tcp)
    return f.xmat.reshape(3, 3).T @ (t.xpos - f.xpos)


def check_limits_against_datasheet(robot, q_min, q_max, dq_max, ddq_max, tau_max) -> None:
    """`robot`'s joint limits are its datasheet's: positions and speeds (published in degrees)
    to 1e-12 rad, accelerations and efforts exactly as published."""
    limits = robot.limits
    assert limits.lower == pytest.approx(q_min, abs=1e-12)
    assert limits.upper == pytest.approx(q_max, abs=1e-12)
    assert limits.velocity == pytest.approx(dq_max, abs=1e-12)
    assert limits.acceleration.tolist() == ddq_max
    assert limits.effort.tolist() == tau_max
