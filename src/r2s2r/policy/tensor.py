"""A policy around a tensor model, whatever runs it (torch, TorchScript, torch.export, ONNX).

The model contract, the same in every format:
  inputs   `state`: (B, S) float32, normalised; then one image per camera in the metadata's
           camera order: (B, 3, H, W) float32 in [0, 1], normalised where statistics exist
  output   (B, T, A), or (T, A) when B is 1, float32: T actions in the normalised action space
S and A are the flat sizes of the observation and action spaces (groups, then grippers); B is 1
for `act`. A model whose batch dimension is free (every format r2s2r saves) also serves
`act_batch`, which runs many observations in one call; the loaders find out which by trying.

Batched rows are the rows one-at-a-time calls of `act_batch` give, bit for bit: CPU matrix
kernels take rows in blocks and compute a row in a partial block differently (docs/evaluation.md
has the measurement), so every call is padded to whole blocks of BATCH_ROWS rows; `act` alone,
for the live graph, runs the single row unpadded.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from r2s2r.policy.normalize import Normalizer
from r2s2r.policy.types import ActionChunk, Observation, PolicyError, PolicyMetadata

# Runs the model on the input arrays, in contract order; returns the raw output array.
Runner = Callable[[Sequence[np.ndarray]], np.ndarray]
BATCH_ROWS = 8  # act_batch pads every call to a multiple of this many rows (see above)


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
        self.accepts_batch = self.may_batch and self._runs_a_batch()

    # Whether to try the model on a batch at all: a network that keeps state between calls
    # (LeRobot's queues and histories) must neither batch nor see a probe's inputs.
    may_batch = True

    def _runs_a_batch(self) -> bool:
        """Whether the model takes BATCH_ROWS rows at once (a fixed batch of 1 does not)."""
        inputs = [np.repeat(a, BATCH_ROWS, axis=0) for a in example_inputs(self.metadata)]
        try:
            output = np.asarray(self.runner(inputs))
        except Exception:  # a fixed-shape export refuses the batch in its runtime's own way
            return False
        return output.ndim == 3 and output.shape[0] == BATCH_ROWS

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
        return self._chunk(output, observation)

    def act_batch(self, observations: Sequence[Observation]) -> list[ActionChunk]:
        """One chunk per observation from one model call (padded to whole blocks of BATCH_ROWS)."""
        if not self.accepts_batch:
            raise PolicyError(f"{self.source}: the model takes one observation at a time (its batch dimension "
                              "is fixed); save it with r2s2r.policy.formats to free it")
        rows = [self.inputs(o) for o in observations]
        padded = -(-len(rows) // BATCH_ROWS) * BATCH_ROWS
        rows += [rows[-1]] * (padded - len(rows))  # copies of a real row: the padding's values never matter
        output = np.asarray(self.runner([np.concatenate(arrays) for arrays in zip(*rows)]), dtype=np.float64)
        if output.ndim != 3 or output.shape[0] != padded or output.shape[2] != self.metadata.action.size:
            raise PolicyError(f"{self.source}: model output has shape {output.shape} for a batch of {padded}; "
                              f"expected ({padded}, T, {self.metadata.action.size}) for the action space "
                              f"{self.metadata.action.describe()}")
        return [self._chunk(output[i], o) for i, o in enumerate(observations)]

    def _chunk(self, output: np.ndarray, observation: Observation) -> ActionChunk:
        actions = self.normalizer.unnormalize("action", output)
        return ActionChunk.from_array(self.metadata.action, actions, observation.stamp, self.metadata.dt)
