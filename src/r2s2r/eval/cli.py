"""`r2s2r eval` and `r2s2r search` (`r2s2r replay`, which writes bags, is data.cli).

    r2s2r eval --task T --policy P [--policy P2 ...] --trials N --workers W [--backend ray --address A]
    r2s2r search --task T --policy P --budget N --sampler uniform|sobol|cem|tpe --out DIR

Results go to an SQLite store (default OUT/trials.sqlite); running the same command again
resumes the campaign (stored trials are not rerun). Reports land in OUT (report.html,
summary.json).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

DEFAULT_OUT = "r2s2r_output"
STORE_NAME = "trials.sqlite"
DEFAULT_POLICY_BATCH = 8  # measured: bench/policy_eval_throughput.py


def _factors(text: str | None) -> list[str] | None:
    return [f.strip() for f in text.split(",") if f.strip()] if text else None


def _sampler_options(texts: list[str] | None) -> dict:
    """--sampler-option KEY=VALUE pairs; a value is read as a YAML scalar (1, 0.5, true)."""
    import yaml
    options = {}
    for text in texts or []:
        key, sep, value = text.partition("=")
        if not sep or not key.strip().isidentifier() or not value.strip():
            raise ValueError(f"--sampler-option {text!r}; expected KEY=VALUE, e.g. explore_beta=1")
        options[key.strip()] = yaml.safe_load(value)
    return options


# Trials a campaign may ask for: more is a typo (a million trials of a 5 s task is weeks of CPU).
MAX_TRIALS = 10**6


def _count(minimum: int, maximum: int = MAX_TRIALS):
    """An argparse type: a whole number in [minimum, maximum], refused in one line otherwise."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{value} is not in [{minimum}, {maximum}]")
        return value
    return parse


class _ShowDefaults(argparse.HelpFormatter):
    """Help that shows each option's default, unless it has none or its help already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or action.required:
            return text
        return f"{text} (default: %(default)s)"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, help="a task name (config/tasks) or task YAML")
    p.add_argument("--scene", default=None,
                   help="run the task in this scene YAML instead of its own (your reconstructed or fitted cell)")
    p.add_argument("--skip-missing-factors", action="store_true",
                   help="with --scene: leave out the task's factors that act on what the scene lacks")
    p.add_argument("--workers", type=_count(1, 1024), default=1, help="parallel trials (processes, or Ray actors)")
    p.add_argument("--policy-batch", type=_count(1, 1024), default=DEFAULT_POLICY_BATCH,
                   help="trials a worker runs in lockstep, one policy call per tick for all of them, where the "
                        "policy takes a batch (tensor models); the results are the same for any value")
    p.add_argument("--backend", choices=("process", "ray"), default="process", help="local process pool or Ray")
    p.add_argument("--address", default=None, help="Ray: 'auto', HOST:PORT or ray://HOST:PORT (default: a local Ray)")
    p.add_argument("--seed", type=int, default=0, help="campaign seed: trial i's perturbation and seed come from it")
    p.add_argument("--factors", default=None, help="comma-separated factors to vary (default: all of the task's)")
    p.add_argument("--envelope", default=None,
                   help="vary within one of the space's named envelopes (narrower ranges), e.g. operating")
    p.add_argument("--out", default=DEFAULT_OUT, help="folder for the store and the report")
    p.add_argument("--store", default=None, help=f"SQLite store (default OUT/{STORE_NAME})")
    p.add_argument("--control-rate", type=float, default=None, help="twin control loop rate, Hz (default: the robot's)")
    p.add_argument("--camera", default="scene", help="camera of the report's images")
    p.add_argument("--no-images", action="store_true", help="skip rendering the failure clusters' images")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _task(args):
    """The task, in the user's scene when --scene gives one, and the reference its trials carry."""
    from r2s2r.eval.tasks import load_task, task_in_scene
    task = load_task(args.task, args.scene, args.skip_missing_factors)
    return task, task_in_scene(args.task, args.scene) if args.scene else args.task


def _slug(policy: str) -> str:
    """A folder name for a policy: a config file's stem, or the URI with its odd characters replaced."""
    text = Path(policy).stem if policy.endswith((".yaml", ".yml")) else policy
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "policy"


def _policy_batch(policy, args) -> int:
    """--policy-batch for a policy that takes a batch; 1 (one trial after another) for others."""
    return args.policy_batch if getattr(policy, "accepts_batch", False) else 1


