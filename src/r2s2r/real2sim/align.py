"""Alignment: how far the twin's replay of an episode is from the recording, on one time base.

- joints: RMSE per joint of position (and the largest deviation) at every joint state;
- objects: position and orientation error at every camera frame, against the objects tracked
  in the recorded images (markers: `track_objects`);
- images: SSIM of the twin's render and the recorded frame, and IoU of the objects' masks
  (the twin's from segmentation, the recording's from depth above the support plane);
- outcome: a task's predicate judged on both (`lifted`, by default: the gripper still holds
  something after the lift);
- keyframes: contact made or lost and grasp closed or opened (gripper commands and the
  fingers' stall), an object's support changing (lifted off / put down, from its track); at
  each, five checks: the largest joint deviation, camera alignment (mean depth residual of the
  robot between the recording and the twin), relative object positions, penetration or missing
  contact in the twin, and appearance (SSIM).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import cv2
import numpy as np

from r2s2r.camera.geometry import matrix_to_quat, quat_to_matrix
from r2s2r.data.episode import Episode
from r2s2r.real2sim.replay import ReplayTwin, Setpoints, Trace, replay
from r2s2r.real2sim.sysid import ObjectTrack

LIFT_M = 0.02  # an object this far above where it rested has left its support
HOLD_OPENING_M = 0.005  # a gripper opening above this after a lift holds something


# -- images ----------------------------------------------------------------------------------------------
def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Structural similarity of two RGB images (grey, 7 x 7 Gaussian windows, Wang et al. 2004)."""
    x = cv2.cvtColor(a, cv2.COLOR_RGB2GRAY).astype(np.float64)
    y = cv2.cvtColor(b, cv2.COLOR_RGB2GRAY).astype(np.float64)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2

    def blur(z):
        return cv2.GaussianBlur(z, (7, 7), 1.5)
    mx, my = blur(x), blur(y)
    sxx, syy, sxy = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
    s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))
    return float(s.mean())


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


# -- object tracking ---------------------------------------------------------------------------------------
def track_objects(episode: Episode, scene, markers: Mapping, camera: str | None = None) -> list[ObjectTrack]:
    """Marked objects' positions at every RGB-D frame of a camera (the scene's corrected pose)."""
    from r2s2r.real2sim.markers import detect_markers
    from r2s2r.real2sim.reconstruct import RobotRenderer, backproject, transform_points
    cams = {c.name: c for c in scene.cameras}
    camera = camera or next((c for c in cams if c in episode.cameras), None)
    if camera is None:
        return []
    stream = episode.calibrated_camera(camera)
    renderer = RobotRenderer(episode, {camera: cams[camera]})
    by_id = {m.id: name for name, m in markers.items()}
    found: dict[str, list] = {n: [] for n in markers}
    try:
        renderer.pose(0.0)
        T_wc = renderer.camera_pose(camera)
        for t, rgb in zip(stream.rgb_times, stream.rgb):
            if not stream.depth:
                break
            _, depth = stream.depth_at(float(t))
            world = transform_points(T_wc, backproject(depth, stream.calibration))
            for s in detect_markers(rgb, stream.calibration, list(markers.values())):
                name = by_id.get(s.id)
                if name is None:
                    continue
                quad = np.zeros(depth.shape, np.uint8)
                cv2.fillConvexPoly(quad, s.corners.astype(np.int32), 1)
                inside = (quad > 0) & np.isfinite(world[..., 2])
                if inside.sum() < 4:
                    continue
                centre_px = s.corners.mean(axis=0)
                height = float(np.median(world[inside][:, 2]))
                ray = T_wc[:3, :3] @ np.array([(centre_px[0] - stream.calibration.cx) / stream.calibration.fx,
                                               (centre_px[1] - stream.calibration.cy) / stream.calibration.fy, 1.0])
                o = T_wc[:3, 3]
                centre = o + ray * (height - o[2]) / ray[2]
                T_wm = T_wc @ s.T_camera_marker
                R = T_wm[:3, :3] @ markers[name].T_object_marker[:3, :3].T
                pos = centre - R @ np.asarray(markers[name].pos)
                found[name].append((float(t), pos, matrix_to_quat(R)))
    finally:
        renderer.close()
    return [ObjectTrack(name, np.array([f[0] for f in v]), np.array([f[1] for f in v]), np.array([f[2] for f in v]))
            for name, v in found.items() if v]


