"""`r2s2r train` (train.trainer): deterministic for a seed, a resumed run equal to an
uninterrupted one, both policies learn, and the chain from demonstrations to the robot: expert
episodes collected in the twin, a state policy trained on them, its checkpoint folder run as a
policy in the trial runner and by policy_node on the graph, moving the twin."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import torch
import yaml
from std_msgs.msg import Float64MultiArray

from r2s2r.contract import Topics
from r2s2r.data.collect import CollectOptions, DemonstrationRecorder, collect, state_names
from r2s2r.data.lerobot_v3 import Episode, Feature, write_episodes
from r2s2r.eval.runner import POLICY_ERROR, TrialPool, TrialSpec, TrialWorker
from r2s2r.policy import Observation, load_policy
from r2s2r.policy.normalize import Normalizer
from r2s2r.policy.types import PolicyError
from r2s2r.processes import sole_writer
from r2s2r.robots import get_robot
from r2s2r.train import trainer as trainer_module
from r2s2r.train.models import ActPolicy, default_channels, spatial_softmax
from r2s2r.train.trainer import TrainConfig, Trainer, TrainError, latest_checkpoint
from tests.test_policy_dds import policy_status, trigger

FR3 = get_robot("franka_fr3")
NAMES = state_names(FR3)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Episodes of smooth motion, each joint a sine of its own phase, the action the next state;
    a square in the image moves with the first joint, and the environment state says where it is.
    What comes next follows from what is seen."""
    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(6):
        n = 40
        phase = rng.uniform(0, 2 * np.pi, len(NAMES))
        t = np.arange(n + 1)[:, None] * 0.15
        motion = np.sin(t + phase).astype(np.float32)
        images = np.zeros((n, 24, 32, 3), np.uint8)
        column = (14 + 12 * motion[:n, 0]).astype(int)
        for k in range(n):
            images[k, 8:16, column[k]:column[k] + 4] = 255
        square = np.stack([(column + 2) / 32.0, np.full(n, 0.5)], axis=1).astype(np.float32)
        episodes.append(Episode("synthetic", {"observation.state": motion[:n], "action": motion[1:],
                                              "observation.environment_state": square,
                                              "observation.images.scene": images}))
    features = {"observation.state": Feature("float32", (len(NAMES),), NAMES),
                "action": Feature("float32", (len(NAMES),), NAMES),
                "observation.environment_state": Feature("float32", (2,), ["square.x", "square.y"]),
                "observation.images.scene": Feature("video", (24, 32, 3))}
    return write_episodes(tmp_path_factory.mktemp("train") / "synthetic", 20, features, "franka_fr3", episodes)