def _eval(args) -> int:
    from r2s2r.eval.report import write_report
    from r2s2r.eval.runner import TrialPool, check_policy, plan_eval, run_trials
    from r2s2r.eval.stats import rank_checkpoints, wilson
    from r2s2r.eval.store import TrialStore
    from r2s2r.search.atlas import build_atlas
    from r2s2r.search.campaign import campaign_name

    if args.trials < 1:
        raise ValueError(f"--trials {args.trials}; expected 1 or more")
    task, task_ref = _task(args)
    out = Path(args.out)
    store_path = Path(args.store) if args.store else out / STORE_NAME
    factors = _factors(args.factors)
    batches = {}  # before any worker starts: one line, not a worker's traceback
    for policy in args.policy:
        batches[policy] = _policy_batch(check_policy(policy, task), args)
    outcomes, per_policy = {}, {}
    with TrialStore(store_path) as store, TrialPool(args.workers, args.backend, args.address) as pool:
        for policy in args.policy:
            config = {"kind": "eval", "task": task_ref, "policy": policy, "trials": args.trials, "seed": args.seed,
                      "factors": factors, "nominal": args.nominal, "control_rate_hz": args.control_rate}
            if args.envelope:  # only when given: campaigns from before the option keep their names
                config["envelope"] = args.envelope
            name = campaign_name("eval", config)
            store.open_campaign(name, config)
            planned = plan_eval(policy, task, args.trials, args.seed, factors, args.nominal, args.control_rate,
                                task_ref, args.envelope)
            results = run_trials(planned, store, name, progress=not args.no_progress, pool=pool,
                                 batch=batches[policy])
            per_policy[policy] = (name, results)
            outcomes[policy] = {i: r.success for i, r in enumerate(results)}  # trial i: same inputs for every policy
            rate = wilson(sum(r.success for r in results), len(results))
            stages = {}
            for r in results:
                stages[r.stage] = stages.get(r.stage, 0) + 1
            print(f"{policy}: {rate.describe()}; " + ", ".join(f"{s} {n}" for s, n in sorted(stages.items())))
            if args.through_graph:
                _check_graph(results[:args.through_graph], args)
        ranking = rank_checkpoints(outcomes) if len(args.policy) > 1 else None
        if ranking is not None:
            print("ranking: " + " > ".join(ranking.order))
            for c in ranking.comparisons:
                print(f"  {c.a} vs {c.b}: p = {c.p_value:.3g} ({c.test}, Holm){' *' if c.significant() else ''}")
        for k, (policy, (name, results)) in enumerate(per_policy.items()):
            folder = out if len(per_policy) == 1 else out / f"{k}_{_slug(policy)}"
            atlas = build_atlas(results, task.perturbations, factors)
            meta = {"task": task_ref, "policy": policy, "sampler": "nominal" if args.nominal else "uniform",
                    "campaign": name, "seed": args.seed, "store": str(store_path)}
            if args.envelope:
                meta["envelope"] = args.envelope
            report = write_report(folder, results, task.perturbations, meta, atlas, ranking=ranking,
                                  store_path=store_path, camera=args.camera, images=not args.no_images)
            print(f"report: {report}")
    return 0


def _check_graph(results, args) -> None:
    """Rerun trials through driver_node + policy_node over DDS and compare their outcomes."""
    from r2s2r.eval.graph import compare, run_through_graph
    agreements = compare(results, run_through_graph([r.spec for r in results], args.real_time_factor))
    same = sum(a.same_outcome for a in agreements)
    print(f"through the ROS graph: {same}/{len(agreements)} trials with the in-process outcome")
    for a in agreements:
        print(f"  {a.describe()}")


