"""Policies: one runtime for local models, remote policy servers and scripted baselines.

The same objects run in-process in the evaluation engine and behind `policy_node`:

    policy = load_policy("torch:ckpt.pt", defaults=PolicyMetadata.for_robot(robot))
    runtime = PolicyRuntime(policy, RuntimeConfig(ensemble_coefficient=0.01))
    command = runtime.step(now, observation)

Heavy dependencies (torch, onnxruntime, lerobot, msgpack) are imported by the loader that
needs them, so this package imports with numpy alone.
"""

from r2s2r.policy.loader import PolicyConfig, load_policy, read_policy_config
from r2s2r.policy.normalize import FeatureStats, Normalizer
from r2s2r.policy.observation import JointLayout, ObservationAssembler
from r2s2r.policy.runtime import Command, PolicyRuntime, RuntimeConfig, RuntimeStats
from r2s2r.policy.scripted import scripted_factory
from r2s2r.policy.types import (ActionChunk, ActionSpace, DeadlineMiss, Observation, ObservationSpace, Policy,
                                PolicyError, PolicyMetadata)

__all__ = ["ActionChunk", "ActionSpace", "Command", "DeadlineMiss", "FeatureStats", "JointLayout", "Normalizer",
           "Observation", "ObservationAssembler", "ObservationSpace", "Policy", "PolicyConfig", "PolicyError",
           "PolicyMetadata", "PolicyRuntime", "RuntimeConfig", "RuntimeStats", "load_policy",
           "read_policy_config", "scripted_factory"]