def weights(checkpoint) -> dict:
    return torch.load(checkpoint / "model.pt", weights_only=True)["state_dict"]


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def killed_after(config, run, step: int, monkeypatch, partial: str | None = None) -> None:
    """Train `run`, killed right after its checkpoint of `step` (and, with `partial`, in the
    middle of writing that checkpoint folder next)."""
    save = Trainer._save

    def save_then_die(self, at, *args):
        folder = save(self, at, *args)
        if at == step:
            if partial:
                (folder.parent / f"{partial}.partial").mkdir()
            raise KeyboardInterrupt
        return folder
    monkeypatch.setattr(Trainer, "_save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        Trainer(config, run).train(progress=False)
    monkeypatch.undo()


def test_training_is_deterministic_and_resumes_exactly(synthetic, tmp_path, monkeypatch):
    config = TrainConfig(dataset=str(synthetic), policy="mlp", steps=60, batch=16, checkpoint_every=20, seed=3,
                         model={"hidden": 32, "layers": 2})
    first = Trainer(config, tmp_path / "a").train(progress=False)
    again = Trainer(config, tmp_path / "b").train(progress=False)
    assert first.name == "step_000060" and same(weights(first), weights(again))
    other = Trainer(TrainConfig(**{**config.__dict__, "seed": 4}), tmp_path / "c").train(progress=False)
    assert not same(weights(first), weights(other))
    # Noise on the states changes what is learned, the same way for the same seed.
    noisy = TrainConfig(**{**config.__dict__, "state_noise": 0.1})
    noisy_weights = weights(Trainer(noisy, tmp_path / "n1").train(progress=False))
    assert same(noisy_weights, weights(Trainer(noisy, tmp_path / "n2").train(progress=False)))
    assert not same(noisy_weights, weights(first))

    # Killed right after its step-40 checkpoint (and in the middle of writing the next one), then resumed.
    killed_after(config, tmp_path / "killed", 40, monkeypatch, partial="step_000060")
    assert latest_checkpoint(tmp_path / "killed").name == "step_000040"
    resumed = Trainer(config, tmp_path / "killed").train(progress=False)
    assert resumed.name == "step_000060" and same(weights(resumed), weights(first))
    losses = json.loads((tmp_path / "killed" / "losses.json").read_text())
    assert [s for s, _ in losses["train"]] == list(range(1, 61))
    assert (tmp_path / "killed" / "losses.png").stat().st_size > 0
    # Other settings do not resume a run.
    with pytest.raises(TrainError, match="batch: 16"):
        Trainer(TrainConfig(**{**config.__dict__, "batch": 8}), tmp_path / "a")
    # Nor does a second process train a run while another one does.
    with sole_writer(tmp_path / "a", "r2s2r train", TrainError):
        with pytest.raises(TrainError, match="another r2s2r train is writing here now"):
            Trainer(TrainConfig(**{**config.__dict__, "steps": 80}), tmp_path / "a").train(progress=False)


@pytest.mark.parametrize("policy", ["mlp", "act"])
def test_both_policies_learn_and_load_through_torch(synthetic, tmp_path, policy):
    model = {"hidden": 64} if policy == "mlp" else {"width": 32, "feedforward": 64, "channels": (8, 16)}
    config = TrainConfig(dataset=str(synthetic), policy=policy, steps=150, batch=32, checkpoint_every=150,
                         chunk_length=4, image_size=(32, 24), validation_share=0.2, model=model)
    checkpoint = Trainer(config, tmp_path / policy).train(progress=False)
    losses = json.loads((tmp_path / policy / "losses.json").read_text())
    train = np.array(losses["train"])[:, 1]
    assert train[-20:].mean() < 0.6 * train[:20].mean(), f"{policy}: {train[:20].mean()} -> {train[-20:].mean()}"
    assert losses["validation"] and np.isfinite(losses["validation"][-1][1])
    policy_object = load_policy(f"torch:{checkpoint / 'model.pt'}")
    assert policy_object.metadata.action.size == len(NAMES) and policy_object.metadata.chunk_length == 4
    assert dict(policy_object.metadata.observation.cameras) == ({} if policy == "mlp" else {"scene": (24, 32)})
    folder_policy = load_policy(str(checkpoint))  # the checkpoint folder is a policy source too
    assert folder_policy.metadata == policy_object.metadata


def test_an_auxiliary_loss_teaches_the_image_policy_where_objects_are(synthetic, tmp_path):
    model = {"width": 32, "feedforward": 64, "channels": (8, 16)}
    plain = TrainConfig(dataset=str(synthetic), policy="act", steps=150, batch=32, checkpoint_every=150,
                        chunk_length=4, image_size=(32, 24), validation_share=0.2, image_shift=2, model=model)
    taught = TrainConfig(**{**plain.__dict__, "object_pose_loss": 1.0})
    checkpoint = Trainer(taught, tmp_path / "taught").train(progress=False)
    losses = json.loads((tmp_path / "taught" / "losses.json").read_text())
    poses = np.array(losses["object_pose"])[:, 1]
    assert poses[-20:].mean() < 0.5 * poses[:20].mean(), f"{poses[:20].mean()} -> {poses[-20:].mean()}"
    assert np.isfinite(losses["validation_object_pose"][-1][1])
    # Shifts and all, the same seed gives the same weights; the loss changes what is learned.
    assert same(weights(checkpoint), weights(Trainer(taught, tmp_path / "again").train(progress=False)))
    untaught = Trainer(plain, tmp_path / "plain").train(progress=False)
    assert "auxiliary.weight" in weights(checkpoint) and "auxiliary.weight" not in weights(untaught)
    assert not torch.equal(weights(checkpoint)["head.weight"], weights(untaught)["head.weight"])
    # The policy observes what one trained without the poses observes: the joints and the image.
    assert load_policy(str(checkpoint)).metadata == load_policy(str(untaught)).metadata
    assert not load_policy(str(checkpoint)).metadata.observation.environment
    assert "environment" not in json.dumps(torch.load(checkpoint / "model.pt", weights_only=True)["normalization"])


def test_a_keypoint_is_where_its_map_peaks():
    scores = torch.zeros(1, 2, 6, 8)
    scores[0, 0, 1, 6] = 50.0  # near the top right
    scores[0, 1, 4, 0] = 50.0  # near the bottom left
    x0, x1, y0, y1 = spatial_softmax(scores)[0].tolist()
    assert (x0, y0) == pytest.approx((-1 + 2 * 6 / 7, -1 + 2 * 1 / 5), abs=1e-4)
    assert (x1, y1) == pytest.approx((-1.0, -1 + 2 * 4 / 5), abs=1e-4)
    assert spatial_softmax(torch.zeros(1, 1, 6, 8))[0].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_keypoints_read_the_objects_poses_and_hand_them_to_the_decoder(synthetic, tmp_path):
    model = {"width": 32, "feedforward": 64, "channels": (8, 16), "keypoints": 4}
    config = TrainConfig(dataset=str(synthetic), policy="act", steps=200, batch=32, checkpoint_every=200,
                         chunk_length=4, image_size=(32, 24), validation_share=0.2, object_pose_loss=1.0, model=model)
    checkpoint = Trainer(config, tmp_path / "keypoints").train(progress=False)
    losses = json.loads((tmp_path / "keypoints" / "losses.json").read_text())
    poses = np.array(losses["object_pose"])[:, 1]
    assert poses[-20:].mean() < 0.5 * poses[:20].mean(), f"{poses[:20].mean()} -> {poses[-20:].mean()}"
    trained = weights(checkpoint)
    assert "auxiliary.0.weight" in trained and "poses_in.weight" in trained and "keypoints_in.weight" in trained
    # The reading is part of what the policy acts on, so the checkpoint rebuilds it: moved to
    # the right in the picture, the square is read further right. The policy observes no poses.
    assert not load_policy(str(checkpoint)).metadata.observation.environment
    stored = torch.load(checkpoint / "model.pt", weights_only=True)
    network = ActPolicy(**stored["model"]["kwargs"])
    network.load_state_dict(stored["state_dict"])
    network.eval()
    images = torch.zeros(2, 3, 24, 32)
    images[0, :, 8:16, 4:8] = 1.0
    images[1, :, 8:16, 22:26] = 1.0
    scene = Normalizer.from_dict(stored["normalization"]).features["image.scene"]
    mean, std = (torch.tensor(np.asarray(scene.stats[k]), dtype=torch.float32) for k in ("mean", "std"))
    with torch.no_grad():
        _, read = network.forward_with_auxiliary(torch.zeros(2, len(NAMES)), (images - mean) / (std + scene.eps))
    assert read[1, 0] > read[0, 0] + 0.5, read[:, 0]  # normalised x: the columns are 1.6 std apart


def test_the_image_network_keeps_the_token_count_small_at_any_size():
    assert default_channels(48, 64) == (16, 32, 64)  # 8x6 cells
    assert default_channels(96, 128) == (16, 32, 64, 64)  # one stage more: 8x6 again
    policy = ActPolicy(8, 8, 10, cameras=2, image_height=96, image_width=128)
    assert policy.position.shape[1] == 1 + 2 * 48
    chunk = policy(torch.zeros(3, 8), torch.zeros(3, 3, 96, 128), torch.zeros(3, 3, 96, 128))
    assert chunk.shape == (3, 10, 8)


def test_a_dataset_without_what_training_needs_is_refused(synthetic, tmp_path):
    with pytest.raises(TrainError, match="cameras"):
        Trainer(TrainConfig(dataset=str(synthetic), policy="act", cameras=("wrist",)), tmp_path / "x").train(False)
    with pytest.raises(TrainError, match="no meta/info.json"):
        Trainer(TrainConfig(dataset=str(tmp_path), policy="mlp"), tmp_path / "y").train(False)
    with pytest.raises(TrainError, match="policy 'gpt'"):
        Trainer(TrainConfig(dataset=str(synthetic), policy="gpt"), tmp_path / "z")
    with pytest.raises(TrainError, match="expected 0 for policy 'mlp'"):
        Trainer(TrainConfig(dataset=str(synthetic), policy="mlp", object_pose_loss=1.0), tmp_path / "m")
    with pytest.raises(TrainError, match="image_shift -1"):
        Trainer(TrainConfig(dataset=str(synthetic), policy="act", image_shift=-1), tmp_path / "s")
    blind = write_episodes(tmp_path / "blind", 20, {"observation.state": Feature("float32", (len(NAMES),), NAMES),
                                                    "action": Feature("float32", (len(NAMES),), NAMES),
                                                    "observation.images.scene": Feature("video", (24, 32, 3))},
                           "franka_fr3", [Episode("synthetic", {
                               "observation.state": np.zeros((10, len(NAMES)), np.float32),
                               "action": np.zeros((10, len(NAMES)), np.float32),
                               "observation.images.scene": np.zeros((10, 24, 32, 3), np.uint8)})] * 2)
    with pytest.raises(TrainError, match="no observation.environment_state; expected .* collected with --privileged"):
        Trainer(TrainConfig(dataset=str(blind), policy="act", object_pose_loss=1.0), tmp_path / "b").train(False)


def test_demonstrations_to_a_policy_that_moves_the_twin_and_the_graph(tmp_path, stack_process, ros_client):
    options = CollectOptions(task="franka_block_in_bowl", policy="scripted:franka_block_in_bowl", episodes=4,
                             keep="all", envelope="operating", cameras=(), privileged=True)
    with TrialPool(1) as pool:
        collect(options, tmp_path / "demos", pool, progress=False)
    config = TrainConfig(dataset=str(tmp_path / "demos"), policy="mlp", steps=300, batch=64, checkpoint_every=300)
    checkpoint = Trainer(config, tmp_path / "run").train(progress=False)
    # In the trial runner: the checkpoint folder as the policy; its recorded states show the arm moving.
    spec = TrialSpec.of(str(checkpoint), "franka_block_in_bowl", {}, 7)
    result, recorded = TrialWorker().run_recorded(spec, partial(DemonstrationRecorder, (), (2, 2)))
    states = recorded["observation.state"]
    assert result.stage != POLICY_ERROR, result.detail  # it ran (a refused target is the policy's to learn)
    assert np.ptp(states[:, :7], axis=0).max() > 0.05, "the trained policy should move the arm"
    # With the objects' poses (privileged): it runs in the twin, and it says why where no pose is given.
    privileged = Trainer(TrainConfig(**{**config.__dict__, "privileged": True, "steps": 100, "checkpoint_every": 100}),
                         tmp_path / "privileged").train(progress=False)
    policy = load_policy(str(privileged))
    assert policy.metadata.observation.environment == ("block", "bowl")
    assert policy.metadata.observation.size == len(NAMES) + 14
    result, recorded = TrialWorker().run_recorded(TrialSpec.of(str(privileged), "franka_block_in_bowl", {}, 7),
                                                  partial(DemonstrationRecorder, (), (2, 2)))
    assert result.stage != POLICY_ERROR, result.detail
    assert np.ptp(recorded["observation.state"][:, :7], axis=0).max() > 0.05
    blind = Observation(0.0, {"arm": np.zeros(7)}, {"gripper": 0.04})
    with pytest.raises(PolicyError, match="privileged"):
        policy.act(blind)
    # On the graph: policy_node runs the same folder.
    stack = {"name": "trained", "nodes": [
        {"name": "driver", "executable": "driver_node", "parameters": [
            "config/robots/franka_fr3.yaml",
            {"backend": "sim", "scene": "config/scenes/franka_table.yaml", "camera_rate_hz": 0.0}],
         "on_exit": "stop"},
        {"name": "policy", "executable": "policy_node", "parameters": [
            {"robot": "franka_fr3", "policy": str(checkpoint), "command_rate_hz": 100.0, "use_sim_time": True}],
         "on_exit": "stop"}]}
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(stack))
    proc = stack_process(str(path))
    client = ros_client()
    arm = FR3.group("arm").joints
    start = client.wait_for_joint_states(60).positions_of(arm)
    assert client.wait_for_subscriber(Topics.position_commands("arm"), Float64MultiArray, 30)
    assert client.wait_for(lambda: policy_status(client) is not None, 30), proc.output
    reply = trigger(client, "start")
    assert reply.success, reply.message
    assert client.wait_for(lambda: np.abs(client.positions(arm) - start).max() > 0.05, 60), \
        (policy_status(client), proc.output[-3000:])
    assert policy_status(client)[1]["errors"] == "0", policy_status(client)


