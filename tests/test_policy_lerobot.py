"""LeRobot pretrained-model folders: the config, chunk length, cameras and normalisation
statistics are read without LeRobot (both the lerobot >= 0.4 processor layout and the older
buffers inside model.safetensors); building the network without the package says so."""

import json
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file

from r2s2r.policy import PolicyError, PolicyMetadata, load_policy
from r2s2r.policy.lerobot import folder_metadata, folder_normalizer, read_folder
from r2s2r.robots import get_robot

FR3 = PolicyMetadata.for_robot(get_robot("franka_fr3"), control_rate_hz=30.0)
RNG = np.random.default_rng(3)
MEAN, STD = RNG.normal(size=8).astype(np.float32), (RNG.random(8) + 0.5).astype(np.float32)
LOW, HIGH = (-RNG.random(8) - 0.1).astype(np.float32), (RNG.random(8) + 0.1).astype(np.float32)
IMAGE_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
IMAGE_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def config(policy_type, state_mode, action_mode, **extra):
    return {"type": policy_type, "n_obs_steps": 1,
            "input_features": {"observation.state": {"type": "STATE", "shape": [8]},
                               "observation.images.front": {"type": "VISUAL", "shape": [3, 48, 64]}},
            "output_features": {"action": {"type": "ACTION", "shape": [8]}},
            "normalization_mapping": {"VISUAL": "MEAN_STD", "STATE": state_mode, "ACTION": action_mode}, **extra}


@pytest.fixture
def act_folder(tmp_path):
    """lerobot >= 0.4: statistics in the preprocessor pipeline's normalizer state."""
    folder = tmp_path / "act"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config("act", "MEAN_STD", "MEAN_STD", chunk_size=20,
                                                          n_action_steps=20)))
    save_file({"model.action_head.weight": np.zeros((8, 4), np.float32)}, str(folder / "model.safetensors"))
    state_file = "policy_preprocessor_step_3_normalizer_processor.safetensors"
    (folder / "policy_preprocessor.json").write_text(json.dumps({"name": "policy_preprocessor", "steps": [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
        {"registry_name": "to_batch_processor", "config": {}},
        {"registry_name": "device_processor", "config": {"device": "cpu"}},
        {"registry_name": "normalizer_processor", "config": {"eps": 1e-8}, "state_file": state_file}]}))
    save_file({"observation.state.mean": MEAN, "observation.state.std": STD, "action.mean": MEAN,
               "action.std": STD, "observation.images.front.mean": IMAGE_MEAN,
               "observation.images.front.std": IMAGE_STD}, str(folder / state_file))
    return folder


@pytest.fixture
def diffusion_folder(tmp_path):
    """Older folders: statistics as normalisation buffers inside model.safetensors."""
    folder = tmp_path / "diffusion"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config("diffusion", "MIN_MAX", "MIN_MAX", horizon=16,
                                                          n_action_steps=8, n_obs_steps=2)))
    save_file({"diffusion.unet.weight": np.zeros((4, 4), np.float32),
               "normalize_inputs.buffer_observation_state.min": LOW,
               "normalize_inputs.buffer_observation_state.max": HIGH,
               "normalize_inputs.buffer_observation_images_front.mean": IMAGE_MEAN,
               "normalize_inputs.buffer_observation_images_front.std": IMAGE_STD,
               "normalize_targets.buffer_action.min": LOW, "normalize_targets.buffer_action.max": HIGH,
               "unnormalize_outputs.buffer_action.min": LOW, "unnormalize_outputs.buffer_action.max": HIGH},
              str(folder / "model.safetensors"))
    return folder


