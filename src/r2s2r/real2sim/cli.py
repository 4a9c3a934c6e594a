"""`r2s2r record`, `r2s2r reconstruct`, `r2s2r align`, `r2s2r variants` and `r2s2r proxy`.

    r2s2r record --stack config/stacks/franka_fr3_sim.yaml --out episode.mcap [--cameras scene] [--duration 10]
    r2s2r reconstruct episode.mcap --extrinsics cams.yaml [--objects known.yaml] --out scene.yaml
    r2s2r align episode.mcap (--scene scene.yaml | --extrinsics cams.yaml) [--objects known.yaml]
                [--fit] [--excitation other.mcap] [--workers 2 [--backend ray --address A]] --out report_dir
    r2s2r variants (SCENE.yaml | TASK) --out POOL_DIR [--factors geometry,pose_x,...] [--no-grasp]

`align --fit` identifies the arm on `--excitation` (default the episode itself), then the
tracked objects' mass and friction on the episode with the arm held, and writes into --out:
fitted_scene.yaml (the scene with the objects' fitted mass and friction; its `dynamics` note
names the file below), robot_dynamics.yaml (per-joint kp, kv, damping, armature, friction
loss and the command latency) and the before/after report (alignment.html, alignment.json).

`variants` validates a scene (a scene YAML, or a task's: its name or task YAML), generates its
one-factor variants (real2sim.variants), re-validates each and writes the kept ones into
POOL_DIR: one scene YAML each, base.yaml and the index pool.yaml (factor, target, value and
file of each kept variant; the rejected ones with the checks they failed). A perturbation
space's `kind: variant` factor draws trials' scenes from that pool.yaml.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from r2s2r.config import ConfigError, load_yaml


def _stack_robot(stack_path: str) -> tuple[str, str, list[str]]:
    """(robot, namespace, cameras) of a stack's driver node, or of a proxy cell's."""
    from r2s2r.real2sim.proxy_cell import cell_stack
    from r2s2r.stack import load_stack, parse_stack
    cell = _proxy_cell(stack_path)
    stack = parse_stack(cell_stack(cell), cell.source) if cell is not None else load_stack(stack_path)
    driver = next((n for n in stack.nodes if n.executable == "driver_node"), None)
    if driver is None:
        raise ConfigError(stack.source, "nodes", "a driver_node whose robot the recording is of")
    params: dict = {}
    for f in driver.parameter_files:
        for section in load_yaml(f).values():
            if isinstance(section, dict):
                params.update(section.get("ros__parameters", {}) or {})
    params.update(driver.parameters)
    robot = params.get("robot")
    if not robot:
        raise ConfigError(stack.source, f"nodes.{driver.name}.parameters.robot", "the driver's robot")
    cameras = []
    if cell is not None and cell.camera_rate_hz > 0:
        cameras = [c.name for c in cell.scene.all_cameras()]
    elif params.get("backend", "sim") == "sim" and params.get("camera_rate_hz", 30.0) > 0:
        from r2s2r.sim.scene import Scene, load_scene
        scene = load_scene(params["scene"]) if params.get("scene") else Scene(robot=robot)
        cameras = [c.name for c in scene.all_cameras()]
    wanted = [c for c in params.get("cameras", []) if c]
    return robot, driver.namespace, wanted or cameras


def _proxy_cell(path: str):
    """The proxy cell `path` names (a cell file, or a name in config/proxy_cells/), or None for a stack."""
    from r2s2r import paths
    from r2s2r.real2sim.proxy_cell import CELLS_DIR, load_cell
    resolved = paths.resolve(path)
    if resolved.is_file():
        data = load_yaml(resolved)
        return load_cell(resolved) if isinstance(data, dict) and "nodes" not in data else None
    return load_cell(path) if paths.resolve(f"{CELLS_DIR}/{path}.yaml").is_file() else None


def _record(args) -> int:
    from r2s2r.nodes import recorder_node
    robot, namespace, cameras = _stack_robot(args.stack)
    if args.cameras is not None:
        cameras = [c for c in args.cameras.split(",") if c]
    ros = ["--ros-args", "-r", "__node:=recorder", "-p", f"robot:={robot}", "-p", f"out:={args.out}",
           "-p", f"duration_s:={float(args.duration)}", "-p", f"stack:={args.stack}",
           "-p", f"depth:={'true' if not args.no_depth else 'false'}"]
    if cameras:
        ros += ["-p", f"cameras:=[{','.join(cameras)}]"]
    if namespace:
        ros += ["-r", f"__ns:=/{namespace.strip('/')}"]
    if args.use_sim_time:
        ros += ["-p", "use_sim_time:=true"]
    return recorder_node.main(["recorder_node", *ros])


def _markers(objects_path):
    from r2s2r.real2sim.markers import load_known_objects
    known = load_known_objects(objects_path) if objects_path else {}
    return known, {k: v.marker for k, v in known.items() if v.marker is not None}


def _reconstruct(args) -> int:
    from r2s2r.data.episode import load_episode
    from r2s2r.real2sim.reconstruct import load_extrinsics, reconstruct, write_scene
    from r2s2r.real2sim.validate import validate
    episode = load_episode(args.episode)
    known, _ = _markers(args.objects)
    rec = reconstruct(episode, load_extrinsics(args.extrinsics, episode), known)
    path = write_scene(rec.scene, args.out, f"# Reconstructed by `r2s2r reconstruct` from {args.episode}.")
    report = rec.report()
    if not args.no_validate:
        result = validate(rec.scene)
        report["validation"] = result.report()
        if not result.passed:
            print(f"r2s2r reconstruct: the scene fails validation: {result.message()}")
    Path(args.out).with_suffix(".json").write_text(json.dumps(report, indent=1))
    print(f"wrote {path}: {len(rec.objects)} objects; support at {rec.plane_height:.4f} m; camera corrections "
          + ", ".join(f"{c.camera} {1000 * c.translation_m:.1f} mm / {c.rotation_rad * 57.2958:.2f} deg"
                      for c in rec.corrections.values()))
    return 0


def _handled(track, episode) -> bool:
    """Whether the episode moved a tracked object (the only objects whose mass and friction it
    holds): it was seen 1 cm or more from where it started, or it went unseen between sightings
    (a top marker is hidden under the hand that holds the object)."""
    if len(track.positions) < 2:
        return False
    if float(np.linalg.norm(track.positions - track.positions[0], axis=1).max()) > 0.01:
        return True
    frames = next((c.rgb_times for c in episode.cameras.values() if len(c.rgb_times)), np.zeros(0))
    between = frames[(frames > track.times[0]) & (frames < track.times[-1])]
    return bool(len(between) > 1.2 * (len(track.times) - 2) + 2)


def _align(args) -> int:
    from r2s2r.data.episode import load_episode
    from r2s2r.real2sim.align import align, track_objects
    from r2s2r.real2sim.markers import add_markers
    from r2s2r.real2sim.reconstruct import load_extrinsics, reconstruct
    from r2s2r.real2sim.replay import ReplayTwin, setpoints
    from r2s2r.real2sim.report import write_report
    from r2s2r.real2sim.sysid import fit, fit_arm, write_fitted
    from r2s2r.sim.scene import load_scene
    from r2s2r.sim.twin import build_scene_spec
    episode = load_episode(args.episode)
    known, markers = _markers(args.objects)
    reconstruction = None
    if args.scene:
        scene = load_scene(args.scene)
    elif args.extrinsics:
        reconstruction = reconstruct(episode, load_extrinsics(args.extrinsics, episode), known)
        scene = reconstruction.scene
    else:
        raise ConfigError("command line", "--scene", "a scene YAML, or --extrinsics to reconstruct one")
    if scene.robot != episode.robot.name:
        raise ConfigError(args.scene or "reconstruction", "robot", f"the episode's robot {episode.robot.name}",
                          scene.robot)
    spec = build_scene_spec(scene)
    if markers:
        add_markers(spec, {k: m for k, m in markers.items() if k in {o.name for o in scene.objects}})
    rt = ReplayTwin(scene, spec=spec)
    stream = setpoints(episode, rt.twin)
    tracks = track_objects(episode, scene, markers) if markers else []
    before = align(rt, episode, stream, {}, tracks)
    out = Path(args.out)
    fitted = after = None
    if args.fit:
        arm_path = args.excitation or args.episode
        arm_episode = load_episode(arm_path) if args.excitation else episode
        arm_fit = fit_arm(scene, arm_episode, arm_path, workers=args.workers, backend=args.backend,
                          address=args.address, markers=markers)
        fitted = arm_fit
        values = arm_fit.values
        if arm_fit.adequacy:
            print(f"warning: {arm_fit.adequacy}", file=sys.stderr)
        moved = [t.name for t in tracks if _handled(t, episode)]
        if moved:
            object_names = [f"{n}.{k}" for n in moved for k in ("mass", "friction")]
            object_fit = fit(scene, [episode], object_names, tracks=[tracks], fixed=values, workers=args.workers,
                             backend=args.backend, address=args.address,
                             episode_paths=[args.episode], window_s=None, markers=markers or None,
                             global_iterations=0)
            values = object_fit.values
            fitted = arm_fit.report()
            fitted["parameters"] += object_fit.report()["parameters"]
        after = align(rt, episode, stream, values, tracks)
        write_fitted(out, scene, values, rt.parameters)
    json_path, html_path = write_report(out, args.episode, before, after, fitted, reconstruction)
    line = f"joint RMSE {1000 * before.rmse:.3f} mrad"
    if after is not None:
        line += f" -> {1000 * after.rmse:.3f} mrad after the fit"
    print(f"{line}; report {html_path}")
    return 0


def _shown(path) -> str:
    """A path as a person (and a committed file) names it: relative to here when it is below."""
    import os
    full = Path(path).resolve()
    return os.path.relpath(full) if full.is_relative_to(Path.cwd()) else str(full)


def _variant_source(arg: str):
    """(scene, what it is) of `r2s2r variants`' argument: a scene YAML, or a task (name or YAML)."""
    from r2s2r import paths
    from r2s2r.sim.scene import parse_scene
    path = paths.resolve(arg)
    if not path.is_file() and not arg.endswith((".yaml", ".yml")):
        from r2s2r.eval.tasks import load_task, task_names
        if arg not in task_names():
            raise ConfigError("command line", "SCENE", "a scene YAML, or a task name or YAML ("
                              + ", ".join(task_names()) + ")", arg)
        task = load_task(arg)
        return task.base_scene, f"task {task.name} ({_shown(task.source)})"
    data = load_yaml(path)  # a missing file or bad YAML: an error naming it
    if "logic" in data and "scene" in data:  # a task file
        from r2s2r.eval.tasks import load_task
        task = load_task(path)
        return task.base_scene, f"task {task.name} ({_shown(task.source)})"
    return parse_scene(data, str(path)), _shown(path)