def _search(args) -> int:
    from r2s2r.eval.report import write_report
    from r2s2r.eval.stats import wilson
    from r2s2r.eval.store import TrialStore
    from r2s2r.eval.runner import check_policy
    from r2s2r.search.campaign import run_search

    options = _sampler_options(args.sampler_option)
    task, task_ref = _task(args)
    batch = _policy_batch(check_policy(args.policy, task), args)  # before any worker starts
    out = Path(args.out)
    store_path = Path(args.store) if args.store else out / STORE_NAME
    with TrialStore(store_path) as store:
        search = run_search(task, args.policy, args.budget, args.sampler, args.seed, args.batch, _factors(args.factors),
                            args.workers, args.backend, args.address, store, args.refine_steps, args.control_rate,
                            progress=not args.no_progress, task_ref=task_ref, envelope=args.envelope,
                            sampler_options=options, policy_batch=batch)
        meta = {"task": task_ref, "policy": args.policy, "sampler": args.sampler, "campaign": search.campaign,
                "seed": args.seed, "budget": args.budget, "store": str(store_path)}
        if options:
            meta["sampler_options"] = options
        if args.envelope:
            meta["envelope"] = args.envelope
        report = write_report(out, search.results, search.space, meta, search.atlas, search.boundaries,
                              store_path=store_path, camera=args.camera, images=not args.no_images,
                              refined=search.refined)
    failures = sum(not r.success for r in search.results)
    rate = wilson(len(search.results) - failures, len(search.results))
    print(f"{args.sampler}: {len(search.results)} trials, {failures} failures, success {rate.describe()}; "
          f"{len(search.atlas.clusters)} failure clusters, {len(search.refined)} refinement trials")
    for c in search.atlas.clusters:
        print(f"  cluster {c.index}: {c.stage}, {c.size} failures where {c.describe()}; "
              f"replay: r2s2r replay {c.representative} --store {store_path}")
    print(f"report: {report}")
    return 0


def guarded(handler):
    """Policy and store errors are the user's to fix: say what, not where in the code."""
    def run(args) -> int:
        from r2s2r.eval.graph import GraphError
        from r2s2r.eval.runner import TrialError
        from r2s2r.eval.store import StoreError, TrialStore
        from r2s2r.policy.types import PolicyError
        try:
            return handler(args)
        except (PolicyError, StoreError, TrialError, GraphError, ImportError) as exc:
            print(f"r2s2r {args.command}: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # the pool has shut down on the way out (TrialPool.close)
            store = Path(args.store) if args.store else Path(args.out) / STORE_NAME
            stored = 0
            if store.is_file():
                with TrialStore(store) as opened:
                    stored = opened.count()
            print(f"\nr2s2r {args.command}: stopped; {stored} trials stored in {store}; rerun the same command "
                  "to resume", file=sys.stderr)
            return 130
    return run


def add_eval_parsers(sub) -> None:
    """Register `eval` and `search` on the r2s2r command's subparsers."""
    ev = sub.add_parser("eval", help="evaluate policies on a task's perturbations (resumable)",
                        formatter_class=_ShowDefaults)
    _common(ev)
    ev.add_argument("--policy", required=True, action="append",
                    help="policy URI or config; repeat to rank several checkpoints on the same trials")
    ev.add_argument("--trials", type=_count(1), required=True, help=f"trials per policy (at most {MAX_TRIALS})")
    ev.add_argument("--nominal", action="store_true", help="no perturbation: only the seeds differ")
    ev.add_argument("--through-graph", type=int, default=0, metavar="K",
                    help="also run the first K trials through driver_node + policy_node over DDS and compare")
    ev.add_argument("--real-time-factor", type=float, default=1.0, help="pace of the twin for --through-graph")
    ev.set_defaults(func=guarded(_eval))

    se = sub.add_parser("search", help="search a task's perturbation space for the policy's failures",
                        formatter_class=_ShowDefaults)
    _common(se)
    from r2s2r.search.samplers import DEFAULT_BATCH, SAMPLERS
    se.add_argument("--policy", required=True, help="policy URI or config")
    se.add_argument("--budget", type=_count(1), required=True,
                    help=f"trials the sampler proposes (at most {MAX_TRIALS})")
    se.add_argument("--sampler", choices=SAMPLERS, default="uniform", help="how the trials are proposed")
    se.add_argument("--batch", type=_count(1), default=DEFAULT_BATCH,
                    help="trials per sampler round (results do not depend on --workers)")
    se.add_argument("--sampler-option", action="append", metavar="KEY=VALUE",
                    help="a sampler's option (repeatable), e.g. explore_beta=1 for CEM's uniform exploration; "
                         "see docs/evaluation.md")
    se.add_argument("--refine-steps", type=_count(0, 64), default=4,
                    help="bisection steps per failure cluster after the budget (extra trials)")
    se.set_defaults(func=guarded(_search))


__all__ = ["add_eval_parsers", "guarded", "DEFAULT_OUT", "STORE_NAME"]
