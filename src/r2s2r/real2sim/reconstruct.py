"""Scene reconstruction from an episode's first frames and its calibrated cameras.

Per camera (an RGB-D camera with camera_info, and its extrinsics from `r2s2r calibrate handeye`):

1. The camera pose is checked against the robot, whose shape and joint positions are known:
   the depth of every frame that sees the arm is registered to the twin's robot rendered at the
   recorded joints (point-to-plane ICP), together with the support plane's levelness (the
   support is perpendicular to the robot base's z). The correction found is reported and
   applied: a few millimetres and degrees of calibration error would otherwise move every
   object by centimetres.
2. The support plane: RANSAC on the first frames' depth, refined by least squares on its
   inliers.
3. Objects with a fiducial marker (ArUco / AprilTag, from the known-objects file): the marker's
   centre ray meets the plane at the marker's height measured by depth, its corners give the
   yaw; an object resting on the support stands upright on it. Objects without one: connected
   regions of depth above the plane (not robot, not a marked object) whose shape is fitted as a
   box, cylinder or sphere, whichever explains the points best.
4. Each object's size comes from the known-objects file or from its points (extents of the top
   face in the object's frame; a sphere's radius from a constrained sphere fit), its colour from
   the image.

The result is a `Scene` (written with `write_scene` as a scene YAML the twin loads) and a report
of what was found and how well (plane residual, camera correction, per-object fit residuals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

import cv2
import mujoco
import numpy as np
import yaml

from r2s2r.camera.geometry import MUJOCO_TO_OPTICAL, invert, matrix_to_quat, quat_to_matrix
from r2s2r.camera.info import CameraCalibration
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.data.episode import Episode, EpisodeError
from r2s2r.real2sim.markers import KnownObject, detect_markers
from r2s2r.robots import CameraSpec
from r2s2r.sim.fixtures import fixture_dict
from r2s2r.sim.scene import ObjectSpec, Scene, TableSpec
from r2s2r.sim.twin import Twin

DENSITY_PRIOR = 600.0  # kg/m^3: a mass prior for an object of unknown mass (wood, plastic, a filled can)
PLANE_INLIER_M = 0.004
ABOVE_PLANE_M = 0.006  # a point this far above the support belongs to something on it
MIN_OBJECT_PX = 40


class ReconstructionError(ValueError):
    """The episode cannot be reconstructed; the message says why."""


# -- geometry helpers ----------------------------------------------------------------------------------------
def backproject(depth: np.ndarray, calibration: CameraCalibration) -> np.ndarray:
    """H x W x 3 points in the optical frame (NaN where depth is missing)."""
    h, w = depth.shape
    u, v = np.meshgrid(np.arange(w), np.arange(h))
    z = depth.astype(float)
    x = (u - calibration.cx) * z / calibration.fx
    y = (v - calibration.cy) * z / calibration.fy
    return np.stack([x, y, z], axis=-1)


def transform_points(T: np.ndarray, points: np.ndarray) -> np.ndarray:
    return points @ T[:3, :3].T + T[:3, 3]


def fit_plane(points: np.ndarray) -> tuple[np.ndarray, float]:
    """(unit normal n, offset d) with n . p = d, least squares."""
    centre = points.mean(axis=0)
    _, _, vt = np.linalg.svd(points - centre, full_matrices=False)
    n = vt[2]
    return n, float(n @ centre)


def ransac_plane(points: np.ndarray, threshold: float = PLANE_INLIER_M, iterations: int = 300,
                 up: np.ndarray | None = None, max_tilt_rad: float = 0.35, seed: int = 0):
    """The plane with the most inliers (normal within `max_tilt_rad` of `up` when given),
    refined on its inliers. Returns (n, d, inlier mask); n points along `up`."""
    rng = np.random.default_rng(seed)
    best, best_count = None, -1
    n_pts = len(points)
    if n_pts < 3:
        raise ReconstructionError("no depth to find the support plane in (fewer than 3 valid depth pixels)")
    for _ in range(iterations):
        a, b, c = points[rng.choice(n_pts, 3, replace=False)]
        n = np.cross(b - a, c - a)
        norm = np.linalg.norm(n)
        if norm < 1e-9:
            continue
        n /= norm
        if up is not None:
            if n @ up < 0:
                n = -n
            if math.acos(min(1.0, float(n @ up))) > max_tilt_rad:
                continue
        count = int(np.count_nonzero(np.abs(points @ n - n @ a) < threshold))
        if count > best_count:
            best, best_count = (n, float(n @ a)), count
    if best is None:
        raise ReconstructionError("no support plane found: no plane near horizontal in the depth")
    n, d = best
    for _ in range(2):
        inliers = np.abs(points @ n - d) < threshold
        n, d = fit_plane(points[inliers])
        if up is not None and n @ up < 0:
            n, d = -n, -d
    return n, d, np.abs(points @ n - d) < threshold


def _rotvec_matrix(w: np.ndarray) -> np.ndarray:
    angle = float(np.linalg.norm(w))
    if angle < 1e-12:
        return np.eye(3)
    quat = np.zeros(4)
    mujoco.mju_axisAngle2Quat(quat, w / angle, angle)
    return quat_to_matrix(quat)


def _normals(points: np.ndarray) -> np.ndarray:
    """Per-pixel normals of an organised point image (NaN at edges and holes), facing the camera."""
    dx = np.full_like(points, np.nan)
    dy = np.full_like(points, np.nan)
    dx[:, 1:-1] = points[:, 2:] - points[:, :-2]
    dy[1:-1] = points[2:] - points[:-2]
    n = np.cross(dx, dy)
    norm = np.linalg.norm(n, axis=-1, keepdims=True)
    n = n / np.where(norm > 0, norm, np.nan)
    flip = np.sum(n * points, axis=-1) > 0  # make them point back toward the optical centre
    n[flip] *= -1
    return n


# -- the robot as the calibration target --------------------------------------------------------------------
class RobotRenderer:
    """The robot alone with the calibrated cameras, posed at recorded joints: depth, robot mask."""

    def __init__(self, episode: Episode, cameras: Mapping[str, CameraSpec]):
        self.episode = episode
        scene = Scene(robot=episode.robot.name, table=None, cameras=tuple(cameras.values()), robot_cameras=False,
                      lights=())
        self.twin = Twin(scene)
        m = self.twin.model
        self._renderers: dict = {}
        self.robot_geoms = np.array([g for g in range(m.ngeom) if m.geom_bodyid[g] != 0])

    def pose(self, t: float) -> None:
        tw, m, d = self.twin, self.twin.model, self.twin.data
        j = self.episode.joints
        for name in tw.state_joint_names:
            if name in j.names:
                d.qpos[m.joint(name).qposadr[0]] = j.at(t, [name])[0]
        mujoco.mj_forward(m, d)

    def camera_pose(self, camera: str) -> np.ndarray:
        """The camera's optical frame in the world at the current joints (link cameras move)."""
        m, d = self.twin.model, self.twin.data
        i = m.camera(camera).id
        T = np.eye(4)
        T[:3, :3] = d.cam_xmat[i].reshape(3, 3) @ MUJOCO_TO_OPTICAL
        T[:3, 3] = d.cam_xpos[i]
        return T

    def _renderer(self, camera: str) -> mujoco.Renderer:
        if camera not in self._renderers:
            w, h = self.twin.camera_resolution(camera)
            self._renderers[camera] = mujoco.Renderer(self.twin.model, height=h, width=w)
        return self._renderers[camera]

    def render(self, camera: str) -> tuple[np.ndarray, np.ndarray]:
        """(depth in metres, robot mask) from the calibrated camera at the current joints."""
        r = self._renderer(camera)
        r.enable_depth_rendering()
        r.update_scene(self.twin.data, camera)
        depth = r.render().astype(float)
        r.disable_depth_rendering()
        r.enable_segmentation_rendering()
        r.update_scene(self.twin.data, camera)
        seg = r.render()
        r.disable_segmentation_rendering()
        mask = (seg[:, :, 1] == int(mujoco.mjtObj.mjOBJ_GEOM)) & np.isin(seg[:, :, 0], self.robot_geoms)
        return depth, mask

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()


