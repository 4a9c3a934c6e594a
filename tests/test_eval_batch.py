"""Many trials of a learned policy in lockstep: a worker runs a batch of trials, each on its own
twin, and calls the policy once per tick on the stacked observations. Every trial's result is
the one it gives run alone, bit for bit, whatever the batch size and the number of workers,
while trials of the batch end at different ticks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("torch")

from r2s2r.eval.runner import TrialPool, TrialSpec, TrialWorker  # noqa: E402
from r2s2r.eval.tasks import load_task  # noqa: E402
from r2s2r.policy import Observation, PolicyMetadata, load_policy  # noqa: E402
from r2s2r.policy.formats import save_checkpoint, save_exported, save_onnx, save_torchscript  # noqa: E402
from r2s2r.policy.tensor import BATCH_ROWS  # noqa: E402
from r2s2r.sim.render import TwinRenderer  # noqa: E402
from r2s2r.sim.twin import Twin  # noqa: E402
from tests.image_policies import (FR3, GREEN, RED, TASK, AimWithAWobble, RefusesWithoutRed,  # noqa: E402
                                  fit_point_at_red, point_at_red_metadata)

# Red blocks: aimed at, and the trial ends once the aim is within 5 mrad (a different tick for
# each); green ones: not seen, run to the time limit.
POINTS = [{"block_x": 0.05, "block_y": 0.25, "block_colour": RED},
          {"block_x": -0.08, "block_y": -0.2, "block_colour": RED},
          {"block_x": 0.0, "block_y": 0.28, "block_colour": GREEN},
          {"block_x": 0.02, "block_y": 0.1, "block_colour": RED},
          {"block_x": -0.05, "block_y": -0.1, "block_colour": RED},
          {"block_x": 0.08, "block_y": -0.25, "block_colour": GREEN},
          {"block_x": 0.1, "block_y": -0.28, "block_colour": RED}]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The task with `finish_within`, and the wobbling aimer saved as TorchScript."""
    folder = tmp_path_factory.mktemp("batch")
    data = yaml.safe_load(open(TASK))
    data["params"]["finish_within"] = 0.005
    data["perturbations"] = str((Path(TASK).parent / data["perturbations"]).resolve())
    task_path = folder / "point_until_aimed.yaml"
    task_path.write_text(yaml.safe_dump(data))
    metadata = point_at_red_metadata()
    coefficients = fit_point_at_red(load_task(TASK))
    model = AimWithAWobble(coefficients, metadata.chunk_length)
    policy_path = save_torchscript(folder / "aim_with_a_wobble.pt", model, metadata)
    refusing = RefusesWithoutRed(coefficients, metadata.chunk_length)
    refusing_path = save_checkpoint(folder / "refuses_without_red.pt", refusing, metadata, model_kwargs=
                                    {"coefficients": coefficients, "chunk_length": metadata.chunk_length})
    return str(task_path), f"torchscript:{policy_path}", f"torch:{refusing_path}", model, metadata, folder


def test_a_batch_gives_each_trial_its_result_alone(setup):
    task, policy, *_ = setup
    specs = [TrialSpec.of(policy, task, p, seed=i) for i, p in enumerate(POINTS)]
    alone = [TrialWorker().run(s) for s in specs]
    lockstep = TrialWorker().run_batch(specs)
    with TrialPool(workers=2) as pool:  # two worker processes, one torch thread each, batches of up to 3
        pooled = {r.id: r for r in pool.run(specs, batch=3)}
    assert [r.deterministic() for r in lockstep] == [r.deterministic() for r in alone]
    assert [pooled[s.id].deterministic() for s in specs] == [r.deterministic() for r in alone]
    # Not a degenerate batch: hits and misses, and the trials end at different ticks.
    assert {r.stage for r in alone} == {"success", "missed_aim"}
    assert len({round(r.sim_time_s, 6) for r in alone}) >= 4, [r.sim_time_s for r in alone]


