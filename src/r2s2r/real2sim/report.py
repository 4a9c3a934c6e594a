"""The alignment report: JSON for machines, one static HTML page for people (plots as inline
SVG, frames as inline PNG, no scripts, no network)."""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import cv2
import numpy as np

COLOURS = {"recorded": "#222222", "before": "#d95f02", "after": "#1b9e77"}


def _svg_lines(t: np.ndarray, series: dict[str, np.ndarray], title: str, width: int = 420, height: int = 150) -> str:
    """One plot: each series a polyline over t, with its y range and a legend."""
    values = np.concatenate([v[np.isfinite(v)] for v in series.values()]) if series else np.zeros(1)
    lo, hi = float(np.min(values)), float(np.max(values))
    if hi - lo < 1e-12:
        hi = lo + 1e-12
    t0, t1 = float(t[0]), float(t[-1]) if len(t) > 1 else float(t[0]) + 1
    pad = 28

    def xy(tt, v):
        return pad + (tt - t0) / (t1 - t0) * (width - 2 * pad), height - pad - (v - lo) / (hi - lo) * (height - 2 * pad)
    step = max(1, len(t) // 400)
    parts = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
             f'<text x="{pad}" y="14" font-size="12">{html.escape(title)}</text>',
             f'<text x="2" y="{pad + 4}" font-size="9">{hi:.3g}</text>',
             f'<text x="2" y="{height - pad}" font-size="9">{lo:.3g}</text>',
             f'<text x="{width - pad - 20}" y="{height - 8}" font-size="9">{t1:.1f} s</text>']
    for k, (name, v) in enumerate(series.items()):
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(tt, vv) for tt, vv in zip(t[::step], v[::step]))
                       if math.isfinite(y))
        colour = COLOURS.get(name, "#7570b3")
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{pts}"/>')
        parts.append(f'<text x="{width - 110}" y="{14 + 12 * k}" font-size="10" fill="{colour}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _png(image: np.ndarray, width: int = 260) -> str:
    h, w = image.shape[:2]
    small = cv2.resize(image, (width, int(h * width / w)), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".png", cv2.cvtColor(small, cv2.COLOR_RGB2BGR))
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.tobytes()).decode()}"/>'


