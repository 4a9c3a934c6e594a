"""The demo's data step: expert demonstrations of franka_block_in_bowl collected in the twin, a
LeRobot v3.0 dataset written, a state policy trained on it for a few hundred steps and
evaluated on held-out trials of the same envelope, beside the expert (a few minutes on two
workers). The policy observes the objects' poses (privileged: the joints alone do not say where
the block is). A first taste of the loop, not a policy worth deploying: bench/train_and_eval.py
has the real figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TASK = "franka_block_in_bowl"
ENVELOPE = "operating"
EPISODES = 20
STEPS = 400
TRIALS = 50
EVAL_SEED = 1


@dataclass(frozen=True)
class DataDemo:
    dataset: Path
    checkpoint: Path
    losses: Path
    policy_successes: int
    expert_successes: int
    trials: int


def run_data_demo(out_dir: str | Path, workers: int = 2, progress: bool = True) -> DataDemo:
    from r2s2r.data.collect import CollectOptions, collect
    from r2s2r.eval.runner import TrialPool, plan_eval, run_trials
    from r2s2r.eval.store import TrialStore
    from r2s2r.eval.tasks import load_task
    from r2s2r.train.trainer import TrainConfig, Trainer

    out = Path(out_dir).resolve()
    if out.exists():  # a rerun starts over: the trained checkpoint's path would find the last run's trials
        import shutil
        shutil.rmtree(out)
    task = load_task(TASK)
    dataset = out / "dataset"
    with TrialPool(workers) as pool, TrialStore(out / "trials.sqlite") as store:
        collect(CollectOptions(task=TASK, policy=task.expert, episodes=EPISODES, envelope=ENVELOPE, cameras=(),
                               privileged=True), dataset, pool, progress=progress)
        run = out / "run"
        checkpoint = Trainer(TrainConfig(dataset=str(dataset), policy="mlp", steps=STEPS, checkpoint_every=STEPS,
                                         privileged=True), run).train(progress=progress)
        wins = {}
        for name, policy in (("expert", task.expert), ("trained", str(checkpoint))):
            store.open_campaign(f"demo_{name}", {"kind": "demo", "policy": policy, "trials": TRIALS})
            planned = plan_eval(policy, task, TRIALS, EVAL_SEED, envelope=ENVELOPE)
            results = run_trials(planned, store, f"demo_{name}", pool=pool, progress=progress)
            wins[name] = sum(r.success for r in results)
    return DataDemo(dataset, checkpoint, run / "losses.png", wins["trained"], wins["expert"], TRIALS)


__all__ = ["run_data_demo", "DataDemo"]