def test_warm_up_is_short_for_short_runs():
    config = TrainConfig(dataset="x", steps=50, learning_rate=1.0)
    assert trainer_module._learning_rate(config, 4) == pytest.approx(1.0)


def test_the_command_line_trains_keypoints_for_the_image_policy_only(synthetic, tmp_path, capsys):
    from r2s2r.cli import main
    common = ["train", "--dataset", str(synthetic), "--steps", "4", "--batch", "8", "--no-progress"]
    assert main(common + ["--policy", "mlp", "--keypoints", "4", "--out", str(tmp_path / "mlp")]) == 2
    assert "keypoints train the image policy; expected 0 for policy 'mlp'" in capsys.readouterr().err
    assert main(common + ["--policy", "act", "--keypoints", "4", "--image-size", "32x24",
                          "--out", str(tmp_path / "act")]) == 0
    assert json.loads((tmp_path / "act" / "config.json").read_text())["model"] == {"keypoints": 4}
    assert "keypoints_in.weight" in weights(latest_checkpoint(tmp_path / "act"))


def squares(root, columns, rng, distractors: bool = False):
    """Episodes of one frame per scene (as stills are): a red square at column `columns[i]`, the
    environment state its centre, random joints; with `distractors`, a green square of the same
    size elsewhere on the row."""
    episodes = []
    for column in columns:
        image = rng.integers(0, 40, (1, 24, 32, 3), dtype=np.uint8)  # every channel varies: its std is no 0
        image[0, 8:16, column:column + 4] = (255, 0, 0)
        if distractors:
            other = rng.choice([c for c in range(29) if abs(c - column) >= 6])
            image[0, 8:16, other:other + 4] = (0, 255, 0)
        state = rng.uniform(-1, 1, (1, len(NAMES))).astype(np.float32)
        episodes.append(Episode("squares", {"observation.state": state, "action": state,
                                            "observation.environment_state": np.array(
                                                [[(column + 2) / 32.0, 0.5]], np.float32),
                                            "observation.images.scene": image}))
    features = {"observation.state": Feature("float32", (len(NAMES),), NAMES),
                "action": Feature("float32", (len(NAMES),), NAMES),
                "observation.environment_state": Feature("float32", (2,), ["square.x", "square.y"]),
                "observation.images.scene": Feature("video", (24, 32, 3))}
    return write_episodes(root, 20, features, "franka_fr3", episodes)