@dataclass(frozen=True)
class CameraCorrection:
    camera: str
    T_correction: np.ndarray  # calibrated optical frame -> corrected optical frame
    translation_m: float
    rotation_rad: float
    robot_rms_m: float  # point-to-plane residual of the robot points after the correction
    robot_points: int
    frames: int


def refine_camera(episode: Episode, camera: str, calibrated: CameraSpec, renderer: RobotRenderer,
                  plane_points_cam: np.ndarray | None, max_frames: int = 4, iterations: int = 12) -> CameraCorrection:
    """The correction of a camera's calibrated pose that registers the recorded depth of the
    robot to the twin's robot at the recorded joints (and keeps the support plane level)."""
    stream = episode.calibrated_camera(camera)
    calib = stream.calibration
    step = 2  # every other pixel: plenty of points, a quarter of the cost
    candidates = []
    for t, depth in zip(stream.depth_times, stream.depth):
        if t < 0 or t > episode.duration:
            continue
        renderer.pose(float(t))
        model_depth, mask = renderer.render(camera)
        count = int(mask[::step, ::step].sum())
        candidates.append((count, float(t), depth, model_depth, mask, renderer.camera_pose(camera)))
    candidates.sort(key=lambda c: -c[0])
    chosen = [c for c in candidates[: max_frames] if c[0] > 50]
    if not chosen:
        return CameraCorrection(camera, np.eye(4), 0.0, 0.0, float("nan"), 0, 0)
    frames = []
    kernel = np.ones((7, 7), np.uint8)
    for _count, _t, depth, model_depth, mask, T_wc in chosen:
        model_pts = backproject(np.where(mask, model_depth, np.nan), calib)
        normals = _normals(model_pts)
        sel = mask & np.isfinite(normals).all(-1)
        sel[::step] &= True
        sub = np.zeros_like(sel)
        sub[::step, ::step] = sel[::step, ::step]
        m_cam = model_pts[sub]
        n_cam = normals[sub]
        near = cv2.dilate(mask.astype(np.uint8), kernel) > 0
        rec = backproject(depth, calib)
        rsub = np.zeros_like(near)
        rsub[::step, ::step] = near[::step, ::step] & np.isfinite(depth[::step, ::step])
        frames.append({"T_wc": T_wc, "model": transform_points(T_wc, m_cam),
                       "normal": n_cam @ T_wc[:3, :3].T, "rec": rec[rsub]})
    from scipy.spatial import cKDTree
    trees = [cKDTree(f["model"]) for f in frames]
    w_total, tau = np.zeros(3), np.zeros(3)
    gate = 0.03
    rms = float("nan")
    used = 0
    for _ in range(iterations):
        A_rows, b_rows = [], []
        R_c, t_c = _rotvec_matrix(w_total), tau
        residuals = []
        for f, tree in zip(frames, trees):
            T_wc = f["T_wc"]
            p_cam = f["rec"] @ R_c.T + t_c  # corrected optical frame -> calibrated optical frame
            p_w = transform_points(T_wc, p_cam)
            dist, idx = tree.query(p_w, distance_upper_bound=gate)
            ok = np.isfinite(dist)
            if not ok.any():
                continue
            m, n = f["model"][idx[ok]], f["normal"][idx[ok]]
            pc = p_cam[ok]
            R_wc = T_wc[:3, :3]
            # r = n . (R_wc (pc + w x pc + dt) + t_wc - m), linear in (w, dt)
            nw = n @ R_wc  # n expressed in the calibrated camera frame
            r0 = np.sum(n * (transform_points(T_wc, pc) - m), axis=1)
            J = np.hstack([np.cross(pc, nw), nw])
            A_rows.append(J)
            b_rows.append(-r0)
            residuals.append(r0)
        if plane_points_cam is not None and len(plane_points_cam):
            # The support is level: its points' heights in the world should not vary.
            T_wc0 = frames[0]["T_wc"]
            p = plane_points_cam[:: max(1, len(plane_points_cam) // 3000)]
            pc = p @ R_c.T + t_c
            z = transform_points(T_wc0, pc)[:, 2]
            ez = T_wc0[:3, :3].T @ np.array([0.0, 0.0, 1.0])
            weight = 0.5
            J = np.hstack([np.cross(pc, ez), np.tile(ez, (len(pc), 1))])
            # Remove the mean: only the tilt is constrained, not the height.
            A_rows.append(weight * (J - J.mean(axis=0)))
            b_rows.append(-weight * (z - z.mean()))
        if not A_rows:
            break
        A, b = np.vstack(A_rows), np.concatenate(b_rows)
        delta, *_ = np.linalg.lstsq(A, b, rcond=None)
        R_new = _rotvec_matrix(delta[:3]) @ R_c
        q = matrix_to_quat(R_new)
        angle = 2 * math.acos(min(1.0, q[0]))
        axis = q[1:] / (np.linalg.norm(q[1:]) or 1.0)
        w_total = axis * angle
        tau = _rotvec_matrix(delta[:3]) @ tau + delta[3:]
        res = np.concatenate(residuals) if residuals else np.zeros(0)
        rms = float(np.sqrt(np.mean(res ** 2))) if len(res) else float("nan")
        used = len(res)
        gate = max(0.008, gate * 0.7)
        if np.linalg.norm(delta) < 1e-6:
            break
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = _rotvec_matrix(w_total), tau
    return CameraCorrection(camera, T, float(np.linalg.norm(tau)), float(np.linalg.norm(w_total)), rms, used,
                            len(frames))


# -- objects -------------------------------------------------------------------------------------------------
@dataclass
class FoundObject:
    name: str
    shape: str
    size: tuple[float, ...]
    pos: np.ndarray
    quat: np.ndarray
    rgba: tuple[float, float, float, float]
    mass: float
    method: str  # "marker" or "segmentation"
    fit_residual_m: float
    points: int
    marker_id: int | None = None

    def spec(self, friction: float = 1.0) -> ObjectSpec:
        return ObjectSpec(name=self.name, shape=self.shape, size=tuple(float(s) for s in self.size),
                          mass=float(self.mass), friction=friction, rgba=self.rgba,
                          pos=tuple(float(v) for v in self.pos), quat=tuple(float(v) for v in self.quat))


def _volume(shape: str, size) -> float:
    if shape == "box":
        return float(np.prod(size))
    if shape == "sphere":
        return 4 / 3 * math.pi * size[0] ** 3
    r, h = size
    return math.pi * r * r * h + (4 / 3 * math.pi * r ** 3 if shape == "capsule" else 0.0)


def _half_height(shape: str, size) -> float:
    return ObjectSpec("x", shape, tuple(size)).half_height


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])


