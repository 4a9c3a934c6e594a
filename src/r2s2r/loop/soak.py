"""`r2s2r soak`: a task run over and over through the live ROS graph for a stretch of time (an
hour, as a cell runs unattended), counting successes, failures and interventions, with the
memory and CPU of every node sampled throughout.

The graph itself runs in nodes/soak.py, in a process of its own (this layer never imports
rclpy); this module checks the settings, starts it, relays its progress and writes the
report: soak.json and soak.html with episodes, success rate (Wilson interval), every
intervention with its time and cause, and each node's memory growth (a least-squares slope
over the samples after the first minute, in MB per hour) and mean CPU share.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from r2s2r.eval.report import CSS, _esc, _png, _pyplot, _table
from r2s2r.eval.stats import wilson

DRILLS = ("knock", "kill-policy")
CAUSES = ("safety stop", "object out of reach", "arm stuck", "node died", "policy not started", "deadline storm")
WARM_UP_S = 60.0  # memory growth is fitted after this much of the soak (imports and caches fill first)


class SoakError(ValueError):
    """Soak settings that cannot run; the message names the setting and what was expected."""


def parse_duration(text: str) -> float:
    """'1h', '30m', '90s', '1h30m' or plain seconds, as seconds."""
    value = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        seconds = float(value)
    else:
        parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", value)
        if not value or parts is None:
            raise SoakError(f"duration {text!r}; expected seconds or hours/minutes/seconds such as 1h, 30m, 1h30m, 90s")
        h, m, s = (float(p) if p else 0.0 for p in parts.groups())
        seconds = 3600 * h + 60 * m + s
    if not 0 < seconds <= 7 * 86400:
        raise SoakError(f"duration {text!r}; expected more than 0 s and at most 7 days")
    return seconds


def parse_drill(text: str) -> dict:
    """'knock@3': the drill and the episode (from 0) it strikes in."""
    what, _, episode = str(text).partition("@")
    if what not in DRILLS or not episode.isdigit():
        raise SoakError(f"drill {text!r}; expected DRILL@EPISODE with DRILL one of {', '.join(DRILLS)} and EPISODE a "
                        "count from 0, e.g. knock@2")
    return {"what": what, "episode": int(episode)}


@dataclass(frozen=True)
class SoakConfig:
    task: str
    policy: str
    duration_s: float = 3600.0
    episodes: int = 0  # at most this many episodes (0: as many as the duration holds)
    envelope: str | None = None
    seed: int = 0
    stuck_s: float = 10.0
    storm_misses: int = 50
    real_time_factor: float = 1.0
    sample_s: float = 5.0
    inject: tuple[dict, ...] = field(default_factory=tuple)

    def check(self) -> tuple[str, ...]:
        """Refuse what cannot run, by name, before the graph starts; the cameras the policy observes."""
        from r2s2r.eval.tasks import load_task
        from r2s2r.policy import PolicyMetadata, load_policy, read_policy_config
        from r2s2r.robots import get_robot
        task = load_task(self.task)  # an unknown task names the known ones
        if self.envelope:
            task.perturbations.within(self.envelope)  # an unknown envelope names the known ones
        # A policy that cannot be loaded for the task's robot is named before the graph starts.
        policy = load_policy(read_policy_config(self.policy), PolicyMetadata.for_robot(get_robot(task.robot)), {})
        cameras = tuple(policy.metadata.observation.cameras)  # which the driver must render for it
        getattr(policy, "close", lambda: None)()  # a remote policy holds a connection
        for name, value, low in (("stuck_s", self.stuck_s, 0.0), ("real_time_factor", self.real_time_factor, 0.0),
                                 ("sample_s", self.sample_s, 0.0)):
            if not (np.isfinite(value) and value > low):
                raise SoakError(f"{name} is {value}; expected a positive number")
        if self.storm_misses < 1 or self.episodes < 0:
            raise SoakError("storm_misses must be at least 1 and episodes at least 0")
        return cameras


@dataclass
class Soak:
    config: SoakConfig
    episodes: list[dict]
    resources: list[dict]
    wall_s: float
    out: Path
    error: str = ""  # why the soak's graph stopped before its time, with the end of its output

    @property
    def successes(self) -> int:
        return sum(1 for e in self.episodes if e["outcome"] == "success")

    @property
    def interventions(self) -> list[dict]:
        return [{"episode": e["episode"], "at_s": e["wall_since_start_s"], **e["intervention"]}
                for e in self.episodes if "intervention" in e]

    def memory(self) -> dict[str, dict]:
        """Per node: first and last resident MB, growth in MB per hour after the warm-up and over the
        second half, mean CPU %."""
        out = {}
        for node in sorted({r["node"] for r in self.resources}):
            rows = [r for r in self.resources if r["node"] == node]
            t = np.array([r["t"] for r in rows])
            rss = np.array([r["rss_mb"] for r in rows])
            # Bounded caches (the collision guards of recent scenes) fill in the first minutes; a leak
            # goes on growing in the second half too.
            out[node] = {"first_mb": float(rss[0]), "last_mb": float(rss[-1]), "max_mb": float(rss.max()),
                         "growth_mb_per_h": _growth(t, rss, min(WARM_UP_S, t.max() / 2)),
                         "growth_mb_per_h_second_half": _growth(t, rss, t.max() / 2),
                         "cpu_percent_mean": float(np.mean([r["cpu_percent"] for r in rows])),
                         "samples": len(rows), "processes": len({r["pid"] for r in rows})}
        return out


def _growth(t: np.ndarray, rss: np.ndarray, after: float) -> float:
    """MB per hour: the slope of a least-squares line through the samples from `after` seconds on."""
    late = t >= after
    return float(np.polyfit(t[late], rss[late], 1)[0]) * 3600 if late.sum() >= 2 else float("nan")


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill: the rows before it stand
    return rows


def run_soak(config: SoakConfig, out: str | Path, progress: bool = True) -> Soak:
    """Run the soak's graph (nodes/soak.py) for the configured duration and write its report.
    Ctrl-C ends the soak after the episode under way, and the report covers what ran."""
    cameras = config.check()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("episodes.jsonl", "resources.jsonl"):
        (out / stale).unlink(missing_ok=True)  # a soak is one stretch of time: it starts afresh
    (out / "config.json").write_text(json.dumps({**asdict(config), "cameras": list(cameras)}, indent=1))
    wall0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-u", "-m", "r2s2r.nodes.soak", str(out / "config.json"), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    try:
        with open(out / "graph.log", "w") as log:  # all the graph's output: a fault's traceback is there
            for line in proc.stdout:
                log.write(line)
                log.flush()
                tail = (tail + [line.rstrip()])[-40:]
                if progress and line.startswith("[soak]"):
                    print(line.rstrip(), flush=True)
        proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)  # it finishes the episode under way, then stops
        proc.wait()
    episodes = _read_jsonl(out / "episodes.jsonl")
    if proc.returncode not in (0, -signal.SIGINT) and not episodes:
        raise SoakError(f"the soak's graph exited with code {proc.returncode} before any episode ended:\n"
                        + "\n".join(tail))
    error = "" if proc.returncode in (0, -signal.SIGINT) else \
        f"the soak's graph stopped early (exit code {proc.returncode}):\n" + "\n".join(tail[-15:])
    soak = Soak(config, episodes, _read_jsonl(out / "resources.jsonl"), time.monotonic() - wall0, out, error)
    write_soak_report(soak)
    return soak


def _memory_plot(soak: Soak) -> str | None:
    if not soak.resources:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for node in sorted({r["node"] for r in soak.resources}):
        rows = [r for r in soak.resources if r["node"] == node]
        ax.plot([r["t"] / 60 for r in rows], [r["rss_mb"] for r in rows], label=node)
    ax.set_xlabel("minutes into the soak")
    ax.set_ylabel("resident memory (MB)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def summary(soak: Soak) -> dict:
    n = len(soak.episodes)
    rate = wilson(soak.successes, n) if n else None
    causes: dict[str, int] = {}
    for i in soak.interventions:
        causes[i["cause"]] = causes.get(i["cause"], 0) + 1
    # Commands the driver's checks refused (limits, the fingers' clearance): the arm held still for them.
    rejected = [e.get("commands_rejected", 0) for e in soak.episodes]
    return {"config": asdict(soak.config), "wall_s": soak.wall_s, "episodes": n, "successes": soak.successes,
            "failures": sum(1 for e in soak.episodes if e["outcome"] == "failure"),
            "commands": {"accepted": sum(e.get("commands_accepted", 0) for e in soak.episodes),
                         "rejected": sum(rejected), "episodes_with_rejections": sum(1 for r in rejected if r)},
            "success_rate": None if rate is None else {"rate": rate.rate, "low": rate.low, "high": rate.high},
            "interventions": soak.interventions, "interventions_by_cause": causes, "memory": soak.memory(),
            "error": soak.error}


def write_soak_report(soak: Soak) -> Path:
    """soak.json and soak.html in the soak's folder; the page's path."""
    s = summary(soak)
    (soak.out / "soak.json").write_text(json.dumps(s, indent=1))
    cfg = soak.config
    rate = s["success_rate"]
    rate_text = "no episode ended" if rate is None else \
        f"{s['successes']}/{s['episodes']} = {rate['rate']:.1%} [{rate['low']:.1%}, {rate['high']:.1%}]"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>soak: {_esc(cfg.task)}</title>"
             f"<style>{CSS}</style></head><body>", f"<h1>r2s2r soak: {_esc(cfg.task)}</h1>",
             f"<p class=meta>policy <code>{_esc(cfg.policy)}</code> through the live graph (driver_node on the twin, "
             f"policy_node in its own process); {soak.wall_s / 60:.1f} min of {cfg.duration_s / 60:.1f}; envelope "
             f"{_esc(cfg.envelope or 'the whole space')}; seed {cfg.seed}; arm stuck after {cfg.stuck_s:g} s; "
             f"deadline storm at {cfg.storm_misses} misses"
             + (f"; drills {', '.join(d['what'] + '@' + str(d['episode']) for d in cfg.inject)}" if cfg.inject else "")
             + "</p>",
             (f"<p><b>{_esc(soak.error.splitlines()[0])}</b></p><pre>{_esc(soak.error)}</pre>" if soak.error else ""),
             _table(["episodes", "successes [95 % CI]", "failures", "interventions",
                     "commands refused by the driver (episodes)"],
                    [[s["episodes"], rate_text, s["failures"], len(s["interventions"]),
                      f"{s['commands']['rejected']} of {s['commands']['accepted'] + s['commands']['rejected']} "
                      f"({s['commands']['episodes_with_rejections']})"]]),
             "<h2>Interventions</h2>",
             _table(["episode", "minutes into the soak", "cause", "what happened"],
                    [[i["episode"], f"{i['at_s'] / 60:.2f}", i["cause"], i["detail"]] for i in s["interventions"]])
             if s["interventions"] else "<p>none</p>",
             "<h2>Memory and CPU per node</h2>",
             _table(["node", "first (MB)", "last (MB)", "max (MB)", "growth (MB/h, after the first minute)",
                     "growth (MB/h, second half)", "mean CPU (% of a core)", "samples", "processes"],
                    [[node, f"{m['first_mb']:.0f}", f"{m['last_mb']:.0f}", f"{m['max_mb']:.0f}",
                      f"{m['growth_mb_per_h']:+.1f}", f"{m['growth_mb_per_h_second_half']:+.1f}",
                      f"{m['cpu_percent_mean']:.0f}", m["samples"], m["processes"]]
                     for node, m in s["memory"].items()])]
    plot = _memory_plot(soak)
    if plot:
        parts.append(f"<img class=plot src='data:image/png;base64,{plot}'/>")
    parts += ["<h2>Episodes</h2>",
              _table(["episode", "outcome", "stage", "margin", "simulated (s)", "perturbation"],
                     [[e["episode"], e["outcome"], e["stage"], f"{e['margin']:+.4f}", f"{e['sim_time_s']:.1f}",
                       ", ".join(f"{k} {v:.3g}" for k, v in e["perturbation"].items())] for e in soak.episodes]),
              "</body></html>"]
    path = soak.out / "soak.html"
    path.write_text("".join(parts))
    return path
