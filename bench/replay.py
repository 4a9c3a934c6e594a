"""Replay speed of an episode against real time, and wall time of a full fit on one and two workers.

Records proxy-real episodes (real2sim.proxy: hidden gains, damping, friction loss, latency) into
a temporary folder, then prints:
- replay: the episode's length over the wall time of replaying it in the twin (a ratio; with
  and without rendering the camera), and of the setpoint stream's computation (once per episode);
- fit: wall time of `real2sim.sysid.fit` of the arm (kp, kv, damping, friction loss and the
  latency) on the excitation episode, with 1 and with 2 workers, and the parameters it found;
- object fit: wall time of the block's mass and friction fit (least squares from the priors, the
  arm held at its fit) on a pick-and-lift episode with marker tracks, and what it found.

Usage: python bench/replay.py [--duration 3.0] [--workers 1 2]
"""

import argparse
import tempfile
import time
from pathlib import Path

from _machine import machine_line
from r2s2r.data.episode import load_episode
from r2s2r.real2sim.proxy import Hidden, ProxyCell, excitation_script, grasp_lift_script
from r2s2r.real2sim.replay import ReplayTwin, replay, setpoints
from r2s2r.real2sim.sysid import fit
from r2s2r.robots import get_robot
from r2s2r.sim.scene import load_scene
from r2s2r.skills.stages import yaw_of

HIDDEN = {"arm.kp_scale": 0.8, "arm.kv_scale": 1.3, "arm.damping_scale": 2.0, "arm.frictionloss": 0.3,
          "latency_s": 0.012}
OBJECT_HIDDEN = {"block.mass": 0.27, "block.friction": 0.42}
NAMES = ["arm.kp_scale", "arm.kv_scale", "arm.damping_scale", "arm.frictionloss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3.0, help="excitation episode length, s")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    scene = load_scene("config/real2sim/proxy_cell.yaml")
    robot = get_robot(scene.robot)
    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        cell = ProxyCell(scene, Hidden(values=HIDDEN))
        excitation = Path(tmp) / "excitation.mcap"
        cell.record(excitation_script(robot, args.duration), excitation, args.duration + 0.2)
        block = scene.objects[0]
        cmds, length = grasp_lift_script(robot, robot.home_positions, block.pos, yaw_of(block.quat), 0.04, 0.003)
        grasp = Path(tmp) / "grasp.mcap"
        cell.record(cmds, grasp, length, cameras=["scene"], frame_rate_hz=10, depth=False)
        for path in (excitation, grasp):
            episode = load_episode(path)
            rt = ReplayTwin(scene)
            t0 = time.perf_counter()
            stream = setpoints(episode, rt.twin)
            t_sp = time.perf_counter() - t0
            t0 = time.perf_counter()
            replay(rt, episode, stream, HIDDEN)
            t_replay = time.perf_counter() - t0
            line = (f"replay {path.name:16s} {episode.duration:5.2f} s episode: setpoints {t_sp:5.2f} s, physics "
                    f"{t_replay:5.2f} s = {episode.duration / t_replay:6.1f}x real time")
            if episode.cameras:
                t0 = time.perf_counter()
                replay(rt, episode, stream, HIDDEN, cameras=list(episode.cameras))
                t_img = time.perf_counter() - t0
                frames = len(episode.cameras["scene"].rgb_times)
                line += f"; with {frames} rendered frames {t_img:5.2f} s = {episode.duration / t_img:5.1f}x"
            print(line)
        episode = load_episode(excitation)
        for workers in args.workers:
            result = fit(scene, [episode], NAMES, workers=workers, episode_paths=[str(excitation)],
                         use=("position", "velocity", "effort"), global_iterations=15)
            found = ", ".join(f"{p.name} {p.value:.3f} (hidden {HIDDEN[p.name]:.3f})" for p in result.parameters)
            print(f"fit on {workers} worker(s): {result.wall_s:5.1f} s, {result.evaluations} rollouts; offset "
                  f"{1000 * result.offset_s:.2f} ms, latency {1000 * result.latency_s:.2f} ms; {found}")
        # The block: heavier and slipperier than the scene says, lifted and held (mass in the efforts).
        from r2s2r.real2sim.align import track_objects
        from r2s2r.real2sim.markers import load_known_objects
        known = load_known_objects("config/real2sim/proxy_objects.yaml")
        markers = {k: v.marker for k, v in known.items() if v.marker is not None}
        cmds, length = grasp_lift_script(robot, robot.home_positions, block.pos, yaw_of(block.quat), 0.04, 0.008,
                                         lift=0.08, hold_s=0.8, dwell_s=0.4, speed_s=0.45, hover=0.07)
        lift = Path(tmp) / "lift.mcap"
        ProxyCell(scene, Hidden(values={**HIDDEN, **OBJECT_HIDDEN}), markers).record(
            cmds, lift, length, cameras=["scene"], frame_rate_hz=8)
        episode = load_episode(lift)
        t0 = time.perf_counter()
        tracks = track_objects(episode, scene, markers)
        t_track = time.perf_counter() - t0
        objects = fit(scene, [episode], list(OBJECT_HIDDEN), tracks=[tracks], fixed=result.values,
                      workers=max(args.workers), global_iterations=0, window_s=None, max_iters=2)
        found = ", ".join(f"{p.name} {p.value:.3f} +- {p.interval:.3f} (hidden {OBJECT_HIDDEN[p.name]:.3f})"
                          for p in objects.parameters)
        print(f"object fit: tracking {t_track:4.1f} s, fit {objects.wall_s:5.1f} s, {objects.evaluations} rollouts; "
              f"{found}")


if __name__ == "__main__":
    main()
