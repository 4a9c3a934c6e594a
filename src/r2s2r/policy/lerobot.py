"""LeRobot pretrained-model folders (`lerobot:DIR`): ACT and Diffusion Policy.

A folder holds `config.json` (the policy type, its input and output features, the
normalisation mode per feature type, chunk sizes) and `model.safetensors`. Normalisation
statistics are in one of two places, both read here without LeRobot:
  - lerobot >= 0.4: `policy_preprocessor.json`, whose `normalizer_processor` step names a
    safetensors file with keys `<feature>.<stat>`;
  - older folders: buffers inside model.safetensors, `normalize_inputs.buffer_<feature>.<stat>`
    (and `unnormalize_outputs.` / `normalize_targets.`), the feature's dots written as `_`.
r2s2r applies the statistics itself; the network comes from the `lerobot` package (an
optional extra, imported only when the policy is built), with its own normalisation off, as
lerobot >= 0.4 builds it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from r2s2r.config import Section
from r2s2r.policy.normalize import FeatureStats, Normalizer
from r2s2r.policy.tensor import TensorPolicy
from r2s2r.policy.types import ObservationSpace, PolicyError, PolicyMetadata

SUPPORTED = ("act", "diffusion")
STATE, ACTION, IMAGE_PREFIX = "observation.state", "action", "observation.images."
PREPROCESSOR = "policy_preprocessor.json"
LEGACY_PREFIXES = ("normalize_inputs.buffer_", "unnormalize_outputs.buffer_", "normalize_targets.buffer_")
MIN_LEROBOT = (0, 4)  # normalisation moved out of the network in 0.4


@dataclass(frozen=True)
class LeRobotFolder:
    path: Path
    policy_type: str
    config: dict
    state_size: int
    action_size: int
    images: dict[str, tuple[int, int]]  # LeRobot image feature -> (height, width)
    chunk_length: int
    stats: dict[str, FeatureStats]  # by LeRobot feature name
    stats_source: str  # the file the statistics came from


def _feature_shape(features: dict, name: str, where: str) -> list[int]:
    entry = features.get(name)
    if not isinstance(entry, dict) or not isinstance(entry.get("shape"), list):
        raise PolicyError(f"{where}: has no feature {name!r} with a shape; features: {', '.join(features)}")
    return entry["shape"]


def _legacy_stats(model_file: Path) -> dict[str, dict[str, np.ndarray]]:
    from safetensors import safe_open
    found: dict[str, dict[str, np.ndarray]] = {}
    with safe_open(str(model_file), framework="np") as f:
        for key in f.keys():
            prefix = next((p for p in LEGACY_PREFIXES if key.startswith(p)), None)
            if prefix is None:
                continue
            buffer, _, stat = key[len(prefix):].rpartition(".")
            found.setdefault(buffer, {})[stat] = f.get_tensor(key)
    return found


def _processor_stats(folder: Path) -> tuple[dict[str, dict[str, np.ndarray]], str] | None:
    from safetensors.numpy import load_file
    pipeline_file = folder / PREPROCESSOR
    if not pipeline_file.is_file():
        return None
    try:
        steps = json.loads(pipeline_file.read_text())["steps"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise PolicyError(f"{pipeline_file}: not a LeRobot processor pipeline ({exc}); expected JSON with `steps`") from None
    for step in steps:
        if step.get("registry_name") == "normalizer_processor" and step.get("state_file"):
            stats: dict[str, dict[str, np.ndarray]] = {}
            for flat, value in load_file(str(folder / step["state_file"])).items():
                feature, _, stat = flat.rpartition(".")
                stats.setdefault(feature, {})[stat] = value
            return stats, str(folder / step["state_file"])
    return None


def read_folder(path) -> LeRobotFolder:
    """Everything r2s2r needs from a LeRobot folder except the network; needs no LeRobot."""
    folder = Path(path)
    config_file, model_file = folder / "config.json", folder / "model.safetensors"
    missing = [p.name for p in (config_file, model_file) if not p.is_file()]
    if missing:
        raise PolicyError(f"lerobot:{folder}: lacks {', '.join(missing)}; expected a LeRobot pretrained-model folder "
                          "(config.json and model.safetensors)")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise PolicyError(f"{config_file}: not valid JSON ({exc})") from None
    policy_type = config.get("type")
    if policy_type not in SUPPORTED:
        raise PolicyError(f"{config_file}: policy type {policy_type!r} is not supported; expected one of "
                          f"{', '.join(SUPPORTED)}")
    inputs, outputs = config.get("input_features") or {}, config.get("output_features") or {}
    state_size = int(np.prod(_feature_shape(inputs, STATE, str(config_file))))
    action_size = int(np.prod(_feature_shape(outputs, ACTION, str(config_file))))
    images = {}
    for name, entry in inputs.items():
        if entry.get("type") == "VISUAL":
            shape = entry["shape"]
            if len(shape) != 3 or shape[0] != 3:
                raise PolicyError(f"{config_file}: image feature {name} has shape {shape}; expected [3, height, width]")
            images[name] = (int(shape[1]), int(shape[2]))
    if policy_type == "act":
        chunk = int(config.get("chunk_size", 100))
    else:  # diffusion keeps n_action_steps of its horizon, from the current step on
        chunk = int(config.get("n_action_steps", 8))

    found = _processor_stats(folder)
    if found is None:
        raw, source = _legacy_stats(model_file), str(model_file)
        # Legacy buffers spell the feature's dots as underscores: match them against the features.
        by_buffer = {name.replace(".", "_"): name for name in (*inputs, *outputs)}
        raw = {by_buffer.get(buffer, buffer): stats for buffer, stats in raw.items()}
    else:
        raw, source = found
    modes = {str(k).upper(): str(v).lower() for k, v in (config.get("normalization_mapping") or {}).items()}
    features = {**inputs, **outputs}
    stats = {}
    for name, values in raw.items():
        if name not in features:
            continue
        mode = modes.get(str(features[name].get("type", "")).upper(), "identity")
        if mode != "identity":
            try:
                stats[name] = FeatureStats(mode, {k: np.asarray(v, np.float64) for k, v in values.items()})
            except PolicyError as exc:
                raise PolicyError(f"{source}: feature {name}: {exc}") from None
    unnormalised = [n for n in features if n not in stats and
                    modes.get(str(features[n].get("type", "")).upper(), "identity") != "identity"]
    if unnormalised:
        raise PolicyError(f"lerobot:{folder}: no normalisation statistics for {', '.join(unnormalised)} in {source}; "
                          "expected them in policy_preprocessor's normalizer state or the model's buffers")
    return LeRobotFolder(folder, policy_type, config, state_size, action_size, images, chunk, stats, source)


def folder_metadata(folder: LeRobotFolder, base: PolicyMetadata, cameras: dict[str, str]) -> PolicyMetadata:
    """The folder's features laid onto the robot layout in `base` (sizes must agree)."""
    if base.observation.size != folder.state_size or base.action.size != folder.action_size:
        raise PolicyError(f"lerobot:{folder.path}: state has {folder.state_size} values and actions "
                          f"{folder.action_size}; the robot layout gives {base.observation.size} "
                          f"({base.observation.describe()}) and {base.action.size} ({base.action.describe()}); "
                          "set metadata.observation / metadata.action in the policy config")
    sizes = {cameras.get(name, name.removeprefix(IMAGE_PREFIX)): size for name, size in folder.images.items()}
    observation = ObservationSpace(base.observation.joints, base.observation.grippers, sizes, False)
    return PolicyMetadata(observation, base.action, base.control_rate_hz, folder.chunk_length,
                          base.name or folder.policy_type)


