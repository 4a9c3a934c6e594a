"""`r2s2r improve` (loop.improve), `r2s2r skills refine` (loop.skills_refine), `r2s2r soak` (loop.soak) and
`r2s2r fidelity` (loop.fidelity).

    r2s2r improve --task T --policy RUN_OR_CHECKPOINT --rounds K --search-budget S --demos-per-round M
                  [--envelope E] [--control uniform] [--held-out 500] [--retrain scratch|finetune] --out DIR
    r2s2r skills refine --task T [--budget 300] [--factors a,b] --out SKILLS.yaml
    r2s2r soak --task T --policy P [--duration 1h] --out DIR
    r2s2r fidelity --cell CELL --task T --policies P1 P2 ... [--sim-trials 2000 --real-trials 100] --out DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from r2s2r.eval.cli import _count
from r2s2r.resumable import run_resumable


def _improve(args) -> int:
    from r2s2r.data.lerobot_v3 import DatasetError
    from r2s2r.eval.runner import TrialError
    from r2s2r.eval.store import StoreError
    from r2s2r.loop.improve import ImproveConfig, ImproveError, run_improve
    from r2s2r.policy.types import PolicyError
    from r2s2r.train.trainer import TrainError
    config = ImproveConfig(task=args.task, policy=args.policy, rounds=args.rounds, search_budget=args.search_budget,
                           demos_per_round=args.demos_per_round, envelope=args.envelope, control=args.control,
                           held_out=args.held_out, seed=args.seed, sampler=args.sampler, retrain=args.retrain,
                           train_steps=args.train_steps, boundary_share=args.boundary_share,
                           relabelled_per_round=args.relabelled_per_round, targeted_share=args.targeted_share)
    improvement, code = run_resumable(
        "improve", lambda: run_improve(config, args.out, workers=args.workers, progress=not args.no_progress,
                                       images=not args.no_images),
        (ImproveError, DatasetError, TrainError, PolicyError, StoreError, TrialError),
        lambda: f"every finished step is kept in {args.out}: rerun the same command to resume")
    if improvement is None:
        return code
    start = improvement.start
    print(f"start:    {start.successes}/{start.trials} held-out successes")
    for arm, rounds in improvement.rounds.items():
        for r in rounds:
            print(f"{arm:9s} round {r.round}: {r.successes}/{r.trials} ({r.total_episodes} episodes)")
    for c in improvement.comparisons:
        print(f"round {c['round']}: targeted - uniform = {c['difference']:+.1%} (McNemar p = {c['p_value']:.3g})")
    print(f"report {Path(args.out) / 'report.html'}")
    return 0


def _skills_refine(args) -> int:
    from r2s2r.eval.store import StoreError
    from r2s2r.loop.skills_refine import RefineConfig, RefineError, refine_skills
    factors = tuple(f for f in args.factors.split(",") if f) if args.factors else None
    config = RefineConfig(task=args.task, budget=args.budget, sampler=args.sampler, factors=factors,
                          envelope=args.envelope, trials_per_variant=args.trials_per_variant,
                          validation_trials=args.validation_trials, max_rules=args.max_rules, seed=args.seed,
                          **({} if args.everywhere_rounds is None else {"everywhere_rounds": args.everywhere_rounds}))
    out = Path(args.out)
    refined, code = run_resumable(
        "skills refine", lambda: refine_skills(config, out.parent / (out.stem + "_refine"), workers=args.workers,
                                               progress=not args.no_progress),
        (RefineError, StoreError), lambda: "rerun the same command to resume (its trials are kept)")
    if refined is None:
        return code
    out.write_text(refined.skills.read_text())
    for rule in refined.rules:
        print(f"rule: {f'when {rule.when}' if rule.when else 'everywhere'} use {rule.use} ({rule.found['validation']})")
    for entry in refined.dropped:
        print(f"dropped: cluster {entry['cluster']} ({entry['stage']}, {entry['conditions']}): {entry['why']}")
    print(f"skills {out}: use it as scripted:{args.task}?skills={out} (or a policy config with params {{skills: ...}})")
    return 0


def _soak(args) -> int:
    from r2s2r.loop.soak import SoakConfig, SoakError, parse_drill, parse_duration, run_soak
    from r2s2r.policy.types import PolicyError

    def run():
        config = SoakConfig(task=args.task, policy=args.policy, duration_s=parse_duration(args.duration),
                            episodes=args.episodes, envelope=args.envelope, seed=args.seed, stuck_s=args.stuck_s,
                            storm_misses=args.storm_misses, real_time_factor=args.real_time_factor,
                            sample_s=args.sample_s, inject=tuple(parse_drill(d) for d in args.inject))
        return run_soak(config, args.out, progress=not args.no_progress)
    soak, code = run_resumable("soak", run, (SoakError, PolicyError),
                               lambda: f"the report of what ran is in {args.out}")
    if soak is None:
        return code
    n = len(soak.episodes)
    print(f"{n} episodes, {soak.successes} succeeded, {len(soak.interventions)} interventions"
          + "".join(f"\n  episode {i['episode']} at {i['at_s'] / 60:.1f} min: {i['cause']}: {i['detail']}"
                    for i in soak.interventions))
    for node, m in soak.memory().items():
        print(f"{node}: {m['first_mb']:.0f} -> {m['last_mb']:.0f} MB ({m['growth_mb_per_h']:+.1f} MB/h), "
              f"CPU {m['cpu_percent_mean']:.0f} %")
    print(f"report {Path(args.out) / 'soak.html'}")
    if soak.error:
        print(f"r2s2r soak: error: {soak.error}", file=sys.stderr)
        return 1
    return 0


def _fidelity(args) -> int:
    from r2s2r.loop.fidelity import FidelityConfig, run_study
    factors = tuple(f for f in args.factors.split(",") if f) if args.factors else None
    config = FidelityConfig(cell=args.cell, task=args.task, policies=tuple(args.policies), sim_trials=args.sim_trials,
                            real_trials=args.real_trials, seed=args.seed, envelope=args.envelope, factors=factors,
                            near_miss=args.near_miss, real_time_factor=args.real_time_factor,
                            excitation_s=args.excitation_s)
    from r2s2r.eval.graph import GraphError
    from r2s2r.eval.runner import TrialError
    from r2s2r.eval.store import StoreError
    from r2s2r.policy.types import PolicyError
    study, code = run_resumable(  # the errors are the user's to fix: what, not where
        "fidelity", lambda: run_study(config, args.out, workers=args.workers, progress=not args.no_progress),
        (PolicyError, StoreError, TrialError, GraphError),
        lambda: f"what was recorded, fitted and run is kept in {args.out}: rerun the same command to resume")
    if study is None:
        return code
    for side in ("fitted", "nominal"):
        a = study.agreement[side]
        print(f"{side:8s} twin: MMRV {a['mmrv']:.3f}, Pearson {a['pearson']:.3f}, Spearman {a['spearman']:.3f}, "
              f"stage distance {study.stage_distance[side]['all policies']:.3f}, same outcome from the same start "
              f"{study.paired[side]['rate']:.0%}")
    print(f"report {Path(args.out) / 'fidelity.html'}")
    return 0


def add_loop_parsers(sub) -> None:
    from r2s2r.loop.improve import CONTROLS, RETRAIN
    im = sub.add_parser("improve", help="turn a trained policy's failures in the twin into data and a better policy "
                                        "(targeted rounds, optionally against a uniform control arm)")
    im.add_argument("--task", required=True)
    im.add_argument("--policy", required=True, help="a training run of r2s2r train (its last checkpoint) or "
                                                    "RUN/checkpoints/step_NNNNNN")
    im.add_argument("--rounds", type=_count(1, 100), default=3)
    im.add_argument("--search-budget", type=_count(1), default=200, help="failure-search trials per round")
    im.add_argument("--demos-per-round", type=_count(1), default=50, help="expert demonstrations added per round")
    im.add_argument("--relabelled-per-round", type=_count(0), default=0,
                    help="rollouts of the current checkpoint per round, each action relabelled by the expert "
                         "(DAgger; the expert's state-feedback form)")
    im.add_argument("--envelope", default=None, help="the perturbation space's named envelope to work within")
    im.add_argument("--control", choices=CONTROLS, default=None,
                    help="a control arm spending the same demonstrations on conditions drawn uniformly")
    im.add_argument("--held-out", type=_count(1), default=500, help="held-out evaluation trials per checkpoint")
    im.add_argument("--retrain", choices=RETRAIN, default="scratch",
                    help="train each round's policy from scratch, or fine-tune the current checkpoint")
    im.add_argument("--train-steps", type=_count(1, 10**7), default=None,
                    help="training steps per round (default: the starting run's)")
    im.add_argument("--sampler", default="cem", help="the failure search's sampler")
    im.add_argument("--boundary-share", type=float, default=0.5,
                    help="share of the targeted conditions drawn across failure boundaries (the rest in clusters)")
    im.add_argument("--targeted-share", type=float, default=1.0,
                    help="share of the targeted arm's conditions drawn at the failures (the rest uniformly)")
    im.add_argument("--seed", type=int, default=0)
    im.add_argument("--workers", type=_count(1, 256), default=2)
    im.add_argument("--out", required=True, help="the run's folder (new, or a run to resume)")
    im.add_argument("--no-images", action="store_true", help="no pictures of the failure clusters in the report")
    im.add_argument("--no-progress", action="store_true")
    im.set_defaults(func=_improve)

    skills = sub.add_parser("skills", help="the scripted experts' skill rules").add_subparsers(dest="action",
                                                                                             required=True)
    sr = skills.add_parser("refine", help="search the expert's failure clusters for skill alternatives that fix "
                                          "them, and keep those that validate as rules")
    sr.add_argument("--task", required=True)
    sr.add_argument("--out", required=True, help="the SKILLS.yaml to write (its trials go in OUT_refine/ beside it)")
    sr.add_argument("--budget", type=_count(1), default=300, help="failure-search trials of the expert")
    sr.add_argument("--sampler", default="uniform")
    sr.add_argument("--factors", default=None, help="comma-separated factors to search over (default: all)")
    sr.add_argument("--envelope", default=None)
    sr.add_argument("--trials-per-variant", type=_count(1), default=20,
                    help="trials per alternative where a cluster's condition holds (twice as many of the search's "
                         "failures for the rule for everywhere)")
    sr.add_argument("--validation-trials", type=_count(1), default=40,
                    help="fresh trials to keep or drop a rule (three times as many over the whole space for the "
                         "rule for everywhere)")
    sr.add_argument("--max-rules", type=_count(1, 100), default=5, help="the largest failure clusters refined")
    sr.add_argument("--everywhere-rounds", type=_count(0, 10), default=None,
                    help="changes for everywhere (a rule without conditions) kept at most; 0 tries none "
                         "(default: loop.skills_refine.EVERYWHERE_ROUNDS)")
    sr.add_argument("--seed", type=int, default=0)
    sr.add_argument("--workers", type=_count(1, 256), default=2)
    sr.add_argument("--no-progress", action="store_true")
    sr.set_defaults(func=_skills_refine)

    so = sub.add_parser("soak", help="run a task over and over through the live ROS graph on the twin, counting "
                                     "successes, failures and interventions, with every node's memory and CPU")
    so.add_argument("--task", required=True)
    so.add_argument("--policy", required=True, help="a policy URI or config (scripted:TASK, a checkpoint, ...)")
    so.add_argument("--duration", default="1h", help="how long: 1h, 30m, 90s (default 1h)")
    so.add_argument("--episodes", type=_count(0), default=0, help="stop after this many episodes (0: no limit)")
    so.add_argument("--envelope", default=None, help="draw each episode from this envelope of the task's space")
    so.add_argument("--seed", type=int, default=0)
    so.add_argument("--stuck-s", type=float, default=10.0, help="an arm still this long (sim s) is stuck")
    so.add_argument("--storm-misses", type=_count(1), default=50,
                    help="inference deadlines missed within one episode that make a deadline storm")
    so.add_argument("--real-time-factor", type=float, default=1.0)
    so.add_argument("--sample-s", type=float, default=5.0, help="how often memory and CPU are sampled")
    so.add_argument("--inject", action="append", default=[], metavar="DRILL@EPISODE",
                    help="a drill: knock@N knocks an object off the table in episode N, kill-policy@N kills the "
                         "policy_node process; repeatable")
    so.add_argument("--out", required=True)
    so.add_argument("--no-progress", action="store_true")
    so.set_defaults(func=_soak)

    fi = sub.add_parser("fidelity", help="does the twin's ranking of policies transfer to a proxy-real cell?")
    fi.add_argument("--cell", required=True, help="a proxy cell YAML, or the name of one in config/proxy_cells/")
    fi.add_argument("--task", required=True, help="the task the policies do (the cell's)")
    fi.add_argument("--policies", nargs="+", required=True, help="policy URIs or policy config YAMLs (two or more)")
    fi.add_argument("--sim-trials", type=int, default=2000, help="trials per policy in each twin (default 2000)")
    fi.add_argument("--real-trials", type=int, default=100,
                    help="trials per policy in the cell, through the ROS graph (default 100)")
    fi.add_argument("--out", required=True, help="the study's folder (resumed when it exists)")
    fi.add_argument("--workers", type=int, default=1, help="processes for the twins' trials and the fit")
    fi.add_argument("--seed", type=int, default=0, help="draws the initial conditions")
    fi.add_argument("--envelope", default=None, help="one of the task's perturbation envelopes")
    fi.add_argument("--factors", default=None,
                    help="comma-separated factors to draw (default: the initial-condition factors)")
    fi.add_argument("--near-miss", type=float, default=0.01, help="|margin| of a near-miss (default 0.01)")
    fi.add_argument("--real-time-factor", type=float, default=1.0, help="the cell's pace (a real cell: 1)")
    fi.add_argument("--excitation-s", type=float, default=3.0, help="seconds of excitation to fit on")
    fi.add_argument("--no-progress", action="store_true", help="no progress bars")
    fi.set_defaults(func=_fidelity)


__all__ = ["add_loop_parsers"]