def start_poses(tracks: Sequence[ObjectTrack], scene, before_s: float = 0.2):
    """The scene with each tracked object where the episode's first frames saw it: position from
    the median of the frames before `before_s`, yaw from the marker, upright on its support (so
    a twin replays an episode from where the objects really were, not where the scene had them)."""
    from dataclasses import replace as _replace
    import math
    by_name = {t.name: t for t in tracks}
    support = scene.table.height if scene.table is not None else 0.0
    objects = []
    for o in scene.objects:
        t = by_name.get(o.name)
        if t is None or not len(t.times) or t.times[0] > before_s:
            objects.append(o)
            continue
        first = t.times <= max(before_s, float(t.times[0]))
        pos = np.median(t.positions[first], axis=0)
        R = quat_to_matrix(t.quats[int(np.argmax(first))]) if t.quats is not None else np.eye(3)
        yaw = math.atan2(R[1, 0], R[0, 0])
        objects.append(_replace(o, pos=(float(pos[0]), float(pos[1]), support + o.half_height),
                                quat=(math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))))
    return scene.with_objects(objects)


# -- outcome -----------------------------------------------------------------------------------------------
def gripper_opening(positions: np.ndarray, names: Sequence[str], robot) -> np.ndarray:
    """Openings (sum of finger joints) of the robot's first gripper, per row of `positions`."""
    cols = [list(names).index(j) for j in robot.grippers[0].joints]
    return np.nansum(positions[:, cols], axis=1)


def lifted_outcome(times: np.ndarray, opening: np.ndarray, episode: Episode) -> bool:
    """The default outcome: the gripper, closed on something, still holds it at the end of the
    lift (just before the first opening command after the first closing one)."""
    closes = [c for c in episode.commands if c.kind == "gripper" and c.values[0] < 0.5 * _max_opening(episode)]
    if not closes:
        return False
    opens = [c for c in episode.commands if c.kind == "gripper" and c.time > closes[0].time
             and c.values[0] >= 0.5 * _max_opening(episode)]
    t_end = opens[0].time if opens else times[-1]
    i = max(0, int(np.searchsorted(times, t_end - 0.05)) - 1)
    return bool(opening[i] > HOLD_OPENING_M)


def _max_opening(episode: Episode) -> float:
    return episode.robot.grippers[0].opening_range[1]


# -- keyframes ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Keyframe:
    time: float
    event: str  # grasp_closed, grasp_opened, contact_made, contact_lost, support_changed:<object>


def keyframes(episode: Episode, tracks: Sequence[ObjectTrack] = ()) -> list[Keyframe]:
    """Events of the recording: gripper commands, the fingers stalling on something (contact made)
    or moving again (contact lost), objects leaving or regaining their support."""
    out = []
    robot = episode.robot
    top = _max_opening(episode)
    j = episode.joints
    opening = gripper_opening(j.position, j.names, robot) if robot.grippers else None
    for c in episode.commands:
        if c.kind != "gripper":
            continue
        closing = c.values[0] < 0.5 * top
        out.append(Keyframe(c.time, "grasp_closed" if closing else "grasp_opened"))
        if opening is None:
            continue
        # The fingers stop short of the commanded opening when they meet something.
        after = (j.times > c.time) & (j.times < c.time + 1.0)
        if closing and after.any():
            seg = opening[after]
            speed = np.abs(np.gradient(seg, j.times[after]))
            stalled = np.nonzero((speed < 0.005) & (seg > c.values[0] + 0.003))[0]
            if len(stalled):
                out.append(Keyframe(float(j.times[after][stalled[0]]), "contact_made"))
        elif not closing and after.any():
            seg = opening[after]
            moving = np.nonzero(np.abs(seg - seg[0]) > 0.002)[0]
            if len(moving):
                out.append(Keyframe(float(j.times[after][moving[0]]), "contact_lost"))
    for track in tracks:
        if len(track.times) < 2:
            continue
        rest = track.positions[0, 2]
        up = track.positions[:, 2] > rest + LIFT_M
        for k in np.nonzero(np.diff(up.astype(int)))[0]:
            out.append(Keyframe(float(track.times[k + 1]), f"support_changed:{track.name}"))
    return sorted(out, key=lambda k: k.time)


