"""Steps per second of bare `mujoco.mj_step` on the Franka scene against the twin core's step
with privileged-state extraction (joint state, object poses), as a ratio in one run.

Target: ratio >= 0.9.  Usage: python bench/twin_step.py [--steps N] [--scene FILE]
"""

import argparse
import time

import mujoco

from _machine import machine_line
from r2s2r.sim.scene import load_scene
from r2s2r.sim.twin import Twin, build_scene_spec


def best_rates(fns, steps: int, repeats: int = 9) -> list[float]:
    """Best of N for each, interleaved so a busy moment on a shared machine hits both alike."""
    best = [0.0] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn(steps)
            best[i] = max(best[i], steps / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--scene", default="config/scenes/franka_table.yaml")
    args = parser.parse_args()
    scene = load_scene(args.scene)
    twin = Twin(scene)
    # The bare loop runs the same scene without the twin's privileged-state sensors.
    model = build_scene_spec(scene, privileged_sensors=False).compile()
    data = mujoco.MjData(model)
    data.qpos[:] = twin.data.qpos
    data.ctrl[:] = twin.data.ctrl

    def bare(n):
        for _ in range(n):
            mujoco.mj_step(model, data)

    def core(n):
        for _ in range(n):
            twin.step()

    bare_rate, core_rate = best_rates([bare, core], args.steps)
    print(f"{machine_line()}, "
          f"mujoco {mujoco.__version__}")
    print(f"scene: {args.scene} ({model.nbody} bodies, {model.nv} dofs, timestep {model.opt.timestep * 1e3:g} ms)")
    print(f"bare mj_step:          {bare_rate:10.0f} steps/s")
    print(f"twin step + extraction:{core_rate:10.0f} steps/s  (joint state, efforts, object poses as "
          f"{twin.model.nsensordata} sensor values)")
    print(f"ratio (target >= 0.9): {core_rate / bare_rate:10.3f}")


if __name__ == "__main__":
    main()
