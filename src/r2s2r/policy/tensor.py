"""A policy around a tensor model, whatever runs it (torch, TorchScript, torch.export, ONNX).

The model contract, the same in every format:
  inputs   `state`: (1, S) float32, normalised; then one image per camera in the metadata's
           camera order: (1, 3, H, W) float32 in [0, 1], normalised where statistics exist
  output   (1, T, A) or (T, A) float32: T actions in the normalised action space
S and A are the flat sizes of the observation and action spaces (groups, then grippers).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from r2s2r.policy.normalize import Normalizer
from r2s2r.policy.types import ActionChunk, Observation, PolicyError, PolicyMetadata

# Runs the model on the input arrays, in contract order; returns the raw output array.
Runner = Callable[[Sequence[np.ndarray]], np.ndarray]


def check_tensor_metadata(metadata: PolicyMetadata, source: str) -> None:
    unsized = [c for c, size in metadata.observation.cameras.items() if size is None]
    if unsized:
        raise PolicyError(f"{source}: cameras {unsized} have no [height, width]; a tensor model needs the image "
                          "size it was trained on")
    if metadata.observation.task:
        raise PolicyError(f"{source}: tensor models take no task text; set observation.task to false")


def example_inputs(metadata: PolicyMetadata) -> list[np.ndarray]:
    """Zero inputs of the right shapes: what tracing and export need."""
    inputs = [np.zeros((1, metadata.observation.size), np.float32)]
    for height, width in metadata.observation.cameras.values():
        inputs.append(np.zeros((1, 3, height, width), np.float32))
    return inputs


def input_names(metadata: PolicyMetadata) -> list[str]:
    return ["state"] + [f"image_{camera}" for camera in metadata.observation.cameras]


def _image_tensor(camera: str, image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3:
        raise PolicyError(f"image from camera {camera!r} has shape {image.shape}; expected (height, width, 3) RGB")
    if image.shape[:2] != size:
        import cv2  # only when the camera's size differs from the model's
        image = cv2.resize(image, (size[1], size[0]), interpolation=cv2.INTER_AREA)
    scale = 1.0 / 255.0 if image.dtype == np.uint8 else 1.0
    return (image.astype(np.float32) * scale).transpose(2, 0, 1)[None]


class TensorPolicy:
    def __init__(self, metadata: PolicyMetadata, normalizer: Normalizer, runner: Runner, source: str):
        check_tensor_metadata(metadata, source)
        normalizer.check_size("state", metadata.observation.size)
        normalizer.check_size("action", metadata.action.size)
        self.metadata = metadata
        self.normalizer = normalizer
        self.runner = runner
        self.source = source

    def reset(self) -> None:
        """Tensor models in this contract keep no state between calls."""

    def inputs(self, observation: Observation) -> list[np.ndarray]:
        """The model's inputs for one observation (normalised, batched)."""
        state = self.normalizer.normalize("state", observation.state(self.metadata.observation))
        arrays = [np.asarray(state, np.float32)[None]]
        for camera, size in self.metadata.observation.cameras.items():
            if camera not in observation.images:
                raise PolicyError(f"observation has no image from camera {camera!r}; the policy needs "
                                  f"{', '.join(self.metadata.observation.cameras)}")
            image = _image_tensor(camera, observation.images[camera], size)
            arrays.append(self.normalizer.normalize(f"image.{camera}", image))
        return arrays

    def act(self, observation: Observation) -> ActionChunk:
        output = np.asarray(self.runner(self.inputs(observation)), dtype=np.float64)
        if output.ndim == 3 and output.shape[0] == 1:
            output = output[0]
        if output.ndim != 2 or output.shape[1] != self.metadata.action.size:
            raise PolicyError(f"{self.source}: model output has shape {output.shape}; expected (1, T, "
                              f"{self.metadata.action.size}) for the action space {self.metadata.action.describe()}")
        actions = self.normalizer.unnormalize("action", output)
        return ActionChunk.from_array(self.metadata.action, actions, observation.stamp, self.metadata.dt)