# -- the whole alignment -------------------------------------------------------------------------------------
@dataclass
class Alignment:
    joint_names: tuple[str, ...]
    joint_rmse: dict[str, float]  # rad
    joint_max: dict[str, float]
    object_position_error: dict[str, list[float]]  # per tracked frame, m
    object_final_error: dict[str, float]
    ssim: list[float]
    mask_iou: list[float]
    outcome_recorded: bool
    outcome_twin: bool
    keyframes: list[dict] = field(default_factory=list)
    times: np.ndarray | None = None  # joint-state times, for plots
    recorded: np.ndarray | None = None
    predicted: np.ndarray | None = None
    frames: list[tuple[float, np.ndarray, np.ndarray]] = field(default_factory=list)  # (t, recorded, twin)
    unstable_at: float | None = None  # the twin diverged here (MuJoCo reset it): nothing after is a replay

    @property
    def rmse(self) -> float:
        """RMSE over every arm joint (rad)."""
        return float(np.sqrt(np.mean(np.square(list(self.joint_rmse.values())))))

    def summary(self) -> dict:
        return {"joint_rmse_rad": self.joint_rmse, "joint_max_rad": self.joint_max, "rmse_rad": self.rmse,
                "object_final_error_m": self.object_final_error,
                "object_mean_error_m": {k: float(np.mean(v)) for k, v in self.object_position_error.items() if v},
                "ssim_mean": float(np.mean(self.ssim)) if self.ssim else None,
                "mask_iou_mean": float(np.mean(self.mask_iou)) if self.mask_iou else None,
                "outcome": {"recorded": self.outcome_recorded, "twin": self.outcome_twin,
                            "agree": self.outcome_recorded == self.outcome_twin},
                "keyframes": self.keyframes, "unstable_at_s": self.unstable_at}