def _variants(args) -> int:
    from r2s2r.real2sim.variants import FACTORS, write_pool
    factors = [f for f in (args.factors or "").split(",") if f] or None
    for factor in factors or ():
        if factor not in FACTORS:
            raise ConfigError("command line", "--factors", "variant factors among " + ", ".join(FACTORS), factor)
    scene, origin = _variant_source(args.scene)
    pool, kept, rejected = write_pool(scene, args.out, factors, grasp=not args.no_grasp, source=origin)
    print(f"wrote {pool}: {len(kept)} variants of {origin} kept, {len(rejected)} rejected"
          + "".join(f"\n  rejected {r['factor']}{' of ' + r['target'] if r['target'] else ''} {r['value']:g}: "
                    f"{r['why']}" for r in rejected))
    return 0


def _proxy_up(args) -> int:
    from r2s2r.real2sim.proxy_cell import cell_stack, load_cell
    from r2s2r.stack import StackRunner, parse_stack
    cell = load_cell(args.cell)
    stack = parse_stack(cell_stack(cell, cameras=not args.no_cameras), cell.source,
                        {"real_time_factor": args.real_time_factor})
    print(f"proxy cell {cell.name} ({cell.source}): {cell.scene.robot}, backend proxy; its truth stays hidden",
          flush=True)
    return StackRunner(stack).run()


