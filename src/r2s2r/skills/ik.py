"""Inverse kinematics of a joint group's `<group>_tcp` site: damped least squares on MuJoCo
Jacobians of a private copy of the robot model, so a policy never touches the twin it drives.

One iteration is a forward kinematics pass, a 6 x n Jacobian and a 6 x 6 solve (tens of
microseconds for a 7-joint arm). Seeded from a nearby solution, as a path's consecutive
waypoints are, two iterations converge; from far away `solve` takes more.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from r2s2r.robots.model import build_model
from r2s2r.robots.spec import RobotSpec


def quat_to_mat(quat) -> np.ndarray:
    mat = np.empty(9)
    mujoco.mju_quat2Mat(mat, np.asarray(quat, float))
    return mat.reshape(3, 3)


def mat_to_quat(mat) -> np.ndarray:
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, np.asarray(mat, float).ravel())
    return quat


def rotation_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """The rotation vector (world frame) that turns `current` into `target` (3 x 3 matrices)."""
    error = np.empty(3)
    mujoco.mju_quat2Vel(error, mat_to_quat(target @ current.T), 1.0)
    return error


@dataclass(frozen=True)
class IKResult:
    q: np.ndarray
    position_error: float  # m
    rotation_error: float  # rad

    def reached(self, position_tol: float = 0.005, rotation_tol: float = 0.05) -> bool:
        return self.position_error <= position_tol and self.rotation_error <= rotation_tol


class ArmIK:
    """IK of one joint group (`arm`, `left_arm`, ...) of a robot.

    `damping` is the DLS damping (metres-equivalent); near singularities or beyond reach the
    solution stretches toward the target without blowing up. A null-space pull toward
    `posture` (default: the home pose) keeps a redundant arm's elbow where the home pose has it.
    """

    def __init__(self, robot: RobotSpec, group: str = "arm", damping: float = 0.03,
                 rotation_weight: float = 0.4, posture_gain: float = 0.05, max_step: float = 0.3,
                 posture: np.ndarray | None = None):
        self.robot = robot
        self.group = robot.group(group)
        self.model = build_model(robot)
        self.data = mujoco.MjData(self.model)
        m = self.model
        self.site = m.site(f"{group}_tcp").id
        self._qadr = np.array([m.joint(j).qposadr[0] for j in self.group.joints])
        self._dadr = np.array([m.joint(j).dofadr[0] for j in self.group.joints])
        index = [robot.joint_names.index(j) for j in self.group.joints]
        margin = 0.01  # stay off the hard limits, where the controller would reject the target
        self.lower = robot.limits.lower[index] + margin
        self.upper = robot.limits.upper[index] - margin
        self.posture = np.array([robot.home[j] for j in self.group.joints]) if posture is None \
            else np.asarray(posture, float)
        self.damping = damping
        self.rotation_weight = rotation_weight
        self.posture_gain = posture_gain
        self.max_step = max_step
        self._jacp = np.zeros((3, m.nv))
        self._jacr = np.zeros((3, m.nv))
        self._jac = np.zeros((6, len(self.group.joints)))
        self._error = np.zeros(6)
        self._damping_eye = damping ** 2 * np.eye(6)

    def _kinematics(self, q: np.ndarray) -> None:
        self.data.qpos[self._qadr] = q
        mujoco.mj_kinematics(self.model, self.data)

    def fk(self, q) -> tuple[np.ndarray, np.ndarray]:
        """TCP position and rotation matrix at joint positions `q` (the group's order)."""
        self._kinematics(np.asarray(q, float))
        site = self.data.site(self.site)
        return site.xpos.copy(), site.xmat.reshape(3, 3).copy()

    def solve(self, position, rotation, seed, iterations: int = 2, tol: float = 1e-4) -> IKResult:
        """Joint positions that put the TCP at `position` with `rotation` (3 x 3), from `seed`."""
        q = np.clip(np.asarray(seed, float), self.lower, self.upper)
        position = np.asarray(position, float)
        rotation = np.asarray(rotation, float)
        w = self.rotation_weight
        jac, error = self._jac, self._error
        redundant = len(q) > 6
        for i in range(iterations + 1):
            self._kinematics(q)
            site = self.data.site(self.site)
            e_pos = position - site.xpos
            e_rot = rotation_error(rotation, site.xmat.reshape(3, 3))
            pos_err, rot_err = float(np.linalg.norm(e_pos)), float(np.linalg.norm(e_rot))
            if (pos_err < tol and rot_err < 10 * tol) or i == iterations:
                break
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site)
            jac[:3] = self._jacp[:, self._dadr]
            jac[3:] = w * self._jacr[:, self._dadr]
            error[:3] = e_pos
            error[3:] = w * e_rot
            jjt = jac @ jac.T
            dq = jac.T @ np.linalg.solve(jjt + self._damping_eye, error)
            if redundant:
                # The posture pull acts only in the Jacobian's null space: (I - J+ J) z, with the
                # (barely damped) pseudo-inverse, not the DLS one, which would leave an error.
                pull = self.posture_gain * (self.posture - q)
                dq += pull - jac.T @ np.linalg.solve(jjt + 1e-9 * np.eye(6), jac @ pull)
            step = np.max(np.abs(dq))
            if step > self.max_step:
                dq *= self.max_step / step
            q = np.clip(q + dq, self.lower, self.upper)
        return IKResult(q, pos_err, rot_err)


__all__ = ["ArmIK", "IKResult", "quat_to_mat", "mat_to_quat", "rotation_error"]