def test_every_format_batches_rows_as_it_runs_them_alone(setup, tmp_path):
    """act_batch's rows are the rows of one-observation act_batch calls, bit for bit, in every
    format r2s2r saves; a model whose batch dimension is fixed runs one observation at a time."""
    *_, model, metadata, folder = setup
    task = load_task(TASK)
    observations = []
    for k, point in enumerate(POINTS + POINTS[:4]):  # 11 rows: one block of 8 and a partial one
        twin = Twin(task.scene(point))
        with TwinRenderer(twin) as renderer:
            image = renderer.rgb("scene")
        joints = {"arm": FR3.home_positions + 0.01 * k}
        observations.append(Observation(0.1 * k, joints, {}, images={"scene": image}))
    saved = {"torchscript": folder / "aim_with_a_wobble.pt",
             "export": save_exported(tmp_path / "aim.pt2", model, metadata),
             "onnx": save_onnx(tmp_path / "aim.onnx", model, metadata)}
    for kind, path in saved.items():
        loaded = load_policy(f"{kind}:{path}", PolicyMetadata.for_robot(FR3))
        assert loaded.accepts_batch, kind
        alone = [loaded.act_batch([o])[0] for o in observations]
        for size in (2, 5, BATCH_ROWS, 11):
            together = loaded.act_batch(observations[:size])
            for a, b in zip(together, alone):
                assert a.stamp == b.stamp
                assert np.array_equal(a.to_array(metadata.action), b.to_array(metadata.action)), (kind, size)

    fixed = tmp_path / "fixed_batch.onnx"  # exported the way many ONNX tutorials do: batch 1, fixed
    import onnx
    import torch
    from r2s2r.policy import formats
    from r2s2r.policy.models import ConvPolicy
    plain = ConvPolicy(metadata.observation.size, metadata.action.size, metadata.chunk_length, cameras=1).eval()
    with torch.no_grad():
        torch.onnx.export(plain, tuple(torch.from_numpy(a) for a in formats.example_inputs(metadata)), str(fixed),
                          input_names=formats.input_names(metadata), output_names=["actions"], dynamo=False)
    proto = onnx.load(str(fixed))
    entry = proto.metadata_props.add()
    entry.key, entry.value = formats.EXTRA_FILE, formats._bundle(metadata, None)
    onnx.save(proto, str(fixed))
    one_at_a_time = load_policy(f"onnx:{fixed}", PolicyMetadata.for_robot(FR3))
    assert not one_at_a_time.accepts_batch
    assert one_at_a_time.act(observations[0]).length == metadata.chunk_length
    with pytest.raises(Exception, match="takes one observation at a time"):
        one_at_a_time.act_batch(observations[:2])


def test_a_model_that_raises_on_some_rows_fails_those_trials_alone(setup):
    """A batched call that raises is retried row by row: only the trials whose observations make
    the model raise record policy_error, as they would alone; the others succeed."""
    task, _, refusing, *_ = setup
    specs = [TrialSpec.of(refusing, task, p, seed=i) for i, p in enumerate(POINTS[:4])]
    together = TrialWorker().run_batch(specs)
    alone = [TrialWorker().run(s) for s in specs]
    assert [r.stage for r in together] == ["success", "success", "policy_error", "success"], \
        [(r.stage, r.detail) for r in together]
    assert "no red block in view" in together[2].detail
    assert [r.deterministic() for r in together] == [r.deterministic() for r in alone]


def test_eval_gives_the_same_store_whatever_the_policy_batch(setup, tmp_path, capsys):
    """`r2s2r eval --policy-batch N` on a two-worker pool stores the rows of one trial at a time."""
    from r2s2r.cli import main
    from r2s2r.eval.cli import STORE_NAME
    from r2s2r.eval.store import TrialStore
    task, policy, *_ = setup
    rows = []
    for batch in ("1", "4"):
        out = tmp_path / f"batch{batch}"
        argv = ["eval", "--task", task, "--policy", policy, "--trials", "6", "--workers", "2", "--policy-batch", batch,
                "--factors", "block_x,block_y,block_colour", "--out", str(out), "--no-progress", "--no-images"]
        assert main(argv) == 0, capsys.readouterr().err
        with TrialStore(out / STORE_NAME) as store:
            rows.append(sorted(r.deterministic() for r in store.results()))
    assert rows[0] == rows[1] and len(rows[0]) == 6
    with pytest.raises(SystemExit) as refused:
        main(["eval", "--task", task, "--policy", policy, "--policy-batch", "0"])
    assert refused.value.code == 2 and "--policy-batch: 0 is not in [1, 1024]" in capsys.readouterr().err
