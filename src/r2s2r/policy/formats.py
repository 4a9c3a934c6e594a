"""Local model formats: saving a torch module with its metadata and statistics, and loading it.

  torch:PATH        torch.save of {model class and kwargs, state dict, metadata, statistics};
                    loaded with weights_only=True (no pickle), the class imported by name
  torchscript:PATH  torch.jit.trace, metadata and statistics in the archive's extra file
  export:PATH       torch.export program (.pt2), the same extra file
  onnx:PATH         ONNX through onnxruntime (optional extra), metadata in metadata_props

Every format carries the same JSON (`r2s2r.json`): {"policy": metadata, "normalization": ...}.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np

from r2s2r.policy.normalize import Normalizer
from r2s2r.policy.tensor import TensorPolicy, example_inputs, input_names
from r2s2r.policy.types import PolicyError, PolicyMetadata

CHECKPOINT_FORMAT = "r2s2r.policy/1"
EXTRA_FILE = "r2s2r.json"


def _bundle(metadata: PolicyMetadata, normalizer: Normalizer | None) -> str:
    return json.dumps({"policy": metadata.to_dict(), "normalization": (normalizer or Normalizer()).to_dict()})


def _unbundle(text: str | bytes, source: str) -> tuple[PolicyMetadata, Normalizer]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict) or "policy" not in data:
        raise PolicyError(f"{source}: has no r2s2r metadata ({EXTRA_FILE}); expected a file written by "
                          "r2s2r.policy.formats (save_torchscript / save_exported / save_onnx)")
    return (PolicyMetadata.from_dict(data["policy"], f"{source}: policy"),
            Normalizer.from_dict(data.get("normalization"), source))


def torch_runner(fn):
    import torch

    def run(inputs):
        with torch.inference_mode():
            return fn(*[torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]).numpy()
    return run


def _example_tensors(metadata: PolicyMetadata):
    """Inputs of two rows: a batch of 1 would let tracing and export fix the batch dimension."""
    import torch
    return tuple(torch.from_numpy(np.repeat(a, 2, axis=0)) for a in example_inputs(metadata))


def _existing(path, what: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise PolicyError(f"{what} {path} does not exist; expected a file")
    return path


# -- torch: state dict plus config ------------------------------------------------------------------
def save_checkpoint(path, module, metadata: PolicyMetadata, normalizer: Normalizer | None = None,
                    model_kwargs: dict | None = None) -> Path:
    """`model_kwargs` rebuild the module: `type(module)(**model_kwargs)` must give the same architecture."""
    import torch
    cls = type(module)
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "model": {"class": f"{cls.__module__}:{cls.__qualname__}", "kwargs": dict(model_kwargs or {})},
        "state_dict": module.state_dict(),
        "policy": metadata.to_dict(),
        "normalization": (normalizer or Normalizer()).to_dict(),
    }
    torch.save(checkpoint, path)
    return Path(path)


def _import_class(spec: str, source: str):
    module_name, _, name = spec.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise PolicyError(f"{source}: model class {spec!r} cannot be imported ({exc}); expected 'module:Class' "
                          "importable where the policy runs") from None
    return obj


def load_checkpoint(path) -> TensorPolicy:
    import torch
    path = _existing(path, "torch checkpoint")
    source = f"torch:{path}"
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a file that is not a checkpoint
        raise PolicyError(f"{source}: cannot be read as a torch checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise PolicyError(f"{source}: is not an r2s2r policy checkpoint; expected a dict with format "
                          f"{CHECKPOINT_FORMAT!r} (written by r2s2r.policy.formats.save_checkpoint)")
    cls = _import_class(data["model"]["class"], source)
    module = cls(**data["model"]["kwargs"])
    try:
        module.load_state_dict(data["state_dict"])
    except RuntimeError as exc:
        raise PolicyError(f"{source}: the state dict does not fit {data['model']['class']}: {exc}") from None
    module.eval()
    metadata = PolicyMetadata.from_dict(data["policy"], f"{source}: policy")
    return TensorPolicy(metadata, Normalizer.from_dict(data["normalization"], source), torch_runner(module), source)


# -- TorchScript ----------------------------------------------------------------------------------
def save_torchscript(path, module, metadata: PolicyMetadata, normalizer: Normalizer | None = None) -> Path:
    import torch
    with torch.no_grad():
        traced = torch.jit.trace(module.eval(), _example_tensors(metadata))
    torch.jit.save(traced, str(path), _extra_files={EXTRA_FILE: _bundle(metadata, normalizer)})
    return Path(path)


def load_torchscript(path) -> TensorPolicy:
    import torch
    path = _existing(path, "TorchScript file")
    source = f"torchscript:{path}"
    extra = {EXTRA_FILE: ""}
    try:
        module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
    except Exception as exc:
        raise PolicyError(f"{source}: cannot be read as TorchScript ({type(exc).__name__}: {exc})") from None
    metadata, normalizer = _unbundle(extra[EXTRA_FILE], source)
    return TensorPolicy(metadata, normalizer, torch_runner(module.eval()), source)


# -- torch.export ----------------------------------------------------------------------------------
def save_exported(path, module, metadata: PolicyMetadata, normalizer: Normalizer | None = None) -> Path:
    import torch
    examples = _example_tensors(metadata)
    batch = torch.export.Dim("batch", min=1, max=4096)  # a free batch dimension (TensorPolicy.act_batch)
    shapes = torch.export.ShapesCollection()  # by tensor: whatever the module's signature (*images too)
    for tensor in examples:
        shapes[tensor] = {0: batch}
    program = torch.export.export(module.eval(), examples, dynamic_shapes=shapes)
    torch.export.save(program, str(path), extra_files={EXTRA_FILE: _bundle(metadata, normalizer)})
    return Path(path)


def load_exported(path) -> TensorPolicy:
    import torch
    path = _existing(path, "torch.export program")
    source = f"export:{path}"
    extra = {EXTRA_FILE: ""}
    try:
        program = torch.export.load(str(path), extra_files=extra)
    except Exception as exc:
        raise PolicyError(f"{source}: cannot be read as a torch.export program ({type(exc).__name__}: {exc})") from None
    metadata, normalizer = _unbundle(extra[EXTRA_FILE], source)
    return TensorPolicy(metadata, normalizer, torch_runner(program.module()), source)


# -- ONNX ------------------------------------------------------------------------------------------
def save_onnx(path, module, metadata: PolicyMetadata, normalizer: Normalizer | None = None) -> Path:
    """Needs the `onnx` package. Uses torch's TorchScript-based exporter (fast, no onnxscript)."""
    import torch
    try:
        import onnx
    except ImportError:
        raise PolicyError("saving ONNX needs the `onnx` package (pip install onnx)") from None
    with torch.no_grad():
        names = input_names(metadata)
        torch.onnx.export(module.eval(), _example_tensors(metadata), str(path), input_names=names,
                          output_names=["actions"], dynamo=False,
                          dynamic_axes={name: {0: "batch"} for name in [*names, "actions"]})
    model = onnx.load(str(path))
    entry = model.metadata_props.add()
    entry.key, entry.value = EXTRA_FILE, _bundle(metadata, normalizer)
    onnx.save(model, str(path))
    return Path(path)


def load_onnx(path) -> TensorPolicy:
    path = _existing(path, "ONNX file")
    source = f"onnx:{path}"
    try:
        import onnxruntime
    except ImportError:
        raise PolicyError(f"{source}: needs the `onnxruntime` package (the r2s2r[onnx] extra: "
                          "pip install onnxruntime)") from None
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise PolicyError(f"{source}: cannot be read as an ONNX model ({type(exc).__name__}: {exc})") from None
    metadata, normalizer = _unbundle(session.get_modelmeta().custom_metadata_map.get(EXTRA_FILE, ""), source)
    names = [i.name for i in session.get_inputs()]
    expected = input_names(metadata)
    if names != expected:
        raise PolicyError(f"{source}: model inputs are {names}; expected {expected} (state, then one image per camera)")

    def run(inputs):
        return session.run(None, dict(zip(names, inputs)))[0]
    return TensorPolicy(metadata, normalizer, run, source)
