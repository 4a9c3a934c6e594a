"""A visuomotor checkpoint evaluated as users bring it: a small convolutional TorchScript policy
that sees the block only through the scene camera and turns the FR3 toward it
(tests/pointing_task.py). In-process trials render the policy's camera from the twin; the same
trials through the live graph (driver_node renders, policy_node observes over DDS) give the same
outcomes, seed for seed. Without images the policy cannot aim, and says so."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from r2s2r.eval.graph import compare, run_through_graph  # noqa: E402
from r2s2r.eval.runner import TrialSpec, TrialWorker  # noqa: E402
from r2s2r.eval.tasks import load_task  # noqa: E402
from r2s2r.policy import Observation, PolicyMetadata, load_policy  # noqa: E402
from r2s2r.policy.formats import save_torchscript  # noqa: E402
from r2s2r.policy.tensor import _image_tensor  # noqa: E402  (what the policy makes of an image)
from r2s2r.policy.types import ActionSpace, ObservationSpace  # noqa: E402
from r2s2r.robots import get_robot  # noqa: E402
from r2s2r.sim.render import TwinRenderer  # noqa: E402
from r2s2r.sim.twin import Twin  # noqa: E402
from tests.backend_helpers import REPO  # noqa: E402

TASK = str(REPO / "tests" / "data" / "franka_point_at_block.yaml")
SIZE = (96, 128)  # the image the model takes (height, width); the camera renders 320 x 240
RED, GREEN = 0.0, 1.0  # block_colour choices
FR3 = get_robot("franka_fr3")


class PointAtRed(nn.Module):
    """A 1x1 convolution finds red pixels; their centroid in the image, mapped to an azimuth, is
    the first joint's target; the other joints hold home. No red: joint 1 at home."""

    def __init__(self, coefficients, chunk_length: int):
        super().__init__()
        self.redness = nn.Conv2d(3, 1, 1)
        with torch.no_grad():
            self.redness.weight[:] = torch.tensor([1.0, -0.6, -0.6]).reshape(1, 3, 1, 1)
            self.redness.bias[:] = -0.25
        self.register_buffer("coefficients", torch.tensor(coefficients, dtype=torch.float32))
        self.register_buffer("home", torch.tensor(FR3.home_positions, dtype=torch.float32))
        self.chunk_length = chunk_length

    def centroid(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mask = torch.relu(self.redness(image))[:, 0]
        height, width = mask.shape[-2], mask.shape[-1]
        total = mask.sum(dim=(1, 2))
        columns = (mask.sum(dim=1) * torch.linspace(0.0, 1.0, width)).sum(dim=1) / (total + 1e-6)
        rows = (mask.sum(dim=2) * torch.linspace(0.0, 1.0, height)).sum(dim=1) / (total + 1e-6)
        return columns, rows, total

    def forward(self, state: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        columns, rows, total = self.centroid(image)
        c = self.coefficients  # tan(azimuth) = y / x: the column's offset, scaled with depth (the row)
        aim = torch.atan(c[0] * columns + c[1] * columns * rows + c[2] * rows + c[3])
        azimuth = torch.where(total > 1.0, aim, torch.zeros_like(total))
        action = self.home.unsqueeze(0).repeat(state.shape[0], 1)
        action = torch.cat([azimuth.unsqueeze(1), action[:, 1:]], dim=1)
        return action.unsqueeze(1).repeat(1, self.chunk_length, 1)


def _metadata() -> PolicyMetadata:
    return PolicyMetadata(ObservationSpace({"arm": 7}, (), {"scene": SIZE}), ActionSpace({"arm": 7}, ()),
                          control_rate_hz=10.0, chunk_length=4, name="point_at_red")


def _fit(task) -> list[float]:
    """The azimuth from the red centroid, fitted by least squares on renders of the block on a grid."""
    model = PointAtRed([0.0] * 4, 1)
    rows = []
    for dx in (-0.1, 0.0, 0.1):
        for dy in np.linspace(-0.3, 0.3, 5):
            scene = task.scene({"block_x": dx, "block_y": float(dy)})
            twin = Twin(scene)
            with TwinRenderer(twin) as renderer:
                image = _image_tensor("scene", renderer.rgb("scene"), SIZE)
            with torch.no_grad():
                columns, image_rows, _ = model.centroid(torch.from_numpy(image))
            x, y = twin.data.body("block").xpos[:2]
            rows.append((float(columns[0]), float(image_rows[0]), float(np.arctan2(y, x))))
    column, row, azimuth = np.array(rows).T
    design = np.column_stack([column, column * row, row, np.ones_like(row)])
    coefficients, *_ = np.linalg.lstsq(design, np.tan(azimuth), rcond=None)
    worst = np.max(np.abs(np.arctan(design @ coefficients) - azimuth))
    assert worst < 0.03, f"the centroid does not tell the block's azimuth: worst fit error {worst:.3f} rad"
    return [float(c) for c in coefficients]


@pytest.fixture(scope="module")
def image_policy(tmp_path_factory) -> str:
    task = load_task(TASK)
    path = tmp_path_factory.mktemp("policy") / "point_at_red.pt"
    save_torchscript(path, PointAtRed(_fit(task), _metadata().chunk_length), _metadata())
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
    metadata = _metadata()
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
