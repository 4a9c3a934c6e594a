"""The expert before and after `r2s2r skills refine`, over the whole perturbation space.

Refines franka_block_in_bowl's expert (--budget search trials, --trials-per-variant trials per
alternative in each cluster, --validation-trials fresh trials to keep or drop each rule), then
evaluates the expert and the expert with its rules on the same --held-out trials drawn over the
whole space (a campaign seed the refinement never used). Prints both success rates with Wilson
95 % intervals, the failure rate's reduction and McNemar's exact p, and the rules. Target
(issue 27): the failure rate at least halved.

Usage: python bench/skills_refine.py [--budget 300] [--trials-per-variant 20] [--validation-trials 40]
                                     [--max-rules 5] [--held-out 1000] [--workers 2] [--out bench_output/skills_refine]
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import yaml

from _machine import machine_line
from r2s2r.eval.runner import plan_eval, run_trials
from r2s2r.eval.stats import mcnemar_exact, wilson
from r2s2r.eval.store import TrialStore
from r2s2r.eval.tasks import load_task
from r2s2r.loop.skills_refine import RefineConfig, refine_skills

TASK = "franka_block_in_bowl"
HELD_OUT_SEED = 20261207  # the held-out trials' campaign seed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--trials-per-variant", type=int, default=20)
    parser.add_argument("--validation-trials", type=int, default=40)
    parser.add_argument("--max-rules", type=int, default=5, help="the largest failure clusters refined")
    parser.add_argument("--held-out", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="bench_output/skills_refine")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(machine_line())
    clock = time.perf_counter()
    refined = refine_skills(RefineConfig(task=TASK, budget=args.budget, trials_per_variant=args.trials_per_variant,
                                         validation_trials=args.validation_trials, max_rules=args.max_rules),
                             out / "refine", args.workers)
    refine_s = time.perf_counter() - clock
    # Named by its rules: the store keys a trial by the policy's path, and other rules are another policy.
    digest = hashlib.sha256(refined.skills.read_bytes()).hexdigest()[:10]
    config = out / f"refined_expert_{digest}.yaml"
    config.write_text(yaml.safe_dump({"uri": f"scripted:{TASK}", "params": {"skills": str(refined.skills)}}))
    task = load_task(TASK)
    store = TrialStore(out / "held_out.sqlite")
    outcomes = {}
    for label, policy in (("expert", f"scripted:{TASK}"), ("refined", str(config))):
        name = f"held-out-{label}" if label == "expert" else f"held-out-{label}-{digest}"
        store.open_campaign(name, {"kind": "bench", "policy": policy, "trials": args.held_out, "seed": HELD_OUT_SEED})
        results = run_trials(plan_eval(policy, task, args.held_out, HELD_OUT_SEED), store, name,
                             workers=args.workers, batch=8)
        outcomes[label] = [r.success for r in results]
    print(f"\nrefinement: {refine_s:.0f} s, {len(refined.rules)} rules kept, {len(refined.dropped)} dropped")
    for rule in refined.rules:
        print(f"  rule: {f'when {rule.when}' if rule.when else 'everywhere'} use {rule.use}; validation {rule.found['validation']}")
    for entry in refined.dropped:
        print(f"  dropped: cluster {entry['cluster']} ({entry['stage']}, {entry['conditions']}): {entry['why']}")
    failures = {}
    for label, o in outcomes.items():
        rate = wilson(sum(o), len(o))
        failures[label] = 1 - rate.rate
        print(f"{label:8s} {sum(o)}/{len(o)} = {rate.rate:.1%} [{rate.low:.1%}, {rate.high:.1%}]")
    only_refined = sum(a and not b for a, b in zip(outcomes["refined"], outcomes["expert"]))
    only_expert = sum(b and not a for a, b in zip(outcomes["refined"], outcomes["expert"]))
    print(f"failure rate {failures['expert']:.1%} -> {failures['refined']:.1%} "
          f"({failures['refined'] / max(failures['expert'], 1e-9):.2f}x; McNemar p = "
          f"{mcnemar_exact(only_refined, only_expert):.3g}, {only_refined} fixed, {only_expert} broken)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
