"""Rigid transforms as 4x4 matrices, quaternions as [w, x, y, z] (the scene YAML's order)."""

from __future__ import annotations

import math

import numpy as np

# A MuJoCo camera looks along its -z with y up; an optical frame (OpenCV, REP-103 `_optical_frame`)
# looks along +z with y down. The two differ by half a turn about x.
MUJOCO_TO_OPTICAL = np.diag([1.0, -1.0, -1.0])


def quat_to_matrix(quat) -> np.ndarray:
    w, x, y, z = np.asarray(quat, float) / np.linalg.norm(quat)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def matrix_to_quat(rotation) -> np.ndarray:
    """[w, x, y, z] with w >= 0 (Shepperd's method: stable for every rotation)."""
    m = np.asarray(rotation, float)
    if m.shape != (3, 3) or not np.allclose(m @ m.T, np.eye(3), atol=1e-6) or np.linalg.det(m) < 0:
        raise ValueError(f"not a rotation matrix (orthonormal, determinant +1): {m.tolist()}")
    trace = np.trace(m)
    if trace > 0:
        s = 2.0 * math.sqrt(1.0 + trace)
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(max(1.0 + m[i, i] - m[j, j] - m[k, k], 1e-300))
        q = [0.0] * 4
        q[0] = (m[k, j] - m[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (m[j, i] + m[i, j]) / s
        q[1 + k] = (m[k, i] + m[i, k]) / s
    q = np.array(q)
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def transform(rotation=None, translation=None) -> np.ndarray:
    out = np.eye(4)
    if rotation is not None:
        out[:3, :3] = rotation
    if translation is not None:
        out[:3, 3] = np.asarray(translation, float).reshape(3)
    return out


def pose_matrix(pos, quat) -> np.ndarray:
    """The 4x4 transform of a position and a [w, x, y, z] quaternion."""
    return transform(quat_to_matrix(quat), pos)


def invert(t: np.ndarray) -> np.ndarray:
    rotation = t[:3, :3]
    return transform(rotation.T, -rotation.T @ t[:3, 3])


def rotation_angle(rotation) -> float:
    """The angle of a rotation matrix, radians."""
    cos = (np.trace(np.asarray(rotation, float)[:3, :3]) - 1.0) / 2.0
    return float(math.acos(min(1.0, max(-1.0, cos))))


def difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(translation distance in metres, rotation angle in radians) between two transforms."""
    return float(np.linalg.norm(a[:3, 3] - b[:3, 3])), rotation_angle(a[:3, :3].T @ b[:3, :3])

