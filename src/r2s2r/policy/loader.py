"""Choosing a policy by URI or by a policy config file.

URIs: torch:PATH, torchscript:PATH, export:PATH, onnx:PATH, lerobot:DIR,
openpi://HOST:PORT, scripted:NAME[?KEY=VALUE&...] (the query gives the scripted policy's params, e.g.
scripted:franka_block_in_bowl?skills=SKILLS.yaml). A path ending in .yaml / .yml is a policy config, and so is
a folder that holds a policy.yaml (a checkpoint of `r2s2r train`):

    uri: scripted:goto           # any of the URIs; a relative PATH is relative to this file
    params: {goal: {arm: [...]}} # what the loader of that URI takes
    metadata: {...}              # scripted, openpi, lerobot: the layout, rate and chunk length
    runtime: {...}               # PolicyRuntime settings (see policy.runtime.RuntimeConfig)

`defaults` is the metadata of the robot the policy runs on (PolicyMetadata.for_robot):
policies that do not carry their own layout (scripted, remote, LeRobot) start from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

import yaml

from r2s2r import paths
from r2s2r.config import ConfigError, Section, load_yaml
from r2s2r.policy.types import Policy, PolicyError, PolicyMetadata

FILE_SCHEMES = ("torch", "torchscript", "export", "onnx", "lerobot")
SCHEMES = FILE_SCHEMES + ("openpi", "scripted")


@dataclass(frozen=True)
class PolicyConfig:
    uri: str
    params: dict = field(default_factory=dict)
    metadata: dict | None = None
    runtime: dict = field(default_factory=dict)
    source: str = "<policy>"
    base_dir: Path | None = None  # where relative paths in `uri` are resolved first


def is_config_file(source: str) -> bool:
    """A .yaml path, not a URI that ends in one (scripted:T?skills=SKILLS.yaml)."""
    return source.endswith((".yaml", ".yml")) and source.partition(":")[0] not in SCHEMES


POLICY_FILE = "policy.yaml"  # a folder holding one is a policy source (a training run's checkpoint)


def read_policy_config(source: str) -> PolicyConfig:
    """A URI as a PolicyConfig, or a policy config file (or a folder with a policy.yaml) read and checked."""
    if not is_config_file(source) and ":" not in source and Path(source).is_dir():
        if not (Path(source) / POLICY_FILE).is_file():
            raise PolicyError(f"policy {source!r} is a folder without a {POLICY_FILE}; expected a checkpoint "
                              f"folder (r2s2r train writes RUN/checkpoints/step_NNNNNN/) or lerobot:{source}")
        source = str(Path(source) / POLICY_FILE)
    if not is_config_file(source):
        return PolicyConfig(uri=source, source=source)
    path = paths.resolve(source)
    top = Section(load_yaml(path), path)
    top.reject_unknown({"uri", "params", "metadata", "runtime", "description"})
    metadata = top.section("metadata").data if top.has("metadata") else None
    return PolicyConfig(uri=top.string("uri"), params=top.section("params", {}).data, metadata=metadata,
                        runtime=top.section("runtime", {}).data, source=str(path), base_dir=path.parent)


def split_uri(uri: str) -> tuple[str, str]:
    scheme, sep, rest = uri.partition(":")
    if not sep or scheme not in SCHEMES or not rest:
        raise PolicyError(f"policy {uri!r} is not a policy URI or config file; expected one of "
                          + ", ".join(f"{s}:PATH" for s in FILE_SCHEMES) + ", openpi://HOST:PORT, scripted:NAME[?KEY=VALUE&...], "
                          "or a .yaml policy config")
    return scheme, rest


def split_query(uri: str, rest: str) -> tuple[str, dict]:
    """A scripted URI's name and the params its query gives (`?a=1&b=x`; each value read as YAML)."""
    name, sep, query = rest.partition("?")
    if not sep:
        return rest, {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise PolicyError(f"policy {uri!r}: its query {query!r} is not KEY=VALUE pairs joined by '&'") from None
    params = {}
    for key, text in pairs:
        try:
            params[key] = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            params[key] = text
    return name, params


def _resolve(rest: str, base_dir: Path | None) -> Path:
    path = Path(rest).expanduser()
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        return base_dir / path
    return paths.resolve(path)


def load_policy(source: str | PolicyConfig, defaults: PolicyMetadata | None = None,
                params: dict | None = None) -> Policy:
    """Load a policy; `params` are merged over the config's (a node's parameter, a test)."""
    config = source if isinstance(source, PolicyConfig) else read_policy_config(source)
    scheme, rest = split_uri(config.uri)
    query: dict = {}
    if scheme == "scripted":
        rest, query = split_query(config.uri, rest)
    merged = {**query, **config.params, **(params or {})}
    where = f"{config.source}: params" if config.source != config.uri else f"{config.uri} params"
    params_sec = Section(merged, where)
    if config.metadata is not None:
        if scheme in ("torch", "torchscript", "export", "onnx"):
            raise ConfigError(config.source, "metadata", f"no metadata: a {scheme} file carries its own")
        defaults = PolicyMetadata.from_section(Section(config.metadata, config.source, "metadata"), defaults)

    if scheme in FILE_SCHEMES:
        path = _resolve(rest, config.base_dir)
        if scheme != "lerobot" and merged:
            raise ConfigError(where, "", f"no params: a {scheme} file carries everything it needs", merged)
        from r2s2r.policy import formats
        if scheme == "torch":
            return formats.load_checkpoint(path)
        if scheme == "torchscript":
            return formats.load_torchscript(path)
        if scheme == "export":
            return formats.load_exported(path)
        if scheme == "onnx":
            return formats.load_onnx(path)
        from r2s2r.policy.lerobot import load_lerobot
        return load_lerobot(path, defaults, params_sec)
    if scheme == "openpi":
        from r2s2r.policy.remote import OpenPIPolicy, parse_uri
        if defaults is None:
            raise PolicyError(f"{config.uri}: needs the observation and action layout; give `metadata` in a policy "
                              "config or run it for a robot")
        return OpenPIPolicy(parse_uri(config.uri), defaults, params_sec)
    from r2s2r.policy.scripted import make_scripted
    return make_scripted(rest, params_sec, defaults)
