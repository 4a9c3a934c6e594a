"""One small torch policy saved in every local format acts the same through every loader, with
its normalisation statistics applied inside; broken files are refused by name."""

import numpy as np
import pytest
import torch

from r2s2r.config import ConfigError
from r2s2r.policy import (ActionSpace, Normalizer, Observation, ObservationSpace, PolicyError, PolicyMetadata,
                          load_policy)
from r2s2r.policy import formats
from r2s2r.policy.models import ConvPolicy

META = PolicyMetadata(ObservationSpace({"arm": 7}, ("gripper",), {"wrist": (24, 32)}),
                      ActionSpace({"arm": 7}, ("gripper",)), 10.0, 5, "tiny")
KWARGS = {"state_size": 8, "action_size": 8, "chunk_length": 5, "cameras": 1}
RNG = np.random.default_rng(7)
STATE_MEAN, STATE_STD = RNG.normal(size=8), RNG.random(8) + 0.5
ACTION_MIN, ACTION_MAX = -RNG.random(8) - 0.1, RNG.random(8) + 0.1
IMAGE_MEAN, IMAGE_STD = np.array([0.4, 0.5, 0.6]).reshape(3, 1, 1), np.array([0.2, 0.25, 0.3]).reshape(3, 1, 1)
STATS = {"state": {"mode": "mean_std", "mean": STATE_MEAN.tolist(), "std": STATE_STD.tolist()},
         "action": {"mode": "min_max", "min": ACTION_MIN.tolist(), "max": ACTION_MAX.tolist()},
         "image.wrist": {"mode": "mean_std", "mean": IMAGE_MEAN.tolist(), "std": IMAGE_STD.tolist()}}
FORMATS = {"torch": ("pt", formats.save_checkpoint), "torchscript": ("ts", formats.save_torchscript),
           "export": ("pt2", formats.save_exported), "onnx": ("onnx", formats.save_onnx)}


def observation(seed):
    rng = np.random.default_rng(seed)
    return Observation(1.5 + seed, {"arm": rng.uniform(-1, 1, 7)}, {"gripper": float(rng.uniform(0, 0.08))},
                       {"wrist": rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)})


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = ConvPolicy(**KWARGS).eval()
    normalizer = Normalizer.from_dict(STATS)
    folder = tmp_path_factory.mktemp("policies")
    paths = {}
    for scheme, (ext, save) in FORMATS.items():
        path = folder / f"tiny.{ext}"
        if scheme == "torch":
            save(path, model, META, normalizer, KWARGS)
        else:
            save(path, model, META, normalizer)
        paths[scheme] = path
    return model, paths


def reference_actions(model, obs):
    """The model called directly, normalisation written out by hand (LeRobot's formulas)."""
    state = (np.array([*obs.joints["arm"], obs.grippers["gripper"]]) - STATE_MEAN) / (STATE_STD + 1e-8)
    image = obs.images["wrist"].astype(np.float32).transpose(2, 0, 1)[None] / 255.0
    image = (image - IMAGE_MEAN) / (IMAGE_STD + 1e-8)
    with torch.no_grad():
        out = model(torch.tensor(state[None], dtype=torch.float32), torch.tensor(image, dtype=torch.float32))
    return (out.numpy()[0].astype(np.float64) + 1) / 2 * (ACTION_MAX - ACTION_MIN) + ACTION_MIN


@pytest.mark.parametrize("scheme", list(FORMATS))
def test_every_format_gives_the_models_actions(saved, scheme):
    model, paths = saved
    policy = load_policy(f"{scheme}:{paths[scheme]}")
    assert policy.metadata == META
    for seed in range(3):
        obs = observation(seed)
        chunk = policy.act(obs)
        assert chunk.stamp == obs.stamp and chunk.dt == pytest.approx(0.1) and chunk.length == 5
        np.testing.assert_allclose(chunk.to_array(META.action), reference_actions(model, obs), rtol=0, atol=1e-5)


def test_formats_agree_with_each_other_and_carry_their_statistics(saved):
    _, paths = saved
    policies = {scheme: load_policy(f"{scheme}:{path}") for scheme, path in paths.items()}
    obs = observation(9)
    actions = {scheme: p.act(obs).to_array(META.action) for scheme, p in policies.items()}
    for scheme, values in actions.items():
        assert np.max(np.abs(values - actions["torch"])) < 1e-5, scheme
        stats = policies[scheme].normalizer.features
        assert set(stats) == {"state", "action", "image.wrist"}
        np.testing.assert_array_equal(stats["action"].stats["max"], ACTION_MAX)


def test_images_of_another_size_are_resized_to_the_models(saved):
    _, paths = saved
    policy = load_policy(f"torch:{paths['torch']}")
    obs = observation(0)
    big = Observation(obs.stamp, obs.joints, obs.grippers, {"wrist": np.repeat(np.repeat(obs.images["wrist"], 2, 0), 2, 1)})
    assert np.max(np.abs(policy.act(big).to_array(META.action) - policy.act(obs).to_array(META.action))) < 1e-5


def test_config_file_paths_are_relative_to_the_file(saved, tmp_path):
    _, paths = saved
    config = paths["onnx"].parent / "tiny.yaml"
    config.write_text("uri: onnx:tiny.onnx\n")
    assert load_policy(str(config)).metadata == META
    config.write_text("uri: onnx:tiny.onnx\nparams: {speed: 1}\n")
    with pytest.raises(ConfigError, match="no params: a onnx file carries everything it needs"):
        load_policy(str(config))


def test_bad_files_are_refused_by_name(saved, tmp_path):
    _, paths = saved
    with pytest.raises(PolicyError, match="torch checkpoint .*missing.pt does not exist"):
        load_policy(f"torch:{tmp_path / 'missing.pt'}")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a model")
    for scheme in FORMATS:
        with pytest.raises(PolicyError, match=f"{scheme}:.*junk.bin: cannot be read as"):
            load_policy(f"{scheme}:{junk}")
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(3)}, plain)
    with pytest.raises(PolicyError, match="is not an r2s2r policy checkpoint"):
        load_policy(f"torch:{plain}")
    # A TorchScript file without r2s2r's metadata cannot say what it observes.
    bare = tmp_path / "bare.ts"
    torch.jit.save(torch.jit.trace(torch.nn.Linear(8, 8), torch.zeros(1, 8)), str(bare))
    with pytest.raises(PolicyError, match="has no r2s2r metadata"):
        load_policy(f"torchscript:{bare}")


def test_an_observation_without_the_camera_is_an_error(saved):
    _, paths = saved
    policy = load_policy(f"export:{paths['export']}")
    obs = observation(0)
    with pytest.raises(PolicyError, match="no image from camera 'wrist'"):
        policy.act(Observation(obs.stamp, obs.joints, obs.grippers))


def test_metadata_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"x.yaml: observation.cameras.wrist: expected a list of 2 finite numbers"):
        PolicyMetadata.from_dict({"observation": {"joints": {"arm": 7}, "cameras": {"wrist": [96]}},
                                  "control_rate_hz": 10, "chunk_length": 5}, "x.yaml")
    with pytest.raises(ConfigError, match="observation.joints: expected a mapping of joint group names to joint counts"):
        PolicyMetadata.from_dict({"observation": {"joints": {"arm": 0}}, "control_rate_hz": 10,
                                  "chunk_length": 5}, "x.yaml")
    with pytest.raises(ConfigError, match="chunk_length: expected an integer >= 1"):
        PolicyMetadata.from_dict({"observation": {"joints": {"arm": 7}}, "control_rate_hz": 10, "chunk_length": 0})
