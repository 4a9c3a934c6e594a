"""Soaks of franka_block_in_bowl through the live graph: `r2s2r soak` for each policy given, one
after the other. To soak two at once, run this benchmark twice, each with a ROS_DOMAIN_ID of its
own (every soak's policy node answers to /policy).

For each: episodes, success rate with its Wilson 95 % interval, interventions by cause (and
each one's minute and detail), and each node's memory (first, last, growth per hour after the
first minute) and mean CPU. Targets (issue 27): an hour with the refined skills without one
intervention; with a trained policy, its success rate and interventions over the hour.

A policy is a URI, a policy config, or a checkpoint folder (RUN/checkpoints/step_NNNNNN).

Usage: python bench/soak.py --policy scripted:franka_block_in_bowl [--policy RUN/checkpoints/step_N ...]
                            [--duration 1h] [--envelope operating] [--out bench_output/soak]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from _machine import machine_line
from _ros import isolate_ros_domain
from r2s2r.loop.soak import SoakConfig, parse_duration, run_soak, summary

TASK = "franka_block_in_bowl"


def _report(policy: str, soak) -> None:
    s = summary(soak)
    rate = s["success_rate"]
    print(f"\n## {policy}: {s['episodes']} episodes in {s['wall_s'] / 60:.1f} min")
    if rate:
        print(f"success {s['successes']}/{s['episodes']} = {rate['rate']:.1%} [{rate['low']:.1%}, {rate['high']:.1%}]; "
              f"failures {s['failures']}")
    c = s["commands"]
    print(f"commands refused by the driver's checks: {c['rejected']} of {c['accepted'] + c['rejected']}, "
          f"in {c['episodes_with_rejections']} episodes")
    print(f"interventions {len(s['interventions'])}: "
          + (", ".join(f"{k} {v}" for k, v in s["interventions_by_cause"].items()) or "none"))
    for i in s["interventions"]:
        print(f"  episode {i['episode']} at {i['at_s'] / 60:.1f} min: {i['cause']}: {i['detail']}")
    for node, m in s["memory"].items():
        print(f"{node}: {m['first_mb']:.0f} -> {m['last_mb']:.0f} MB (max {m['max_mb']:.0f}), "
              f"{m['growth_mb_per_h']:+.1f} MB/h after the first minute, {m['growth_mb_per_h_second_half']:+.1f} "
              f"MB/h over the second half; CPU {m['cpu_percent_mean']:.0f} % of a core")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", action="append", required=True)
    parser.add_argument("--duration", default="1h")
    parser.add_argument("--envelope", default="operating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench_output/soak")
    args = parser.parse_args()
    domain = isolate_ros_domain()
    print(f"{machine_line()}; {len(args.policy)} soak(s) of {args.duration}, envelope {args.envelope}, "
          f"ROS domain {domain}", flush=True)
    duration = parse_duration(args.duration)

    for i, policy in enumerate(args.policy):
        config = SoakConfig(task=TASK, policy=policy, duration_s=duration, envelope=args.envelope, seed=args.seed + i)
        _report(policy, run_soak(config, Path(args.out) / f"soak_{i}", progress=True))
    print(f"\nmachine load at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