def _table(rows: list[list], header: list[str]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def write_report(out_dir: str | Path, episode: str, before, after=None, fit=None, reconstruction=None,
                 validation=None) -> tuple[Path, Path]:
    """alignment.json and alignment.html in `out_dir` (before: an Alignment; after: the fitted twin's)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = {"episode": episode, "before": before.summary()}
    if after is not None:
        data["after"] = after.summary()
        data["improvement"] = {"joint_rmse_ratio": before.rmse / max(after.rmse, 1e-12)}
    if fit is not None:
        data["fit"] = fit.report() if hasattr(fit, "report") else fit
    if reconstruction is not None:
        data["reconstruction"] = reconstruction.report()
    if validation is not None:
        data["validation"] = validation.report()
    json_path = out / "alignment.json"
    json_path.write_text(json.dumps(data, indent=1, default=_json_default))
    body = [f"<h1>Alignment of {html.escape(episode)}</h1>"]
    head = ["joint", "RMSE before (mrad)"] + (["RMSE after (mrad)"] if after is not None else [])
    rows = [[n, f"{1000 * before.joint_rmse[n]:.3f}"] + ([f"{1000 * after.joint_rmse[n]:.3f}"] if after else [])
            for n in before.joint_names]
    body.append("<h2>Joints</h2>" + _table(rows, head))
    if after is not None:
        body.append(f"<p>Joint RMSE {1000 * before.rmse:.3f} mrad before, {1000 * after.rmse:.3f} mrad after: "
                    f"{data['improvement']['joint_rmse_ratio']:.1f}x smaller.</p>")
    plots = []
    for i, n in enumerate(before.joint_names):
        series = {"recorded": before.recorded[:, i], "before": before.predicted[:, i]}
        if after is not None:
            series["after"] = after.predicted[:, i]
        plots.append(_svg_lines(before.times, series, f"{n} (rad)"))
    body.append("<div>" + "".join(plots) + "</div>")
    if fit is not None:
        rep = data["fit"]
        body.append(f"<h2>Fit</h2><p>Command-to-state offset found and removed: {1000 * rep['offset_s']:.2f} ms "
                    f"(first estimate {1000 * rep['xcorr_offset_s']:.2f} ms); latency "
                    f"{1000 * rep['latency_s']:.2f} &plusmn; {1000 * rep['latency_ci95']:.2f} ms. Cost "
                    f"{rep['cost_nominal']:.4g} nominal, {rep['cost_fitted']:.4g} fitted; {rep['evaluations']} rollouts "
                    f"in {rep['wall_s']:.1f} s on {rep['workers']} worker(s). "
                    f"{rep.get('agreeing_starts', 1)} of {len(rep.get('starts', [])) or 1} least-squares starts "
                    f"ended as well as the best; the intervals are the widest of the curvature's, a block "
                    f"bootstrap's over {rep.get('bootstrap_segments', 0)} segments and the starts' spread.</p>")
        if rep.get("adequacy"):
            body.append(f"<p><b>Warning:</b> {html.escape(rep['adequacy'])}.</p>")
        body.append(_table([[p["name"], _fmt(p["nominal"]),
                             _fmt(p["value"]) if p.get("fitted", True) else "not fitted", _fmt(p["ci95"]),
                             _fmt(p.get("ci95_curvature", float("nan"))), _fmt(p.get("ci95_bootstrap", float("nan"))),
                             p["unit"], "yes" if p["identifiable"] else "NO", p["why"]] for p in rep["parameters"]],
                           ["parameter", "nominal", "fitted", "95% CI +-", "curvature +-", "bootstrap +-", "unit",
                            "identifiable", "note"]))
    objects = sorted(set(before.object_final_error) | set(after.object_final_error if after else {}))
    if objects:
        body.append("<h2>Objects</h2>" + _table(
            [[o, f"{1000 * before.object_final_error.get(o, float('nan')):.1f}"] +
             ([f"{1000 * after.object_final_error.get(o, float('nan')):.1f}"] if after else []) for o in objects],
            ["object", "final error before (mm)"] + (["after (mm)"] if after else [])))
    summary = data["after" if after is not None else "before"]
    body.append(f"<h2>Outcome and images</h2><p>Outcome recorded {summary['outcome']['recorded']}, twin "
                f"{summary['outcome']['twin']}. SSIM {_fmt(summary['ssim_mean'])}, object mask IoU "
                f"{_fmt(summary['mask_iou_mean'])}.</p>")
    frames = (after or before).frames
    if frames:
        pick = [frames[int(k)] for k in np.linspace(0, len(frames) - 1, min(4, len(frames)))]
        body.append("<table><tr><th>t (s)</th><th>recorded</th><th>twin</th></tr>" + "".join(
            f"<tr><td>{t:.2f}</td><td>{_png(rec)}</td><td>{_png(tw)}</td></tr>" for t, rec, tw in pick) + "</table>")
    checks = summary["keyframes"]
    if checks:
        keys = ["time", "event", "largest_deviation_rad", "camera_alignment_m", "relative_position_error_m",
                "penetration_m", "missing_contact", "ssim"]
        body.append("<h2>Keyframes</h2>" + _table([[_fmt(c.get(k, "")) for k in keys] for c in checks], keys))
    style = ("body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}svg{margin:4px;border:1px solid #eee}")
    html_path = out / "alignment.html"
    html_path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>r2s2r alignment</title>"
                         f"<style>{style}</style></head><body>{''.join(body)}</body></html>")
    return json_path, html_path


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


__all__ = ["write_report"]
