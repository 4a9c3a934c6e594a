"""A synthetic task for the evaluation engine's tests: a real twin and a real trial loop, a
trial of a fifth of a second, and failure regions known in closed form.

The block stands where the perturbation puts it (object_x / object_y offsets from its nominal
(0.45, 0.12)); the arm holds still (`scripted:hold`). After the trial the logic reads the
block's position from the twin and fails it in two regions of the table:

- `too_near`: x < NEAR_X (block_x < NEAR_X - 0.45), a half-plane;
- `hazard`: within HAZARD_RADIUS of HAZARD_XY, a disc.

Margin: the smaller of (x - NEAR_X) and (distance to HAZARD_XY - HAZARD_RADIUS), in metres.
Two more factors (colour, light) change the scene but not the outcome.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from r2s2r.eval.tasks import Outcome, TaskLogic

REPO = Path(__file__).resolve().parents[1]
NOMINAL_XY = (0.45, 0.12)
NEAR_X = 0.38
HAZARD_XY = (0.55, 0.22)
HAZARD_RADIUS = 0.05
HOLD = "scripted:hold"


def expected_margin(dx: float, dy: float) -> tuple[float, str]:
    """The margin and stage a block at offsets (dx, dy) gets, from geometry alone."""
    x, y = NOMINAL_XY[0] + dx, NOMINAL_XY[1] + dy
    near = x - NEAR_X
    hazard = float(np.hypot(x - HAZARD_XY[0], y - HAZARD_XY[1])) - HAZARD_RADIUS
    margin = min(near, hazard)
    return margin, "success" if margin > 0 else ("too_near" if near <= hazard else "hazard")


class Hazards(TaskLogic):
    def __init__(self, task, params):
        super().__init__(task, params)
        params.reject_unknown({"explode"})
        self.explode = params.boolean("explode", False)  # blow the physics up at the first tick

    def start(self, twin) -> None:
        self.body = twin.model.body("block").id

    def step(self, twin) -> None:
        if self.explode:
            twin.data.qvel[twin.model.body_dofadr[self.body]] = 1e30  # what a bad contact can do
            self.explode = False

    def outcome(self, twin, timed_out: bool) -> Outcome:
        x, y = (float(v) for v in twin.data.xpos[self.body][:2])
        margin, stage = expected_margin(x - NOMINAL_XY[0], y - NOMINAL_XY[1])
        return Outcome(margin > 0, margin, stage, {"x": x, "y": y})


LOGIC = Hazards

TASK = {
    "name": "synthetic_hazards",
    "logic": "tests.eval_helpers",
    "time_limit_s": 0.2,
    "control_rate_hz": 20.0,
    "perturbations": "perturbations.yaml",
    "scene": {
        "robot": "franka_fr3",
        "timestep": 0.002,
        "table": {"size": [1.1, 1.2, 0.04], "center": [0.5, 0.0], "height": 0.0},
        "objects": [{"name": "block", "shape": "box", "size": [0.05, 0.05, 0.05], "mass": 0.1,
                     "pos": [NOMINAL_XY[0], NOMINAL_XY[1], 0.025], "rgba": [0.85, 0.15, 0.12, 1.0]}],
    },
}
PERTURBATIONS = {
    "factors": [
        {"name": "block_x", "kind": "object_x", "target": "block", "range": [-0.15, 0.15]},
        {"name": "block_y", "kind": "object_y", "target": "block", "range": [-0.15, 0.15]},
        {"name": "block_colour", "kind": "object_color", "target": "block", "choices": [[0.85, 0.15, 0.12, 1.0],
                                                                                        "green", "blue"]},
        {"name": "light", "kind": "light_intensity", "target": "key", "range": [0.5, 1.2]},
    ],
    # Narrower than the space on both sides of too_near's boundary (block_x = NEAR_X - 0.45).
    "envelopes": {"inner": {"block_x": [-0.12, 0.1], "block_y": [-0.1, 0.1]}},
}


def synthetic_task(folder: Path, explode: bool = False) -> Path:
    """Write the task and its perturbation space under `folder`; returns the task file.
    `explode`: a variant whose physics blows up at the first tick."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "perturbations.yaml").write_text(yaml.safe_dump(PERTURBATIONS))
    path = folder / ("synthetic_explodes.yaml" if explode else "synthetic_hazards.yaml")
    path.write_text(yaml.safe_dump({**TASK, "params": {"explode": True}} if explode else TASK))
    return path


def subprocess_env() -> dict:
    """Environment for r2s2r subprocesses that load this module (the task's logic)."""
    import os
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")])
    return env
