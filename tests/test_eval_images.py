"""A visuomotor checkpoint evaluated as users bring it: a small convolutional TorchScript policy
that sees the block only through the scene camera and turns the FR3 toward it
(tests/pointing_task.py). In-process trials render the policy's camera from the twin; the same
trials through the live graph (driver_node renders, policy_node observes over DDS) give the same
outcomes, seed for seed. Without images the policy cannot aim, and says so."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from r2s2r.eval.graph import compare, run_through_graph  # noqa: E402
from r2s2r.eval.runner import TrialSpec, TrialWorker  # noqa: E402
from r2s2r.eval.tasks import load_task  # noqa: E402
from r2s2r.policy import Observation, PolicyMetadata, load_policy  # noqa: E402
from r2s2r.policy.formats import save_torchscript  # noqa: E402
from r2s2r.policy.types import ObservationSpace  # noqa: E402
from tests.image_policies import (FR3, GREEN, RED, SIZE, TASK, PointAtRed, fit_point_at_red,  # noqa: E402
                                  point_at_red_metadata)


@pytest.fixture(scope="module")
def image_policy(tmp_path_factory) -> str:
    task = load_task(TASK)
    path = tmp_path_factory.mktemp("policy") / "point_at_red.pt"
    metadata = point_at_red_metadata()
    save_torchscript(path, PointAtRed(fit_point_at_red(task), metadata.chunk_length), metadata)
    return f"torchscript:{path}"


# Red blocks to both sides and ahead: hits; green ones far to a side: misses (the policy sees no red).
TRIALS = [({"block_x": 0.05, "block_y": 0.25, "block_colour": RED}, "success"),
          ({"block_x": -0.08, "block_y": -0.2, "block_colour": RED}, "success"),
          ({"block_x": 0.0, "block_y": 0.0, "block_colour": RED}, "success"),
          ({"block_x": 0.0, "block_y": 0.28, "block_colour": GREEN}, "missed_aim"),
          ({"block_x": 0.08, "block_y": -0.25, "block_colour": GREEN}, "missed_aim")]


def test_an_image_policy_aims_in_process_only_where_it_sees_the_block(image_policy):
    worker = TrialWorker()
    results = [worker.run(TrialSpec.of(image_policy, TASK, p, seed=i)) for i, (p, _) in enumerate(TRIALS)]
    assert [r.stage for r in results] == [stage for _, stage in TRIALS], \
        [(r.stage, round(r.margin, 3), r.detail) for r in results]
    # Aiming at a block 0.4 rad to a side takes seeing it: the hits are tight, not lucky.
    assert all(r.metrics["aim_error_rad"] < 0.04 for r in results[:3])
    assert all(r.detail == "" for r in results)


def test_the_policy_without_images_holds_and_says_why(image_policy):
    """The runner's images are what the policy aims with: the same observation without them is refused."""
    policy = load_policy(image_policy, PolicyMetadata.for_robot(FR3))
    joints = {"arm": FR3.home_positions.copy()}
    with pytest.raises(Exception, match="no image from camera 'scene'"):
        policy.act(Observation(0.0, joints, {}))


def test_an_image_policy_through_the_graph_has_the_in_process_outcomes(image_policy):
    """The driver renders the camera once per policy tick of sim time and policy_node pairs the
    newest frame with the joints, so a frame may be up to one tick (0.1 s) older than in-process,
    where it is rendered at the tick; the block does not move, and the outcomes agree."""
    specs = [TrialSpec.of(image_policy, TASK, p, seed=i) for i, (p, _) in enumerate(TRIALS[::2])]
    worker = TrialWorker()
    in_process = [worker.run(s) for s in specs]
    graph = run_through_graph(specs, real_time_factor=1.0, timeout_s=600)
    agreements = compare(in_process, graph)
    assert all(a.same_outcome for a in agreements), "\n".join(a.describe() for a in agreements)
    assert all(abs(a.margin_difference) < 0.02 for a in agreements), "\n".join(a.describe() for a in agreements)


def test_policies_are_checked_before_any_worker_starts(image_policy, tmp_path, capsys):
    """eval and search load the policy once in the parent and stop with one line naming what is
    wrong, before a store or a worker exists."""
    from r2s2r.cli import main
    from r2s2r.eval.cli import STORE_NAME
    other_camera = tmp_path / "overhead.pt"
    metadata = point_at_red_metadata()
    metadata = PolicyMetadata(ObservationSpace({"arm": 7}, (), {"overhead": SIZE}), metadata.action,
                              metadata.control_rate_hz, metadata.chunk_length)
    save_torchscript(other_camera, PointAtRed([0.0] * 4, metadata.chunk_length), metadata)
    cases = [
        (["eval", "--task", TASK, "--policy", f"torchscript:{tmp_path / 'missing.pt'}", "--trials", "2"],
         "missing.pt"),
        (["eval", "--task", TASK, "--policy", f"torchscript:{other_camera}", "--trials", "2"],
         "observes cameras overhead; task franka_point_at_block's scene has scene, wrist"),
        (["eval", "--task", "aloha_cube_handover", "--policy", image_policy, "--trials", "2"],
         "does not fit aloha: the policy observes joint group 'arm'"),
        (["search", "--task", TASK, "--policy", f"torchscript:{other_camera}", "--budget", "2"],
         "observes cameras overhead"),
    ]
    for k, (argv, expected) in enumerate(cases):
        out = tmp_path / f"out{k}"
        assert main(argv + ["--out", str(out), "--no-progress"]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert expected in err and len(err.splitlines()) == 1, err
        assert not (out / STORE_NAME).exists()