def read_square(checkpoint, columns: tuple[int, int]) -> float:
    """The trained reading of the red square's x (in picture widths) in a picture with the red
    square at columns[0] and a green one at columns[1]."""
    stored = torch.load(checkpoint / "model.pt", weights_only=True)
    network = ActPolicy(**stored["model"]["kwargs"])
    network.load_state_dict(stored["state_dict"])
    network.eval()
    image = torch.full((1, 3, 24, 32), 20 / 255)
    image[0, :, 8:16, columns[0]:columns[0] + 4] = torch.tensor([1.0, 0.0, 0.0])[:, None, None]
    image[0, :, 8:16, columns[1]:columns[1] + 4] = torch.tensor([0.0, 1.0, 0.0])[:, None, None]
    normalization = Normalizer.from_dict(stored["normalization"])
    scene = normalization.features["image.scene"]
    mean, std = (torch.tensor(np.asarray(scene.stats[k]), dtype=torch.float32) for k in ("mean", "std"))
    with torch.no_grad():
        read = network.read_poses(torch.zeros(1, len(NAMES)), (image - mean) / (std + scene.eps))
    return float(read[0, 0])


def test_stills_teach_the_pose_reading_what_the_demonstrations_never_show(tmp_path, monkeypatch):
    """Demonstrations show a red square alone; stills show it beside a green one. Trained with
    the stills, the reading finds the red square and ignores the green; trained on the
    demonstrations alone, a green square pulls it away."""
    rng = np.random.default_rng(1)
    demos = squares(tmp_path / "demos", rng.integers(0, 29, 40), rng)
    stills = squares(tmp_path / "stills", rng.integers(0, 29, 160), rng, distractors=True)
    model = {"width": 32, "feedforward": 64, "channels": (8, 16), "keypoints": 4}
    config = TrainConfig(dataset=str(demos), policy="act", steps=40, batch=32, checkpoint_every=20, chunk_length=2,
                         image_size=(32, 24), validation_share=0.0, object_pose_loss=1.0, model=model,
                         stills=str(stills), still_steps=400)
    checkpoint = Trainer(config, tmp_path / "run").train(progress=False)
    losses = json.loads((tmp_path / "run" / "losses.json").read_text())
    before = np.array(losses["stills"]["train"])[:, 1]
    assert before[-20:].mean() < 0.5 * before[:20].mean(), f"{before[:20].mean()} -> {before[-20:].mean()}"
    assert len(losses["stills_pose"]) == 40 and losses["wall_s"] > losses["stills"]["wall_s"]
    alone = TrainConfig(**{**config.__dict__, "stills": None, "still_steps": 0, "steps": 440})
    without = Trainer(alone, tmp_path / "alone").train(progress=False)
    positions = open_dataset_frames(demos)
    scale, mean = float(np.std(positions)), float(np.mean(positions))  # the reading is in std units
    for red, green in ((4, 22), (22, 4)):
        truth = (red + 2) / 32
        seen = read_square(checkpoint, (red, green)) * scale + mean
        fooled = read_square(without, (red, green)) * scale + mean
        assert abs(seen - truth) < 0.12, f"red at {truth:.2f} read at {seen:.2f} with stills"
        assert abs(fooled - truth) > abs(seen - truth) + 0.05, \
            f"red at {truth:.2f}: read at {seen:.2f} with stills, {fooled:.2f} without"

    # Killed after the stills and the first checkpoint: the resumed run does not redo the stills
    # and ends where the uninterrupted one did.
    killed_after(config, tmp_path / "killed", 20, monkeypatch)
    learned = []
    monkeypatch.setattr(Trainer, "_learn_from_stills", lambda *a: learned.append(a) or {})
    resumed = Trainer(config, tmp_path / "killed").train(progress=False)
    assert not learned and same(weights(resumed), weights(checkpoint))