def test_act_folder_with_processor_statistics(act_folder):
    folder = read_folder(act_folder)
    assert folder.policy_type == "act" and folder.chunk_length == 20
    assert folder.state_size == folder.action_size == 8
    assert folder.images == {"observation.images.front": (48, 64)}
    assert folder.stats_source.endswith("normalizer_processor.safetensors")
    normalizer = folder_normalizer(folder, {"observation.images.front": "scene"})
    x = RNG.normal(size=8)
    np.testing.assert_allclose(normalizer.normalize("state", x), (x - MEAN) / (STD + 1e-8), rtol=1e-6)
    np.testing.assert_allclose(normalizer.unnormalize("action", x), x * STD + MEAN, rtol=1e-6)
    np.testing.assert_allclose(normalizer.features["image.scene"].stats["std"], IMAGE_STD)
    metadata = folder_metadata(folder, FR3, {"observation.images.front": "scene"})
    assert metadata.observation.cameras == {"scene": (48, 64)}
    assert metadata.chunk_length == 20 and metadata.control_rate_hz == 30.0
    assert metadata.action == FR3.action


def test_diffusion_folder_with_statistics_in_the_model_buffers(diffusion_folder):
    folder = read_folder(diffusion_folder)
    assert folder.policy_type == "diffusion" and folder.chunk_length == 8  # n_action_steps of the horizon
    assert folder.stats_source.endswith("model.safetensors")
    assert set(folder.stats) == {"observation.state", "observation.images.front", "action"}
    normalizer = folder_normalizer(folder, {})
    assert set(normalizer.features) == {"state", "action", "image.front"}
    np.testing.assert_allclose(normalizer.normalize("state", LOW), -np.ones(8), atol=1e-6)
    np.testing.assert_allclose(normalizer.unnormalize("action", np.ones(8)), HIGH, rtol=1e-6)


@pytest.mark.parametrize("fixture", ["act_folder", "diffusion_folder"])
def test_building_the_network_without_lerobot_names_the_package(request, fixture, monkeypatch):
    path = request.getfixturevalue(fixture)
    monkeypatch.setitem(sys.modules, "lerobot", None)  # as on a machine without it, whatever this one has
    with pytest.raises(PolicyError, match=r"needs the `lerobot` package \(>= 0.4\), which is not installed") as info:
        load_policy(f"lerobot:{path}", FR3, {"cameras": {"observation.images.front": "scene"}})
    assert "read the folder's config and normalisation statistics" in str(info.value)


def test_broken_folders_say_what_is_missing(act_folder, tmp_path):
    with pytest.raises(PolicyError, match="lacks config.json, model.safetensors; expected a LeRobot pretrained"):
        read_folder(tmp_path / "empty")
    cfg = json.loads((act_folder / "config.json").read_text())
    (act_folder / "config.json").write_text(json.dumps({**cfg, "type": "pi0"}))
    with pytest.raises(PolicyError, match="policy type 'pi0' is not supported; expected one of act, diffusion"):
        read_folder(act_folder)
    (act_folder / "config.json").write_text(json.dumps({**cfg, "normalization_mapping": {
        **cfg["normalization_mapping"], "ENV": "MEAN_STD"}, "input_features": {
        **cfg["input_features"], "observation.environment_state": {"type": "ENV", "shape": [3]}}}))
    with pytest.raises(PolicyError, match="no normalisation statistics for observation.environment_state"):
        read_folder(act_folder)


def test_a_folder_for_another_robot_is_refused(act_folder):
    cfg = json.loads((act_folder / "config.json").read_text())
    cfg["input_features"]["observation.state"]["shape"] = [14]
    (act_folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PolicyError, match=r"state has 14 values and actions 8; the robot layout gives 8 "
                                          r"\(arm \(7\) \+ gripper \(1\)\)"):
        folder_metadata(read_folder(act_folder), FR3, {})