def _recorded_object_mask(depth: np.ndarray, calibration, T_wc: np.ndarray, robot_mask: np.ndarray,
                          support_z: float) -> np.ndarray:
    from r2s2r.real2sim.reconstruct import ABOVE_PLANE_M, backproject, transform_points
    world = transform_points(T_wc, backproject(depth, calibration))
    h = world[..., 2] - support_z
    robot = cv2.dilate(robot_mask.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    return np.isfinite(h) & (h > ABOVE_PLANE_M) & (h < 0.5) & ~robot


def align(rt: ReplayTwin, episode: Episode, stream: Setpoints, values: Mapping[str, float],
          tracks: Sequence[ObjectTrack] = (), camera: str | None = None,
          outcome: Callable[[np.ndarray, np.ndarray, Episode], bool] = lifted_outcome,
          images: bool = True) -> Alignment:
    """Replay the episode with `values` and measure the disagreement (see the module docstring)."""
    cams = [c for c in ([camera] if camera else [c.name for c in rt.scene.cameras]) if c in episode.cameras]
    cams = cams[:1] if images else []
    events = keyframes(episode, tracks)
    trace = replay(rt, episode, stream, values, cameras=cams, contact_times=[k.time for k in events])
    j = episode.joints
    end = stream.nsteps * stream.timestep
    keep = j.times < end - 2 * stream.timestep
    times = j.times[keep]
    pred_rows = trace.sample(times)
    layout = trace.layout
    cols = j.columns(layout.joint_names)
    pred = layout.position(pred_rows)
    meas = j.position[keep][:, cols]
    narm = layout.narm
    err = pred[:, :narm] - meas[:, :narm]
    names = layout.joint_names[:narm]
    rmse = {n: float(np.sqrt(np.nanmean(err[:, i] ** 2))) for i, n in enumerate(names)}
    worst = {n: float(np.nanmax(np.abs(err[:, i]))) for i, n in enumerate(names)}
    obj_err, final_err = {}, {}
    for track in tracks:
        if track.name not in layout.objects or not len(track.times):
            continue
        k = layout.objects.index(track.name)
        p = layout.object_pos(trace.sample(track.times))[:, k]
        e = np.linalg.norm(p - track.positions, axis=1)
        obj_err[track.name] = e.tolist()
        final_err[track.name] = float(e[-1])
    robot = episode.robot
    rec_open = gripper_opening(j.position[keep], j.names, robot) if robot.grippers else np.zeros(len(times))
    twin_open = gripper_opening(pred, layout.joint_names, robot) if robot.grippers else np.zeros(len(times))
    m = rt.model
    fingers = {m.body(int(m.jnt_bodyid[m.joint(n).id])).name for n in robot.gripper_joint_names}
    ssims, ious, frames = [], [], []
    if cams:
        from r2s2r.real2sim.reconstruct import RobotRenderer
        cam = cams[0]
        stream_c = episode.calibrated_camera(cam)
        spec = next(c for c in rt.scene.cameras if c.name == cam)
        robot_r = RobotRenderer(episode, {cam: spec})
        support = rt.scene.table.height if rt.scene.table is not None else 0.0
        try:
            for (t, twin_rgb), (_, twin_mask) in zip(trace.frames[cam], trace.masks[cam]):
                _, rec = stream_c.rgb_at(t)
                ssims.append(ssim(rec, twin_rgb))
                if stream_c.depth:
                    _, depth = stream_c.depth_at(t)
                    robot_r.pose(t)
                    _, robot_mask = robot_r.render(cam)
                    ious.append(iou(_recorded_object_mask(depth, stream_c.calibration, robot_r.camera_pose(cam),
                                                          robot_mask, support), twin_mask > 0))
                frames.append((t, rec, twin_rgb))
            checks = _keyframe_checks(events, trace, episode, tracks, robot_r, stream_c, cam, times, err, fingers)
        finally:
            robot_r.close()
    else:
        checks = _keyframe_checks(events, trace, episode, tracks, None, None, None, times, err, fingers)
    return Alignment(names, rmse, worst, obj_err, final_err, ssims, ious, outcome(times, rec_open, episode),
                     outcome(times, twin_open, episode), checks, times, meas[:, :narm], pred[:, :narm], frames,
                     trace.unstable_at)


def _keyframe_checks(events, trace: Trace, episode, tracks, robot_r, stream_c, cam, times, err,
                     fingers: set[str]) -> list[dict]:
    out = []
    for ev in events:
        i = int(np.clip(np.searchsorted(times, ev.time), 0, len(times) - 1))
        window = slice(max(0, i - 5), min(len(times), i + 6))
        check = {"time": ev.time, "event": ev.event,
                 "largest_deviation_rad": float(np.nanmax(np.abs(err[window]))) if len(err) else None}
        # Camera alignment: the robot's depth in the recording against the twin's, where both see it.
        if robot_r is not None and stream_c.depth:
            t_d, depth = stream_c.depth_at(ev.time)
            robot_r.pose(t_d)
            model_depth, mask = robot_r.render(cam)
            both = mask & np.isfinite(depth)
            diff = np.abs(depth[both] - model_depth[both])
            check["camera_alignment_m"] = float(np.median(diff)) if diff.size else None
        # Relative object positions: pairwise distances in the recording against the twin's.
        near = [t for t in tracks if len(t.times) and np.min(np.abs(t.times - ev.time)) < 0.15]
        rel = []
        for a in range(len(near)):
            for b in range(a + 1, len(near)):
                ta, tb = near[a], near[b]
                ia, ib = np.argmin(np.abs(ta.times - ev.time)), np.argmin(np.abs(tb.times - ev.time))
                d_rec = np.linalg.norm(ta.positions[ia] - tb.positions[ib])
                pa, _ = trace.object_pose(ta.name, ev.time)
                pb, _ = trace.object_pose(tb.name, ev.time)
                rel.append(abs(d_rec - np.linalg.norm(pa - pb)))
        check["relative_position_error_m"] = float(max(rel)) if rel else None
        # Penetration or missing contact in the twin.
        contacts = next((c for t, c in trace.contacts if abs(t - ev.time) < 1e-6), [])
        check["penetration_m"] = float(max([-c.distance for c in contacts] + [0.0]))
        finger_contact = any(c.body1 in fingers or c.body2 in fingers for c in contacts)
        if ev.event == "contact_made":
            check["missing_contact"] = not finger_contact
        # Appearance at the nearest rendered frame.
        if cam is not None and trace.frames.get(cam):
            k = int(np.argmin([abs(t - ev.time) for t, _ in trace.frames[cam]]))
            t_f, twin_rgb = trace.frames[cam][k]
            check["ssim"] = ssim(stream_c.rgb_at(t_f)[1], twin_rgb)
        out.append(check)
    return out


__all__ = ["align", "Alignment", "Keyframe", "keyframes", "track_objects", "start_poses", "ssim", "iou", "lifted_outcome",
           "gripper_opening"]