def open_dataset_frames(root) -> np.ndarray:
    from r2s2r.data.lerobot_v3 import open_dataset
    dataset = open_dataset(root)
    return np.concatenate([dataset.episode(i, videos=False).frames["observation.environment_state"][:, 0]
                           for i in range(len(dataset.episodes))])


def test_stills_that_do_not_fit_are_refused_by_name(synthetic, tmp_path):
    base = dict(dataset=str(synthetic), policy="act", object_pose_loss=1.0, steps=1, image_size=(32, 24))
    with pytest.raises(TrainError, match="expected policy act with object_pose_loss above 0"):
        Trainer(TrainConfig(**{**base, "object_pose_loss": 0.0}, stills=str(synthetic)), tmp_path / "a")
    with pytest.raises(TrainError, match="still_steps 10 without stills"):
        Trainer(TrainConfig(**base, still_steps=10), tmp_path / "b")
    other = write_episodes(tmp_path / "other", 20, {
        "observation.state": Feature("float32", (len(NAMES),), NAMES),
        "action": Feature("float32", (len(NAMES),), NAMES),
        "observation.environment_state": Feature("float32", (2,), ["cup.x", "cup.y"]),
        "observation.images.scene": Feature("video", (24, 32, 3))}, "franka_fr3", [Episode("other", {
            "observation.state": np.zeros((2, len(NAMES)), np.float32),
            "action": np.zeros((2, len(NAMES)), np.float32),
            "observation.environment_state": np.zeros((2, 2), np.float32),
            "observation.images.scene": np.zeros((2, 24, 32, 3), np.uint8)})])
    with pytest.raises(TrainError, match=r"observation.environment_state is \['cup.x', 'cup.y'\]; expected"):
        Trainer(TrainConfig(**base, stills=str(other)), tmp_path / "c").train(progress=False)


