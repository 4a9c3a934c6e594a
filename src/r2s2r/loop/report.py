"""The report of `r2s2r improve`: summary.json and one static report.html.

The page shows held-out success per round for each arm (Wilson intervals) and, with a control
arm, the difference per round with McNemar's exact test on the same held-out trials; the
held-out failures' atlas round by round (clusters and their sizes); the starting checkpoint's
largest failure clusters, each representative pictured at failure and again under every arm's
last checkpoint from the same start; and the data each round spent (demonstrations, the
expert's trials to get them, search trials, training steps).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from r2s2r.eval.report import CSS, _esc, _image_png, _png, _pyplot, _table
from r2s2r.eval.runner import TrialSpec

PICTURED = 3  # the starting checkpoint's largest clusters pictured before and after
ARM_COLOURS = {"start": "#444444", "targeted": "#d62728", "uniform": "#1f77b4"}


def _rate_cell(result) -> str:
    rate = result.rate
    return f"{result.successes}/{result.trials} = {rate.rate:.1%} [{rate.low:.1%}, {rate.high:.1%}]"


def _atlas_cell(atlas: dict) -> str:
    sizes = ", ".join(f"{c['stage']} {c['size']}" for c in atlas.get("clusters", []))
    return f"{atlas.get('failures', 0)} failures; {len(atlas.get('clusters', []))} clusters" + \
        (f" ({sizes})" if sizes else "")


def _plot(improvement) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for arm, rounds in improvement.rounds.items():
        series = [improvement.start, *rounds]
        x = [r.round for r in series]
        y = [r.rate.rate for r in series]
        low = [r.rate.rate - r.rate.low for r in series]
        high = [r.rate.high - r.rate.rate for r in series]
        ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, color=ARM_COLOURS.get(arm), label=arm)
    ax.set_xlabel("round")
    ax.set_ylabel("held-out success")
    ax.set_ylim(0, 1)
    ax.set_xticks(range(improvement.config.rounds + 1))
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def _pictures(improvement, run, limit: int = PICTURED) -> str:
    """The starting checkpoint's largest held-out clusters: each representative at failure,
    then every arm's last checkpoint from the same start."""
    from r2s2r.eval.replay import moments
    from r2s2r.eval.runner import TrialWorker
    clusters = improvement.start.atlas.get("clusters", [])[:limit]
    if not clusters:
        return "<p class=meta>the starting checkpoint left no failure cluster on the held-out trials</p>"
    camera = (run.collection["cameras"] or ("scene",))[0]  # the data's first camera, else the scene's
    worker = TrialWorker()
    parts = []
    for cluster in clusters:
        rep = run.store.get(cluster["representative"])
        cells = []
        for label, policy in [("start", rep.policy)] + [(arm, rounds[-1].checkpoint)
                                                        for arm, rounds in improvement.rounds.items() if rounds]:
            spec = TrialSpec.of(policy, rep.task, rep.perturbation, rep.seed, rep.control_rate_hz)
            _, last, result = moments(spec, camera, worker)
            verdict = "success" if result.success else f"failed at {result.stage}"
            cells.append(f"<div><img alt='{_esc(label)}' src='data:image/png;base64,{_image_png(last)}'>"
                         f"<div class=cap>{_esc(label)}: {_esc(verdict)} (margin {result.margin:+.3f})</div></div>")
        conditions = " and ".join(f"{c['factor']} in [{c['low']:.4g}, {c['high']:.4g}]"
                                  for c in cluster["conditions"]) or "anywhere"
        parts.append(f"<div class=cluster><div class=imgs>{''.join(cells)}</div><div><b>cluster {cluster['index']}: "
                     f"{_esc(cluster['stage'])}</b>, {cluster['size']} failures of the starting checkpoint<br>"
                     f"{_esc(conditions)}<br>representative <code>{_esc(rep.id)}</code> (seed {rep.seed})</div></div>")
    return "".join(parts)


def write_improve_report(improvement, run, images: bool = True) -> Path:
    """summary.json and report.html in the run's folder; the page's path."""
    out = improvement.out
    cfg = improvement.config
    summary = {"config": asdict(cfg), "start": asdict(improvement.start),
               "rounds": {arm: [asdict(r) for r in rounds] for arm, rounds in improvement.rounds.items()},
               "comparisons": improvement.comparisons}
    for entry in [summary["start"], *(r for rounds in summary["rounds"].values() for r in rounds)]:
        entry.pop("outcomes")  # in trials.sqlite; the page and the summary need the counts
    (out / "summary.json").write_text(json.dumps(summary, indent=1))

    rows = [["start", 0, _rate_cell(improvement.start), improvement.start.total_episodes, "-", "-", "-",
             improvement.start.train_steps, _atlas_cell(improvement.start.atlas)]]
    for arm, rounds in improvement.rounds.items():
        for r in rounds:
            origins = ", ".join(f"{k} {v}" for k, v in sorted(r.origins.items()))
            relabelled = f" + {r.relabelled} relabelled" if r.relabelled else ""
            rows.append([arm, r.round, _rate_cell(r), r.total_episodes, f"{r.demos} ({origins}){relabelled}",
                         r.collection_trials,
                         r.search_trials, r.train_steps, _atlas_cell(r.atlas)])
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>improve: {_esc(cfg.task)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>r2s2r improve: {_esc(cfg.task)}</h1>",
             f"<p class=meta>starting checkpoint <code>{_esc(cfg.policy)}</code>; {cfg.rounds} rounds of "
             f"{cfg.demos_per_round} expert demonstrations; failure search of {cfg.search_budget} trials "
             f"({_esc(cfg.sampler)}) per targeted round; retraining {_esc(cfg.retrain)}; envelope "
             f"{_esc(cfg.envelope or 'the whole space')}; {cfg.held_out} held-out trials (seed stream reserved "
             f"at the start); seed {cfg.seed}</p>",
             "<h2>Held-out success per round</h2>",
             f"<img class=plot src='data:image/png;base64,{_plot(improvement)}'/>",
             _table(["arm", "round", "held-out success [95 % CI]", "episodes in all", "added (by origin)",
                     "expert trials", "search trials", "training steps", "held-out failure atlas"], rows)]
    if improvement.comparisons:
        parts += ["<h2>Targeted against uniform, at equal data</h2>",
                  "<p class=meta>the same held-out trials: McNemar's exact test on those where the arms disagree</p>",
                  _table(["round", "targeted", "uniform", "difference", "only targeted succeeded",
                          "only uniform succeeded", "p"],
                         [[c["round"], f"{c['targeted']:.1%}", f"{c['uniform']:.1%}", f"{c['difference']:+.1%}",
                           c["only_targeted"], c["only_uniform"], f"{c['p_value']:.3g}"]
                          for c in improvement.comparisons])]
    if images:
        parts += ["<h2>The starting checkpoint's failure clusters, before and after</h2>", _pictures(improvement, run)]
    parts.append("</body></html>")
    path = out / "report.html"
    path.write_text("".join(parts))
    return path


__all__ = ["write_improve_report"]