def _frame_on_plane(n: np.ndarray, yaw: float) -> np.ndarray:
    """Rotation whose z is the plane normal and whose x points along `yaw` (projected)."""
    x = np.array([math.cos(yaw), math.sin(yaw), 0.0])
    x = x - (x @ n) * n
    x /= np.linalg.norm(x)
    return np.column_stack([x, np.cross(n, x), n])


def _circle_fit(xy: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Algebraic (Kasa) circle fit: centre, radius, RMS residual."""
    A = np.column_stack([2 * xy, np.ones(len(xy))])
    b = (xy ** 2).sum(axis=1)
    sol, *_ = np.linalg.lstsq(A, b, rcond=None)
    c = sol[:2]
    r = math.sqrt(max(sol[2] + c @ c, 0.0))
    res = np.linalg.norm(xy - c, axis=1) - r
    return c, r, float(np.sqrt(np.mean(res ** 2)))


def _sphere_on_plane(points: np.ndarray, plane_z: float) -> tuple[np.ndarray, float, float]:
    """A sphere resting on the plane z = plane_z: centre (x, y, plane_z + r), radius, RMS residual."""
    from scipy.optimize import least_squares
    c0 = points.mean(axis=0)
    r0 = max(0.005, (points[:, 2].max() - plane_z) / 2)

    def residual(p):
        centre = np.array([p[0], p[1], plane_z + p[2]])
        return np.linalg.norm(points - centre, axis=1) - p[2]
    sol = least_squares(residual, [c0[0], c0[1], r0], bounds=([-np.inf, -np.inf, 0.002], [np.inf, np.inf, 0.5]))
    centre = np.array([sol.x[0], sol.x[1], plane_z + sol.x[2]])
    return centre, float(sol.x[2]), float(np.sqrt(np.mean(sol.fun ** 2)))


def _colour(rgb: np.ndarray, mask: np.ndarray) -> tuple[float, float, float, float]:
    pixels = rgb[mask].astype(float) / 255.0
    if not len(pixels):
        return (0.6, 0.6, 0.6, 1.0)
    c = np.median(pixels, axis=0)
    return (float(c[0]), float(c[1]), float(c[2]), 1.0)


def _fit_unknown(points_w: np.ndarray, n: np.ndarray, d: float, pixel_m: float, origin: np.ndarray):
    """(shape, size, position, yaw, residual) of one region's points above the plane n.p = d:
    a sphere when a sphere resting on the plane explains the points and its height, otherwise
    a box or an upright cylinder by the outline of its flat top (a disc fills about pi/4 of its
    bounding square, a rectangle all of it)."""
    plane_z = d / n[2]
    heights = points_w @ n - d
    top_h = float(np.median(heights[heights > np.percentile(heights, 90) - 0.002]))
    centre, radius, sphere_res = _sphere_on_plane(points_w, plane_z)
    if sphere_res < max(0.0015, 0.06 * radius) and abs(2 * radius - top_h) < 0.2 * top_h:
        return "sphere", (radius,), centre, 0.0, sphere_res
    top = _top_points(points_w, n, d, top_h, origin)
    xy = top[:, :2].astype(np.float32)
    (cx, cy), (w, h), angle = cv2.minAreaRect(xy)
    fill = cv2.contourArea(cv2.convexHull(xy)) / max(w * h, 1e-12)
    c, r, circle_res = _circle_fit(top[:, :2].astype(float))
    height = top_h
    if fill < 0.88:
        return "cylinder", (_disc_radius(top[:, :2]), height), np.array([c[0], c[1], plane_z + height / 2]), \
            0.0, circle_res
    yaw = refine_box_yaw(top[:, :2].astype(float), math.radians(angle), pixel_m)
    ex, ey = _extents(top[:, :2].astype(float), yaw, pixel_m)
    if ex < ey:  # x along the longer side
        ex, ey, yaw = ey, ex, yaw + math.pi / 2
    box_res = float(np.sqrt(max(0.0, 1 - fill)) * min(w, h))
    return "box", (ex, ey, height), np.array([cx, cy, plane_z + height / 2]), yaw, box_res


def _top_points(points_w: np.ndarray, n: np.ndarray, d: float, top_height: float, origin: np.ndarray) -> np.ndarray:
    """Points of a flat top face `top_height` above the plane n.p = d, each moved along its
    camera ray onto that face: depth noise then no longer blurs the face's outline."""
    top = points_w[np.abs(points_w @ n - d - top_height) < 0.002]
    if len(top) < 8:
        return top
    rays = top - origin
    t = (d + top_height - origin @ n) / (rays @ n)
    return origin + rays * t[:, None]


def _extents(xy: np.ndarray, yaw: float, pixel_m: float) -> tuple[float, float]:
    """Extents of points along the axes at `yaw`: the spread of pixel centres plus one pixel's footprint."""
    c, s = math.cos(yaw), math.sin(yaw)
    u = xy @ np.array([c, s])
    v = xy @ np.array([-s, c])
    lo, hi = 2.0, 98.0
    return (float(np.percentile(u, hi) - np.percentile(u, lo)) + pixel_m,
            float(np.percentile(v, hi) - np.percentile(v, lo)) + pixel_m)


def _disc_radius(xy: np.ndarray) -> float:
    """Radius of a disc from the pixel centres that cover it. Centres cover a disc uniformly, so
    95 % of them lie within sqrt(0.95) of its radius; the outermost few per cent, which stray
    pixels of the side wall reach into, are left out."""
    centre = np.median(xy, axis=0)
    for _ in range(2):  # recentre on the rim, not on where the pixels are densest
        r = np.linalg.norm(xy - centre, axis=1)
        rim = xy[r > np.percentile(r, 80)]
        centre, _, _ = _circle_fit(rim)
    return float(np.percentile(np.linalg.norm(xy - centre, axis=1), 95) / math.sqrt(0.95))


def refine_box_yaw(xy: np.ndarray, yaw: float, pixel_m: float, search_rad: float = math.radians(6)) -> float:
    """The yaw near `yaw` whose bounding rectangle of the top-face points is smallest: a box's
    edges fix its yaw better than a small marker's corners do."""
    grid = yaw + np.linspace(-search_rad, search_rad, 61)
    areas = [np.prod(_extents(xy, g, pixel_m)) for g in grid]
    best = int(np.argmin(areas))
    if 0 < best < len(grid) - 1:  # a parabola through the three best
        a0, a1, a2 = areas[best - 1], areas[best], areas[best + 1]
        denom = a0 - 2 * a1 + a2
        offset = 0.5 * (a0 - a2) / denom if denom > 0 else 0.0
        return float(grid[best] + offset * (grid[1] - grid[0]))
    return float(grid[best])


# -- the whole reconstruction --------------------------------------------------------------------------------
@dataclass
class Reconstruction:
    scene: Scene
    objects: list[FoundObject]
    plane_normal: np.ndarray
    plane_height: float
    plane_rms_m: float
    corrections: dict[str, CameraCorrection] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def report(self) -> dict:
        return {
            "support": {"height_m": self.plane_height, "normal": self.plane_normal.tolist(), "rms_m": self.plane_rms_m},
            "cameras": {c.camera: {"correction_translation_m": c.translation_m,
                                   "correction_rotation_deg": math.degrees(c.rotation_rad),
                                   "robot_rms_m": c.robot_rms_m, "robot_points": c.robot_points, "frames": c.frames}
                        for c in self.corrections.values()},
            "objects": [{"name": o.name, "shape": o.shape, "size": list(o.size), "pos": o.pos.tolist(),
                         "quat": o.quat.tolist(), "method": o.method, "fit_residual_m": o.fit_residual_m,
                         "points": o.points, "marker_id": o.marker_id, "mass_prior_kg": o.mass} for o in self.objects],
            "notes": list(self.notes),
        }


def load_extrinsics(path: str | Path, episode: Episode) -> dict[str, CameraSpec]:
    """Calibrated cameras from a camera-extrinsics YAML (what `r2s2r calibrate handeye`
    writes), with resolution and field of view from the episode's camera_info."""
    path = Path(path)
    top = Section(load_yaml(path), str(path))
    top.reject_unknown({"cameras"})
    out = {}
    for sec in top.sections("cameras"):
        sec.reject_unknown({"name", "parent", "pos", "quat", "width", "height", "fovy", "lookat"})
        name = sec.string("name")
        if name not in episode.cameras:
            continue
        calib = episode.calibrated_camera(name).calibration
        fovy = math.degrees(2 * math.atan((calib.height / 2) / calib.fy))
        parent = sec.raw("parent", None)
        if parent == episode.robot.base_link and episode.robot.mount_pos == (0.0, 0.0, 0.0):
            parent = None  # the base frame is the world frame
        lookat = sec.vector("lookat", 3) if sec.has("lookat") else None
        out[name] = CameraSpec(name=name, width=calib.width, height=calib.height, fovy=fovy, pos=sec.vector("pos", 3),
                               quat=sec.vector("quat", 4) if sec.has("quat") else None, lookat=lookat,
                               parent=parent)
    if not out:
        raise ConfigError(path, "cameras", "an entry for a camera the episode recorded: " + ", ".join(episode.cameras))
    return out


def _corrected_spec(spec: CameraSpec, T_wc_cal: np.ndarray, correction: CameraCorrection) -> CameraSpec:
    """The camera spec at its corrected pose (world cameras: a world pose; link cameras keep their parent)."""
    T = T_wc_cal @ correction.T_correction
    if spec.parent is not None:
        # Only a world camera is corrected here; a link camera's correction needs its link pose.
        return spec
    R = T[:3, :3] @ MUJOCO_TO_OPTICAL
    return replace(spec, pos=tuple(float(v) for v in T[:3, 3]), quat=tuple(float(v) for v in matrix_to_quat(R)),
                   lookat=None)


def _still_until(episode: Episode, tolerance_rad: float = 0.002) -> float:
    """When the arm first moves away from where the episode starts (the scene is at rest before)."""
    j = episode.joints
    cols = j.columns(episode.robot.joint_names)
    moved = np.nanmax(np.abs(j.position[:, cols] - j.position[0, cols]), axis=1) > tolerance_rad
    return float(j.times[np.argmax(moved)]) if moved.any() else episode.duration


def reconstruct(episode: Episode, cameras: Mapping[str, CameraSpec], known: Mapping[str, KnownObject] | None = None,
                frames: int = 5, refine_cameras: bool = True, seed: int = 0) -> Reconstruction:
    """The scene of an episode from each calibrated camera's first RGB-D frames: the median of up
    to `frames` of them taken before the arm starts to move."""
    known = dict(known or {})
    markers = {k.marker.id: k for k in known.values() if k.marker is not None}
    renderer = RobotRenderer(episode, cameras)
    notes: list[str] = []
    still_until = _still_until(episode)
    try:
        # Per camera: first frames' points in the calibrated optical frame, the plane, the correction.
        per_camera = {}
        for name, spec in cameras.items():
            stream = episode.calibrated_camera(name)
            if not stream.depth:
                raise EpisodeError(f"{episode.source}: camera {name} recorded no depth "
                                   f"(cameras/{name}/depth/image_raw); reconstruction needs RGB-D")
            still = [i for i, t in enumerate(stream.depth_times) if t <= still_until][:frames] or [0]
            depth = np.nanmedian(np.stack([stream.depth[i] for i in still]), axis=0)
            t0 = float(stream.depth_times[still[0]])
            renderer.pose(t0)
            T_wc = renderer.camera_pose(name)
            _, robot_mask = renderer.render(name)
            pts_cam = backproject(depth, stream.calibration)
            valid = np.isfinite(depth) & ~(cv2.dilate(robot_mask.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0)
            world = transform_points(T_wc, pts_cam)
            up = np.array([0.0, 0.0, 1.0])
            n, d, inl = ransac_plane(world[valid], up=up, seed=seed)
            plane_cam = pts_cam[valid][inl]
            correction = (refine_camera(episode, name, spec, renderer, plane_cam) if refine_cameras
                          else CameraCorrection(name, np.eye(4), 0.0, 0.0, float("nan"), 0, 0))
            T_wc = T_wc @ correction.T_correction
            world = transform_points(T_wc, pts_cam)
            n, d, inl = ransac_plane(world[valid], up=up, seed=seed)
            rgb = stream.rgb_at(t0)[1]
            per_camera[name] = {"T_wc": T_wc, "world": world, "valid": valid, "robot": robot_mask, "rgb": rgb,
                                "depth": depth, "n": n, "d": d, "inliers": inl, "correction": correction,
                                "calib": stream.calibration}
        # One support plane for the cell: the first camera's (cameras agree after correction).
        first = next(iter(per_camera.values()))
        n, d = first["n"], first["d"]
        plane_z = d / n[2]
        plane_pts = first["world"][first["valid"]][first["inliers"]]
        plane_rms = float(np.sqrt(np.mean((plane_pts @ n - d) ** 2)))
        objects: list[FoundObject] = []
        taken: dict[str, np.ndarray] = {}
        for name, pc in per_camera.items():
            objects += _marker_objects(pc, markers, n, d, objects, taken, name, notes)
        for name, pc in per_camera.items():
            objects += _unknown_objects(pc, n, d, objects, taken.get(name), name, notes)
            break  # one camera's segmentation; the others would find the same objects again
        table = _table(plane_pts, plane_z, objects, episode)
        corrected = {name: _corrected_spec(cameras[name], pc["T_wc"] @ invert(pc["correction"].T_correction),
                                           pc["correction"]) for name, pc in per_camera.items()}
        scene = Scene(robot=episode.robot.name, table=table, objects=tuple(o.spec() for o in objects),
                      cameras=tuple(corrected.values()), robot_cameras=False, source=f"reconstructed from {episode.source}")
        return Reconstruction(scene, objects, n, float(plane_z), plane_rms,
                              {k: v["correction"] for k, v in per_camera.items()}, notes)
    finally:
        renderer.close()


def _marker_objects(pc, markers, n, d, found, taken, camera, notes) -> list[FoundObject]:
    calib, rgb, world, depth = pc["calib"], pc["rgb"], pc["world"], pc["depth"]
    T_wc = pc["T_wc"]
    out = []
    sightings = detect_markers(rgb, calib, [k.marker for k in markers.values()])
    done = {o.name for o in found}
    h, w = depth.shape
    above = np.isfinite(world[..., 2]) & ((world @ n - d) > ABOVE_PLANE_M) & ~pc["robot"]
    labels_n, labels = cv2.connectedComponents(above.astype(np.uint8), connectivity=8)
    claimed = np.zeros_like(above)
    pixel_m = float(np.nanmedian(depth)) / calib.fx
    for s in sightings:
        obj = markers[s.id]
        if obj.name in done:
            continue
        quad = np.zeros((h, w), np.uint8)
        cv2.fillConvexPoly(quad, s.corners.astype(np.int32), 1)
        inside = (quad > 0) & np.isfinite(world[..., 2])
        if inside.sum() < 4:
            notes.append(f"{camera}: marker {s.id} ({obj.name}) has no depth under it; skipped")
            continue
        marker_height = float(np.median(world[inside] @ n - d))
        # The marker's centre ray meets the plane parallel to the support at the marker's height.
        origin = T_wc[:3, 3]
        def on_plane(px, height=marker_height, origin=origin):
            ray = T_wc[:3, :3] @ np.array([(px[0] - calib.cx) / calib.fx, (px[1] - calib.cy) / calib.fy, 1.0])
            t = (d + height - n @ origin) / (n @ ray)
            return origin + t * ray
        corners = np.array([on_plane(c) for c in s.corners])
        centre = corners.mean(axis=0)
        x_axis = (corners[1] + corners[2]) - (corners[0] + corners[3])
        yaw_marker = math.atan2(x_axis[1], x_axis[0])
        R_obj_marker = obj.marker.T_object_marker[:3, :3]
        # Upright objects: the marker's yaw in the object frame is fixed by its mounting.
        yaw_offset = math.atan2(R_obj_marker[1, 0], R_obj_marker[0, 0])
        R = _frame_on_plane(n, yaw_marker - yaw_offset)
        # The object's segment: the connected region above the plane under the marker.
        ids = labels[inside]
        ids = ids[ids > 0]
        segment = labels == (np.bincount(ids).argmax() if len(ids) else -1)
        pts = world[segment]
        shape = obj.shape
        size = obj.size
        top_xy = _top_points(pts, n, d, marker_height, origin)[:, :2] if len(pts) else np.zeros((0, 2))
        if shape in (None, "box") and len(top_xy) >= 8:
            yaw = refine_box_yaw(top_xy, yaw_marker - yaw_offset, pixel_m)
            R = _frame_on_plane(n, yaw)
        if size is None:
            if len(top_xy) < 8:
                raise ReconstructionError(f"{camera}: object {obj.name} (marker {s.id}) shows too little of its top "
                                          "face to measure its size; give its size in the known-objects file")
            ex, ey = _extents(top_xy, math.atan2(R[1, 0], R[0, 0]), pixel_m)
            height = marker_height  # a marker of an object of unknown size sits on its top face
            if shape is None:
                _, _, circle_res = _circle_fit(top_xy)
                shape = "cylinder" if circle_res < 0.0015 and abs(ex - ey) < 0.004 else "box"
            radius = _disc_radius(top_xy)
            size = (ex, ey, height) if shape == "box" else (radius, height) if shape == "cylinder" else (radius,)
        pos = centre - R @ np.asarray(obj.marker.pos)
        # An object standing on the support: its base sits on the plane.
        pos = pos + n * ((d + _half_height(shape, size)) - n @ pos)
        residual = float(np.sqrt(np.mean((corners @ n - d - marker_height) ** 2)))
        rgba = obj.rgba or _colour(rgb, segment & ~(quad > 0))
        mass = obj.mass or DENSITY_PRIOR * _volume(shape, size)
        out.append(FoundObject(obj.name, shape, tuple(float(v) for v in size), pos, matrix_to_quat(R), rgba, mass,
                               "marker", residual, int(segment.sum()), s.id))
        claimed |= segment
        done.add(obj.name)
    missing = sorted(set(k.name for k in markers.values()) - done)
    if missing:
        notes.append(f"{camera}: markers of {', '.join(missing)} not seen")
    taken[camera] = claimed
    return out


def _unknown_objects(pc, n, d, found, claimed, camera, notes) -> list[FoundObject]:
    calib, rgb, world, depth = pc["calib"], pc["rgb"], pc["world"], pc["depth"]
    above = np.isfinite(world[..., 2]) & ((world @ n - d) > ABOVE_PLANE_M) & (world @ n - d < 0.5) & ~pc["robot"]
    robot_near = cv2.dilate(pc["robot"].astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
    if claimed is not None:
        above &= ~(cv2.dilate(claimed.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0)
    above = cv2.morphologyEx(above.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8)) > 0
    count, labels, stats, _ = cv2.connectedComponentsWithStats(above.astype(np.uint8), connectivity=8)
    pixel_m = float(np.nanmedian(depth)) / calib.fx
    out = []
    index = 0
    for k in range(1, count):
        segment = labels == k
        if stats[k, cv2.CC_STAT_AREA] < MIN_OBJECT_PX:
            continue
        if (segment & robot_near).sum() > 0.2 * segment.sum():
            notes.append(f"{camera}: a region of {int(segment.sum())} px touching the robot was left out")
            continue
        pts = world[segment]
        shape, size, pos, yaw, residual = _fit_unknown(pts, n, d, pixel_m, pc["T_wc"][:3, 3])
        name = f"object_{index}"
        while any(o.name == name for o in found + out):
            index += 1
            name = f"object_{index}"
        index += 1
        mass = DENSITY_PRIOR * _volume(shape, size)
        out.append(FoundObject(name, shape, tuple(float(v) for v in size), pos, _yaw_quat(yaw), _colour(rgb, segment),
                               mass, "segmentation", residual, int(segment.sum())))
    return out


def _table(plane_pts: np.ndarray, plane_z: float, objects, episode: Episode) -> TableSpec:
    """A table top at the support's height covering what was seen of it, the objects and the robot's base."""
    xy = plane_pts[:, :2]
    lo = np.percentile(xy, 1, axis=0)
    hi = np.percentile(xy, 99, axis=0)
    for o in objects:
        lo = np.minimum(lo, o.pos[:2] - 0.1)
        hi = np.maximum(hi, o.pos[:2] + 0.1)
    base = np.asarray(episode.robot.mount_pos[:2])
    lo = np.minimum(lo, base - 0.05)
    hi = np.maximum(hi, base + 0.05)
    centre = (lo + hi) / 2
    size = hi - lo
    return TableSpec(size=(float(size[0]), float(size[1]), 0.04), center=(float(centre[0]), float(centre[1])),
                     height=float(plane_z))


# -- writing the scene ---------------------------------------------------------------------------------------
def _flow(values) -> list[float]:
    return [round(float(v), 6) for v in values]


def scene_dict(scene: Scene) -> dict:
    """A scene as the YAML mapping parse_scene reads."""
    out: dict = {"robot": scene.robot, "timestep": scene.timestep}
    if scene.table is not None:
        t = scene.table
        out["table"] = {"size": _flow(t.size), "center": _flow(t.center), "height": round(float(t.height), 6),
                        "friction": round(float(t.friction), 6), "rgba": _flow(t.rgba)}
    else:
        out["table"] = None
    out["robot_cameras"] = scene.robot_cameras
    cams = []
    for c in scene.cameras:
        entry = {"name": c.name, "width": c.width, "height": c.height, "fovy": round(float(c.fovy), 6),
                 "pos": _flow(c.pos)}
        if c.quat is not None:
            entry["quat"] = _flow(c.quat)
        else:
            entry["lookat"] = _flow(c.lookat)
        if c.parent is not None:
            entry["parent"] = c.parent
        cams.append(entry)
    if cams:
        out["cameras"] = cams
    out["objects"] = [{"name": o.name, "shape": o.shape, "size": _flow(o.size), "mass": round(float(o.mass), 6),
                       "friction": round(float(o.friction), 6), "rgba": _flow(o.rgba), "pos": _flow(o.pos),
                       "quat": _flow(o.quat), **({"fixed": True} if o.fixed else {})} for o in scene.objects]
    if scene.fixtures:
        out["fixtures"] = [fixture_dict(f) for f in scene.fixtures]
    out["lights"] = [{"name": lt.name, "pos": _flow(lt.pos), "dir": _flow(lt.dir), "diffuse": _flow(lt.diffuse),
                      "castshadow": lt.castshadow} for lt in scene.lights]
    out["shadows"] = scene.shadows
    if scene.seed:
        out["seed"] = scene.seed
    return out


def write_scene(scene: Scene, path: str | Path, header: str = "") -> Path:
    """Write a scene YAML that load_scene reads back to the same scene (its dynamics file, if it
    names one, by a path relative to the scene's folder)."""
    import os
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = scene_dict(scene)
    if scene.dynamics is not None:
        data["dynamics"] = os.path.relpath(Path(scene.dynamics.source).resolve(), path.parent.resolve())
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110)
    path.write_text((header.rstrip() + "\n" if header else "") + text)
    return path


__all__ = ["reconstruct", "Reconstruction", "FoundObject", "CameraCorrection", "ReconstructionError",
           "load_extrinsics", "write_scene", "scene_dict", "ransac_plane", "backproject", "refine_camera",
           "RobotRenderer"]