def test_fine_tuning_starts_from_a_checkpoint_and_keeps_its_normalisation(synthetic, tmp_path):
    config = TrainConfig(dataset=str(synthetic), policy="mlp", steps=300, batch=16, checkpoint_every=300, seed=3,
                         model={"hidden": 32, "layers": 2})
    first = Trainer(config, tmp_path / "first").train(progress=False)
    tuned_config = TrainConfig(**{**config.__dict__, "steps": 10, "checkpoint_every": 10, "init": str(first)})
    tuned = Trainer(tuned_config, tmp_path / "tuned").train(progress=False)
    Trainer(TrainConfig(**{**config.__dict__, "steps": 10, "checkpoint_every": 10}),
            tmp_path / "scratch").train(progress=False)
    first_loss = {name: json.loads((tmp_path / name / "losses.json").read_text())["train"][0][1]
                  for name in ("first", "tuned", "scratch")}
    # It goes on from what the checkpoint learnt: its first step's loss is the trained model's, not a new one's.
    assert first_loss["tuned"] < 0.6 * first_loss["scratch"]
    stored = {name: torch.load(path / "model.pt", weights_only=True)
              for name, path in (("first", first), ("tuned", tuned))}
    assert stored["tuned"]["normalization"] == stored["first"]["normalization"]
    assert stored["tuned"]["model"]["kwargs"] == stored["first"]["model"]["kwargs"]
    # A checkpoint of another shape is refused by name, and so is a folder that is not a checkpoint.
    with pytest.raises(TrainError, match="chunk_length 10 here 5"):
        Trainer(TrainConfig(**{**tuned_config.__dict__, "chunk_length": 5}), tmp_path / "other").train(progress=False)
    with pytest.raises(TrainError, match="no model.pt"):
        TrainConfig(**{**tuned_config.__dict__, "init": str(tmp_path)}).check()
