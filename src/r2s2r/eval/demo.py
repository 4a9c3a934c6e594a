"""The demo's failure search: CEM on franka_block_in_bowl with its scripted expert.

Five factors the expert is weak against by design (skills/experts.py): where the block lies
on the table (x out to beyond reach), how it is turned, how slippery and how heavy it is. A
few hundred trials on two workers take a minute or two, the control loop at the FR3's own 1 kHz.
"""

from __future__ import annotations

from pathlib import Path

TASK = "franka_block_in_bowl"
FACTORS = ("block_x", "block_y", "block_yaw", "block_friction", "block_mass_scale")
BUDGET = 200


def run_search_demo(out_dir: str | Path, budget: int = BUDGET, workers: int = 2, progress: bool = True) -> Path:
    """Search, cluster, refine, report; returns the report's path (OUT/report.html)."""
    from r2s2r.eval.report import write_report
    from r2s2r.eval.store import TrialStore
    from r2s2r.eval.tasks import load_task
    from r2s2r.search.campaign import run_search

    out = Path(out_dir)
    task = load_task(TASK)
    store_path = out / "trials.sqlite"
    with TrialStore(store_path) as store:
        search = run_search(task, task.expert, budget, "cem", seed=0, factors=FACTORS, workers=workers, store=store,
                            refine_steps=3, progress=progress)
        meta = {"task": TASK, "policy": task.expert, "sampler": "cem", "campaign": search.campaign, "seed": 0,
                "budget": budget, "store": str(store_path)}
        return write_report(out, search.results, search.space, meta, search.atlas, search.boundaries,
                            store_path=store_path, refined=search.refined)


__all__ = ["run_search_demo"]
