"""Reports of evaluation and search campaigns: one static HTML page and summary.json.

The page (no scripts, no external files: every plot and image is embedded as a PNG) shows
the success rate with its Wilson interval and the trials per failure stage, the success rate
against each factor that varied, a map of outcomes over the object's table position (where
the space moves an object in x and y), the failure atlas (each cluster's size, conditions,
representative trial with its images at the start and at the moment it failed, and the
command that replays it), the refined failure boundaries with their near-misses, and, when
several policies ran on the same trials, their ranking with pairwise significance.

summary.json carries the same for machines: trials, successes, failures, success_rate (with
its interval), stages, clusters, boundaries, sampler, policy, task, campaign, store.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from r2s2r.eval.stats import wilson

STAGE_COLOURS = ("#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#1f77b4")
SUCCESS_COLOUR = "#2ca02c"
MAX_IMAGES = 12  # cluster representatives rendered (each is one rerun of its trial)
ADAPTIVE = ("cem", "tpe")


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _image_png(rgb: np.ndarray) -> str:
    import cv2
    ok, data = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    return base64.b64encode(data.tobytes()).decode()


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _stage_colours(results) -> dict[str, str]:
    stages = sorted({r.stage for r in results if not r.success})
    return {s: STAGE_COLOURS[i % len(STAGE_COLOURS)] for i, s in enumerate(stages)}


def _varied(results, space) -> list[str]:
    return [n for n in space.names
            if len({r.perturbation.get(n, space.factor(n).nominal) for r in results}) > 1]


def plot_factors(results, space, bins: int = 8) -> str | None:
    """Success rate (Wilson 95% bars) against each factor that varied, binned."""
    names = _varied(results, space)
    if not names:
        return None
    plt = _pyplot()
    cols = min(4, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 2.4 * rows), squeeze=False)
    success = np.array([r.success for r in results])
    for ax, name in zip(axes.flat, names):
        f = space.factor(name)
        values = np.array([r.perturbation.get(name, f.nominal) for r in results])
        if f.discrete:
            centres = np.arange(f.low, f.high + 1)
            index = np.clip(np.round(values - f.low).astype(int), 0, len(centres) - 1)
        else:
            edges = np.linspace(f.low, f.high, bins + 1) if not f.log else np.geomspace(f.low, f.high, bins + 1)
            centres = (edges[:-1] + edges[1:]) / 2
            index = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, bins - 1)
        rates, low, high, xs = [], [], [], []
        for k, c in enumerate(centres):
            n = int((index == k).sum())
            if n == 0:
                continue
            rate = wilson(int(success[index == k].sum()), n)
            xs.append(c)
            rates.append(rate.rate)
            low.append(rate.rate - rate.low)
            high.append(rate.high - rate.rate)
        ax.errorbar(xs, rates, yerr=[low, high], fmt="o-", color="#1f77b4", ms=3, lw=1, capsize=2)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        if f.log:
            ax.set_xscale("log")
        ax.axvline(f.nominal, color="#999", lw=0.8, ls=":")
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle("success rate against each factor (95% Wilson intervals; dotted: nominal)", fontsize=10)
    fig.tight_layout()
    return _png(fig)


def object_xy_factors(space) -> tuple[str, str, str] | None:
    """(object, x factor, y factor) of the first object the space moves in both x and y."""
    xs = {f.target: f.name for f in space.factors if f.kind == "object_x"}
    ys = {f.target: f.name for f in space.factors if f.kind == "object_y"}
    for obj in xs:
        if obj in ys:
            return obj, xs[obj], ys[obj]
    return None


def plot_xy_map(results, space) -> str | None:
    """Outcomes over the object's position on the table, with the scene's fixtures."""
    found = object_xy_factors(space)
    if found is None:
        return None
    obj_name, fx, fy = found
    if any(len({r.perturbation.get(f, 0.0) for r in results}) < 2 for f in (fx, fy)):
        return None  # a map needs both coordinates to vary
    obj = next(o for o in space.scene.objects if o.name == obj_name)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 5.2))
    colours = _stage_colours(results)
    x = np.array([obj.pos[0] + r.perturbation.get(fx, 0.0) for r in results])
    y = np.array([obj.pos[1] + r.perturbation.get(fy, 0.0) for r in results])
    ok = np.array([r.success for r in results])
    ax.scatter(y[ok], x[ok], s=14, c=SUCCESS_COLOUR, alpha=0.7, label=f"success ({ok.sum()})", edgecolors="none")
    stages = np.array([r.stage for r in results])
    for stage, colour in colours.items():
        sel = stages == stage
        ax.scatter(y[sel], x[sel], s=20, c=colour, marker="x", lw=1.2, label=f"{stage} ({sel.sum()})")
    for fixture in space.scene.fixtures:
        if fixture.kind == "bowl":  # drawn where the scene puts it (a bowl_x / bowl_y factor moves it)
            ax.add_patch(plt.Circle((fixture.pos[1], fixture.pos[0]), fixture.radius, fill=False, color="#555",
                                    ls="--", lw=1))
            ax.annotate(fixture.name, (fixture.pos[1], fixture.pos[0]), fontsize=8, ha="center", color="#555")
    ax.plot([obj.pos[1]], [obj.pos[0]], marker="+", color="k", ms=12, label=f"{obj_name} nominal")
    ax.set_xlabel(f"{obj_name} y (m, world; robot base at 0)")
    ax.set_ylabel(f"{obj_name} x (m, world)")
    ax.invert_xaxis()  # as seen from behind the robot: +y to the left
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=7, loc="best", framealpha=0.8)
    ax.set_title(f"outcomes over the {obj_name}'s initial position", fontsize=10)
    fig.tight_layout()
    return _png(fig)


def _esc(value) -> str:
    return html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


CSS = """body{font-family:system-ui,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f3f3f3}code{background:#f5f5f5;padding:1px 4px;font-size:12px}
.cluster{display:flex;gap:16px;border:1px solid #ddd;padding:10px;margin:10px 0;border-radius:4px}
.cluster img{width:300px;border:1px solid #ccc}.meta{color:#555;font-size:13px}.big{font-size:20px}
.imgs{display:flex;gap:6px}.cap{font-size:11px;color:#666;text-align:center}.plot{max-width:100%}"""


def summarise(results, meta: dict, atlas=None, boundaries=(), ranking=None) -> dict:
    n = len(results)
    k = sum(r.success for r in results)
    rate = wilson(k, n)
    stages: dict[str, int] = {}
    failed_to_act: dict[str, dict] = {}  # a policy's refused command, error or missed deadline: why, first seen
    for r in results:
        stages[r.stage] = stages.get(r.stage, 0) + 1
        if r.detail:
            entry = failed_to_act.setdefault(r.stage, {"trials": 0, "first": r.detail, "trial": r.id})
            entry["trials"] += 1
    summary = {**meta, "trials": n, "successes": k, "failures": n - k, "failed_to_act": failed_to_act,
               "success_rate": {"rate": rate.rate if n else None, "wilson95": [rate.low, rate.high]},
               "stages": dict(sorted(stages.items())),
               "clusters": [] if atlas is None else [
                   {"index": c.index, "stage": c.stage, "size": c.size, "purity": c.purity,
                    "conditions": [{"factor": d.factor, "low": d.low, "high": d.high} for d in c.conditions],
                    "representative": c.representative, "mean_margin": c.mean_margin} for c in atlas.clusters],
               "scattered_failures": {} if atlas is None else dict(atlas.scattered),
               "boundaries": [b.to_dict(atlas.factors) for b in boundaries] if atlas is not None else []}
    if ranking is not None:
        summary["ranking"] = {"order": ranking.order,
                              "rates": {p: {"rate": r.rate, "wilson95": [r.low, r.high], "trials": r.trials}
                                        for p, r in ranking.rates.items()},
                              "comparisons": [{"a": c.a, "b": c.b, "p_value": c.p_value, "test": c.test}
                                              for c in ranking.comparisons]}
    return summary


def write_report(out_dir: str | Path, results, space, meta: dict, atlas=None, boundaries=(), ranking=None,
                 store_path: str | Path | None = None, camera: str = "scene", images: bool = True,
                 refined: Sequence = ()) -> Path:
    """Write report.html and summary.json under `out_dir`; returns the page's path. `results`
    are the campaign's trials (one policy); `refined` the boundary trials, shown but not counted."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = list(results)
    summary = summarise(results, meta, atlas, boundaries, ranking)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    rate = wilson(summary["successes"], summary["trials"])
    store_arg = f" --store {store_path}" if store_path else ""
    parts = [f"<h1>{_esc(meta.get('task', 'evaluation'))}: {_esc(meta.get('policy', ''))}</h1>",
             f"<p class=meta>sampler <b>{_esc(meta.get('sampler', ''))}</b> &middot; campaign "
             f"<code>{_esc(meta.get('campaign', ''))}</code> &middot; store <code>{_esc(store_path or '')}</code></p>",
             f"<p class=big>{summary['successes']} / {summary['trials']} succeeded: "
             f"<b>{rate.rate:.1%}</b> (95% Wilson interval {rate.low:.1%} &ndash; {rate.high:.1%})"
             if summary["trials"] else "<p class=big>no trials</p>"]
    parts.append(_table(["outcome", "trials"], [(_esc(s), c) for s, c in summary["stages"].items()]))
    if summary["failed_to_act"]:
        parts.append("<h2>Where the policy failed to act</h2>")
        parts.append(_table(["stage", "trials", "first message", "trial"],
                            [(_esc(stage), e["trials"], _esc(e["first"]), f"<code>{e['trial']}</code>")
                             for stage, e in sorted(summary["failed_to_act"].items())]))
    if ranking is not None:
        parts.append("<h2>Ranking</h2>")
        parts.append(_table(["rank", "policy", "success rate", "95% interval", "trials"],
                            [(i + 1, _esc(p), f"{ranking.rates[p].rate:.1%}",
                              f"{ranking.rates[p].low:.1%} &ndash; {ranking.rates[p].high:.1%}",
                              ranking.rates[p].trials)
                             for i, p in enumerate(ranking.order)]))
        parts.append(_table(["better", "worse", "p (Holm)", "test", "significant at 5%"],
                            [(_esc(c.a), _esc(c.b), f"{c.p_value:.3g}", c.test, "yes" if c.significant() else "no")
                             for c in ranking.comparisons]))
    factor_png = plot_factors(results, space)
    if factor_png:
        parts.append("<h2>Success against each factor</h2>")
        if meta.get("sampler") in ADAPTIVE:
            parts.append("<p class=meta>over the trials the sampler chose: an adaptive sampler crowds its trials "
                         "where it found failures, so these rates are lower than the policy's over the space</p>")
        parts.append(f'<img class=plot alt="success against each factor" src="data:image/png;base64,{factor_png}">')
    xy_png = plot_xy_map(results, space)
    if xy_png:
        parts.append("<h2>Outcomes over the object's position</h2>")
        parts.append(f'<img class=plot alt="outcome map" src="data:image/png;base64,{xy_png}">')
    if atlas is not None:
        parts.append(_atlas_html(atlas, results, refined, store_arg, camera, images))
    if boundaries:
        names = atlas.factors
        parts.append("<h2>Failure boundaries and near-misses</h2>")
        parts.append(f"<p class=meta>each cluster's representative bisected toward the nearest success; "
                     f"width: the distance left between the two sides, in the unit cube of {len(names)} factors</p>")
        parts.append(_table(
            ["cluster", "stage", "steps", "width", "near-miss (success side)", "margin", "failure side", "margin"],
            [(b.cluster, _esc(b.stage), b.steps, f"{b.width:.3g}", f"<code>{b.success_id}</code>",
              f"{b.success_margin:+.4f}", f"<code>{b.failure_id}</code>", f"{b.failure_margin:+.4f}")
             for b in boundaries]))
        parts.append(f"<p class=meta>replay a near-miss: <code>r2s2r replay ID{_esc(store_arg)}</code></p>")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>r2s2r report: {_esc(meta.get('task', ''))}"
            f"</title><style>{CSS}</style></head><body>{''.join(parts)}</body></html>")
    path = out / "report.html"
    path.write_text(page)
    return path


def _atlas_html(atlas, results, refined, store_arg: str, camera: str, images: bool) -> str:
    by_id = {r.id: r for r in (*results, *refined)}
    parts = [f"<h2>Failure atlas: {len(atlas.clusters)} clusters</h2>",
             f"<p class=meta>{atlas.failures} failures; clustered by failure stage and region over "
             f"{len(atlas.factors)} factors; scattered (in no cluster): "
             f"{_esc(', '.join(f'{s} {n}' for s, n in atlas.scattered.items()) or 'none')}</p>"]
    worker = None
    for i, cluster in enumerate(atlas.clusters):
        rep = by_id[cluster.representative]
        conditions = "".join(f"<li>{_esc(c.describe())}</li>" for c in cluster.conditions) or "<li>anywhere</li>"
        values = ", ".join(f"{k} = {v:.4g}" for k, v in sorted(rep.perturbation.items()) if k in atlas.factors)
        pictures = ""
        if images and i < MAX_IMAGES:
            from r2s2r.eval.replay import moments
            from r2s2r.eval.runner import TrialWorker
            worker = worker or TrialWorker()
            first, last, _ = moments(rep.spec, camera, worker)
            pictures = (f"<div class=imgs><div><img alt='start' src='data:image/png;base64,{_image_png(first)}'>"
                        f"<div class=cap>start</div></div><div><img alt='failure' "
                        f"src='data:image/png;base64,{_image_png(last)}'><div class=cap>at failure "
                        f"(t = {rep.sim_time_s:.2f} s)</div></div></div>")
        parts.append(
            f"<div class=cluster><div>{pictures}</div><div><b>cluster {cluster.index}: {_esc(cluster.stage)}</b>"
            f"<br>{cluster.size} failures ({cluster.purity:.0%} of the trials in its region), mean margin "
            f"{cluster.mean_margin:+.4f}<br>conditions:<ul>{conditions}</ul>representative <code>{rep.id}</code> "
            f"(margin {rep.margin:+.4f}, seed {rep.seed})<br><span class=meta>{_esc(values)}</span><br>replay: "
            f"<code>r2s2r replay {rep.id}{_esc(store_arg)} --camera {_esc(camera)}</code></div></div>")
    return "".join(parts)


__all__ = ["write_report", "summarise", "plot_factors", "plot_xy_map", "object_xy_factors"]
