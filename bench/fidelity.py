"""Does the twin's ranking of policies transfer to the proxy-real cells? `r2s2r fidelity` on each.

For each shipped franka_block_in_bowl proxy cell, runs the fidelity study (loop.fidelity:
record an excitation in the cell, fit the twin, run every policy in the fitted twin, the
nominal twin and the cell through the ROS graph from the same initial conditions) on the six
study policies (config/policies/block_in_bowl_study/) and prints, per cell: MMRV, Pearson and
Spearman of the fitted and of the nominal twin against the cell, the stage distributions'
distance, how often the twin gave the cell's outcome from the same start, near-miss
reproduction and the wall time. Targets (issue 25): fitted MMRV <= 0.05 and Pearson >= 0.9 on
every cell, the nominal twin measurably worse on at least one.

aloha_cube_handover's cell is left out: the handover has one policy (its expert), and a
ranking needs several.

Usage: python bench/fidelity.py [--sim-trials 100] [--real-trials 10] [--workers 2]
                                [--real-time-factor 2] [--cells NAME ...] [--policies P ...] [--out DIR]
"""

import argparse
import time
from pathlib import Path

from _machine import machine_line
from _ros import isolate_ros_domain

from r2s2r import paths
from r2s2r.loop.fidelity import FidelityConfig, run_study

TASK = "franka_block_in_bowl"
CELLS = ["block_in_bowl_worn", "block_in_bowl_stiff", "block_in_bowl_laggy"]
POLICIES = ["expert", "regrasp", "shallow", "slow", "loose", "shallow_loose"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim-trials", type=int, default=100)
    parser.add_argument("--real-trials", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--real-time-factor", type=float, default=2.0,
                        help="the cells' pace (1 is a real cell's; the scripted policies keep up at 2)")
    parser.add_argument("--envelope", default="operating")
    parser.add_argument("--cells", nargs="+", default=CELLS)
    parser.add_argument("--policies", nargs="+", default=POLICIES,
                        help="study policies by name (config/policies/block_in_bowl_study/NAME.yaml), or any policy "
                             "URI or checkpoint path")
    parser.add_argument("--out", default="bench_out/fidelity")
    args = parser.parse_args()
    isolate_ros_domain()
    policies = [str(paths.resolve(f"config/policies/block_in_bowl_study/{p}.yaml")) if p in POLICIES else p
                for p in args.policies]
    print(f"# fidelity: {len(args.cells)} cells x {len(policies)} policies; {args.sim_trials} twin trials and "
          f"{args.real_trials} cell trials per policy (rtf {args.real_time_factor:g}), envelope {args.envelope}; "
          f"{machine_line()}")
    rows = []
    for cell in args.cells:
        t0 = time.monotonic()
        study = run_study(FidelityConfig(cell=cell, task=TASK, policies=tuple(policies), sim_trials=args.sim_trials,
                                         real_trials=args.real_trials, envelope=args.envelope,
                                         real_time_factor=args.real_time_factor),
                          Path(args.out) / cell, workers=args.workers, progress=False, log=lambda m: None)
        wall = time.monotonic() - t0
        print(f"\n## {cell} ({wall:.0f} s; fit {study.wall_s['fit']:.0f} s, twin trials "
              f"{study.wall_s['twin_trials']:.0f} s, cell trials {study.wall_s['cell_trials']:.0f} s)")
        width = max(14, *(len(k) for k in study.rates["cell"]))
        print(f"{'policy':{width}s} {'cell':>7s} {'fitted':>7s} {'nominal':>7s}  stage TV fitted / nominal")
        for label in study.rates["cell"]:
            r = {side: study.rates[side][label]["rate"] for side in ("cell", "fitted", "nominal")}
            print(f"{label:{width}s} {r['cell']:7.0%} {r['fitted']:7.0%} {r['nominal']:7.0%}  "
                  f"{study.stage_distance['fitted'][label]:.2f} / {study.stage_distance['nominal'][label]:.2f}")
        nm = study.near_misses
        for side in ("fitted", "nominal"):
            a = study.agreement[side]
            near = (f"{nm[side]['same_outcome']}/{nm['count']} same outcome, median |margin diff| "
                    f"{nm[side]['median_abs_margin_difference']:.4f}") if nm["count"] else "no near-misses"
            print(f"{side:8s} MMRV {a['mmrv']:.3f}  Pearson {a['pearson']:.3f}  Spearman {a['spearman']:.3f}  "
                  f"stage TV {study.stage_distance[side]['all policies']:.3f}  same outcome from the same start "
                  f"{study.paired[side]['rate']:.0%}  near-misses: {near}")
        rows.append((cell, study))
    print("\n| cell | MMRV fitted / nominal | Pearson fitted / nominal | Spearman fitted / nominal | "
          "stage TV fitted / nominal | same outcome fitted / nominal | near-misses reproduced fitted / nominal |")
    print("|---|---|---|---|---|---|---|")
    for cell, s in rows:
        f, n = s.agreement["fitted"], s.agreement["nominal"]
        nm = s.near_misses
        near = (f"{nm['fitted']['same_outcome']} / {nm['nominal']['same_outcome']} of {nm['count']}"
                if nm["count"] else "none")
        print(f"| {cell} | {f['mmrv']:.3f} / {n['mmrv']:.3f} | {f['pearson']:.3f} / {n['pearson']:.3f} | "
              f"{f['spearman']:.3f} / {n['spearman']:.3f} | {s.stage_distance['fitted']['all policies']:.3f} / "
              f"{s.stage_distance['nominal']['all policies']:.3f} | {s.paired['fitted']['rate']:.0%} / "
              f"{s.paired['nominal']['rate']:.0%} | {near} |")


if __name__ == "__main__":
    main()