def folder_normalizer(folder: LeRobotFolder, cameras: dict[str, str]) -> Normalizer:
    features = {}
    for name, stats in folder.stats.items():
        if name == STATE:
            features["state"] = stats
        elif name == ACTION:
            features["action"] = stats
        elif name in folder.images:
            features[f"image.{cameras.get(name, name.removeprefix(IMAGE_PREFIX))}"] = stats
    return Normalizer(features)


def _lerobot_network(folder: LeRobotFolder):
    try:
        import lerobot
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class
    except ImportError as exc:
        raise PolicyError(
            f"lerobot:{folder.path}: building the {folder.policy_type} network needs the `lerobot` package "
            f"(>= {'.'.join(map(str, MIN_LEROBOT))}), which is not installed ({exc}). r2s2r read the folder's "
            f"config and normalisation statistics ({folder.stats_source}) without it.") from None
    version = tuple(int(p) for p in lerobot.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_LEROBOT:
        raise PolicyError(f"lerobot {lerobot.__version__} normalises inside the network; r2s2r needs lerobot >= "
                          f"{'.'.join(map(str, MIN_LEROBOT))}")
    config = PreTrainedConfig.from_pretrained(str(folder.path))
    if hasattr(config, "pretrained_backbone_weights"):
        config.pretrained_backbone_weights = None  # the folder's weights replace them: nothing to download
    config.device = "cpu"
    network = get_policy_class(folder.policy_type).from_pretrained(str(folder.path), config=config)
    network.eval()
    return network


class LeRobotPolicy(TensorPolicy):
    """Normalises with the folder's statistics, runs the LeRobot network on one chunk."""

    may_batch = False  # its network keeps observation queues and histories between calls

    def __init__(self, folder: LeRobotFolder, metadata: PolicyMetadata, normalizer: Normalizer,
                 cameras: dict[str, str]):
        self.folder = folder
        self.network = _lerobot_network(folder)
        # LeRobot image feature for each of our cameras, in the metadata's camera order.
        ours = {cameras.get(name, name.removeprefix(IMAGE_PREFIX)): name for name in folder.images}
        self.image_features = [ours[c] for c in metadata.observation.cameras]
        super().__init__(metadata, normalizer, self._run, f"lerobot:{folder.path}")

    def reset(self) -> None:
        self.network.reset()

    def _run(self, inputs):
        import torch
        batch = {STATE: torch.from_numpy(inputs[0])}
        batch.update({name: torch.from_numpy(image) for name, image in zip(self.image_features, inputs[1:])})
        with torch.inference_mode():
            if self.folder.policy_type == "diffusion":
                # Diffusion predicts from its observation history; feed this step into it first.
                from lerobot.policies.utils import populate_queues
                if self.image_features:
                    batch["observation.images"] = torch.stack([batch[n] for n in self.image_features], dim=-4)
                self.network._queues = populate_queues(self.network._queues, batch)
            return self.network.predict_action_chunk(batch).numpy()


def load_lerobot(path, base: PolicyMetadata | None, params: Section) -> LeRobotPolicy:
    params.reject_unknown({"cameras"})
    folder = read_folder(path)
    if base is None:
        raise PolicyError(f"lerobot:{folder.path}: needs the robot's joint layout to name the state "
                          f"({folder.state_size} values) and the actions ({folder.action_size}); give `metadata` "
                          "in a policy config or run it for a robot")
    cameras = {str(k): str(v) for k, v in (params.raw("cameras", {}) or {}).items()}
    metadata = folder_metadata(folder, base, cameras)
    return LeRobotPolicy(folder, metadata, folder_normalizer(folder, cameras), cameras)