def _proxy_list(args) -> int:
    from r2s2r import paths
    from r2s2r.real2sim.proxy_cell import CELLS_DIR, load_cell
    for path in sorted(paths.resolve(CELLS_DIR).glob("*.yaml")):
        cell = load_cell(path)
        print(f"{cell.name:24s} {cell.task or cell.scene.source or '':22s} {cell.scene.robot}")
    return 0


def add_real2sim_parsers(sub) -> None:
    """Register `record`, `reconstruct`, `align`, `variants` and `proxy` on the r2s2r command's subparsers."""
    record = sub.add_parser("record", help="record a robot's episode into an MCAP ROS 2 bag")
    record.add_argument("--stack", required=True,
                        help="the stack whose robot is recorded (its driver's topics), or a proxy cell")
    record.add_argument("--out", required=True, help="the bag to write (EPISODE.mcap)")
    record.add_argument("--cameras", default=None, help="comma-separated cameras (default: the stack's)")
    record.add_argument("--duration", type=float, default=0.0, help="seconds (default: until Ctrl-C)")
    record.add_argument("--no-depth", action="store_true", help="leave out depth images")
    record.add_argument("--use-sim-time", action="store_true", help="stamp with the twin's /clock")
    record.set_defaults(func=_record)

    rec = sub.add_parser("reconstruct", help="a scene YAML from an episode's first RGB-D frames")
    rec.add_argument("episode")
    rec.add_argument("--extrinsics", required=True, help="camera extrinsics YAML (r2s2r calibrate handeye)")
    rec.add_argument("--objects", help="known objects: markers, shapes, sizes, meshes")
    rec.add_argument("--out", required=True, help="the scene YAML to write")
    rec.add_argument("--no-validate", action="store_true", help="skip the physical validation")
    rec.set_defaults(func=_reconstruct)

    al = sub.add_parser("align", help="replay an episode in the twin, measure and (--fit) reduce the disagreement")
    al.add_argument("episode")
    al.add_argument("--scene", help="the twin's scene (default: reconstruct it, with --extrinsics)")
    al.add_argument("--extrinsics", help="camera extrinsics YAML, to reconstruct the scene")
    al.add_argument("--objects", help="known objects (markers to track)")
    al.add_argument("--fit", action="store_true", help="fit the twin's parameters and write them")
    al.add_argument("--excitation", help="an episode of free arm motion to identify the arm on")
    al.add_argument("--workers", type=int, default=1)
    al.add_argument("--backend", choices=("process", "ray"), default="process",
                    help="where the fit's CMA-ES generations run: local processes or Ray actors")
    al.add_argument("--address", default=None, help="Ray: 'auto', HOST:PORT or ray://HOST:PORT (default: a local Ray)")
    al.add_argument("--out", default="alignment", help="folder for the report and the fitted files")
    al.set_defaults(func=_align)

    va = sub.add_parser("variants", help="a pool of validated one-factor variants of a scene, for perturbation spaces")
    va.add_argument("scene", help="a scene YAML, or a task (name or YAML) whose scene is varied")
    va.add_argument("--out", required=True, help="the pool's folder (pool.yaml, base.yaml, one YAML per variant)")
    va.add_argument("--factors", default=None, help="comma-separated variant factors (default: all of them)")
    va.add_argument("--no-grasp", action="store_true", help="skip the grasp and release checks")
    va.set_defaults(func=_variants)

    px = sub.add_parser("proxy", help="proxy-real cells: a stand-in for a real cell, served as a real robot's stack")
    pxs = px.add_subparsers(dest="proxy_command", required=True)
    up = pxs.add_parser("up", help="start a proxy-real cell's driver (Ctrl-C stops it)")
    up.add_argument("cell", help="a proxy cell YAML, or the name of one in config/proxy_cells/")
    up.add_argument("--no-cameras", action="store_true", help="publish no camera images")
    up.add_argument("--real-time-factor", type=float, default=1.0, help="1 paces the cell to the wall clock")
    up.set_defaults(func=_proxy_up)
    ls = pxs.add_parser("list", help="the shipped proxy cells")
    ls.set_defaults(func=_proxy_list)


__all__ = ["add_real2sim_parsers"]