class FakeLeRobot:
    """The slice of lerobot 0.4's API the adapter calls (PreTrainedConfig.from_pretrained,
    get_policy_class(type).from_pretrained, reset, predict_action_chunk, populate_queues),
    standing in for the package that cannot be installed beside torch 2.13 (see docs/policies.md).
    The network answers target t = normalised state * (t + 1)."""

    def __init__(self, monkeypatch, chunk):
        import types
        from collections import deque

        import torch
        fake = self
        self.batches, self.configs = [], []

        class Config:
            pretrained_backbone_weights = "ResNet18_Weights.IMAGENET1K_V1"
            device = "cuda"

            @classmethod
            def from_pretrained(cls, path):
                return cls()

        class Network:
            @classmethod
            def from_pretrained(cls, path, config):
                fake.configs.append(config)
                fake.network = cls()
                return fake.network

            def __init__(self):
                self.resets = 0
                self.reset()

            def eval(self):
                return self

            def reset(self):
                self.resets += 1
                self._queues = {"observation.state": deque(maxlen=2), "observation.images": deque(maxlen=2)}

            def predict_action_chunk(self, batch):
                fake.batches.append({k: v.clone() for k, v in batch.items()})
                return batch["observation.state"][:, None, :] * torch.arange(1, chunk + 1)[None, :, None]

        def populate_queues(queues, batch):
            for key, queue in queues.items():
                if key in batch:
                    queue.append(batch[key])
            return queues

        modules = {"lerobot": types.SimpleNamespace(__version__="0.4.4"),
                   "lerobot.configs": types.ModuleType("lerobot.configs"),
                   "lerobot.configs.policies": types.SimpleNamespace(PreTrainedConfig=Config),
                   "lerobot.policies": types.ModuleType("lerobot.policies"),
                   "lerobot.policies.factory": types.SimpleNamespace(get_policy_class=lambda name: Network),
                   "lerobot.policies.utils": types.SimpleNamespace(populate_queues=populate_queues)}
        for name, module in modules.items():
            monkeypatch.setitem(sys.modules, name, module)


def lerobot_observation():
    from r2s2r.policy import Observation
    rng = np.random.default_rng(5)
    image = np.full((48, 64, 3), 128, np.uint8)
    return Observation(4.0, {"arm": rng.uniform(-1, 1, 7)}, {"gripper": 0.03}, {"scene": image})


def test_act_network_gets_normalised_inputs_and_its_chunk_is_unnormalised(act_folder, monkeypatch):
    fake = FakeLeRobot(monkeypatch, chunk=20)
    policy = load_policy(f"lerobot:{act_folder}", FR3, {"cameras": {"observation.images.front": "scene"}})
    assert fake.configs[0].pretrained_backbone_weights is None and fake.configs[0].device == "cpu"
    obs = lerobot_observation()
    chunk = policy.act(obs)
    state = np.array([*obs.joints["arm"], 0.03])
    normalised = (state - MEAN) / (STD + 1e-8)
    sent = fake.batches[0]
    np.testing.assert_allclose(sent["observation.state"].numpy()[0], normalised, rtol=1e-5)
    image = sent["observation.images.front"].numpy()
    assert image.shape == (1, 3, 48, 64)
    np.testing.assert_allclose(image[0, :, 0, 0], (128 / 255 - IMAGE_MEAN.ravel()) / (IMAGE_STD.ravel() + 1e-8),
                               rtol=1e-5)
    expected = normalised[None, :] * np.arange(1, 21)[:, None] * STD + MEAN
    assert chunk.length == 20 and chunk.stamp == 4.0 and chunk.dt == pytest.approx(1 / 30)
    np.testing.assert_allclose(chunk.to_array(FR3.action), expected, rtol=1e-5, atol=1e-5)
    policy.reset()
    assert fake.network.resets == 2


def test_diffusion_network_is_fed_its_observation_history(diffusion_folder, monkeypatch):
    fake = FakeLeRobot(monkeypatch, chunk=8)
    policy = load_policy(f"lerobot:{diffusion_folder}", FR3, {"cameras": {"observation.images.front": "scene"}})
    policy.act(lerobot_observation())
    policy.act(lerobot_observation())
    queues = fake.network._queues
    assert len(queues["observation.state"]) == 2
    assert tuple(queues["observation.images"][0].shape) == (1, 1, 3, 48, 64)  # cameras stacked, as lerobot does


def test_a_lerobot_network_is_never_probed_nor_batched(act_folder, monkeypatch):
    """Its network keeps state between calls: loading it runs nothing, and it takes no batch."""
    fake = FakeLeRobot(monkeypatch, chunk=20)
    policy = load_policy(f"lerobot:{act_folder}", FR3, {"cameras": {"observation.images.front": "scene"}})
    assert fake.batches == [] and not policy.accepts_batch
