"""The same trials through the live ROS graph, and how their outcomes compare with in-process.

`run_through_graph(specs)` runs each trial with driver_node and policy_node talking over DDS
(nodes/eval_graph.py, in a child process: this layer never imports rclpy) and returns
TrialResults like the in-process runner's. `compare(in_process, graph)` pairs them: the
outcome (success and failure stage) must agree; margins agree to within what the graph's
asynchrony moves them (see nodes/eval_graph.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from r2s2r.eval.runner import TrialResult, TrialSpec


class GraphError(RuntimeError):
    """The graph run failed; the message carries its output."""


def run_node_process(module: str, args: Sequence[str], timeout_s: float | None, what: str, produces: Path) -> None:
    """Run `python -m module args` (a nodes/ entry point: this layer never imports rclpy); a
    GraphError carrying its output when it times out, fails or leaves `produces` unwritten."""
    try:
        proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        output = f"{exc.stdout or ''}\n{exc.stderr or ''}"
        raise GraphError(f"{what} took longer than {timeout_s} s:\n{output[-4000:]}") from None
    if proc.returncode != 0 or not produces.is_file():
        raise GraphError(f"{what} failed (exit code {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


def run_through_graph(specs: Sequence[TrialSpec], real_time_factor: float = 1.0,
                      timeout_s: float | None = None, cell: str | Path | None = None) -> list[TrialResult]:
    """Run `specs` through driver_node + policy_node over DDS (on this process's ROS_DOMAIN_ID);
    with `cell` (a proxy cell file), in that proxy-real cell instead of the twin."""
    with tempfile.TemporaryDirectory(prefix="r2s2r-graph-") as tmp:
        specs_path, results_path = Path(tmp) / "specs.json", Path(tmp) / "results.json"
        specs_path.write_text(json.dumps([{"policy": s.policy, "task": s.task, "perturbation": s.values,
                                           "seed": s.seed, "control_rate_hz": s.control_rate_hz} for s in specs]))
        run_node_process("r2s2r.nodes.eval_graph", [str(specs_path), str(results_path), "--real-time-factor",
                                                    str(real_time_factor)] + (["--cell", str(cell)] if cell else []),
                         timeout_s, "trials through the graph", results_path)
        return [TrialResult(**row) for row in json.loads(results_path.read_text())]


@dataclass(frozen=True)
class Agreement:
    in_process: TrialResult
    graph: TrialResult

    @property
    def same_outcome(self) -> bool:
        return self.in_process.success == self.graph.success and self.in_process.stage == self.graph.stage

    @property
    def margin_difference(self) -> float:
        return self.graph.margin - self.in_process.margin

    def describe(self) -> str:
        a, b = self.in_process, self.graph
        return (f"{a.id}: in-process {a.stage} {a.margin:+.4f}, through the graph {b.stage} {b.margin:+.4f}"
                f"{'' if self.same_outcome else '  <- DIFFERENT OUTCOME'}")


def compare(in_process: Sequence[TrialResult], graph: Sequence[TrialResult]) -> list[Agreement]:
    by_id = {r.id: r for r in graph}
    missing = [r.id for r in in_process if r.id not in by_id]
    if missing:
        raise ValueError(f"trials without a graph result: {', '.join(missing)}")
    return [Agreement(r, by_id[r.id]) for r in in_process]


__all__ = ["run_node_process", "run_through_graph", "compare", "Agreement", "GraphError"]
