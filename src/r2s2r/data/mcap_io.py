"""MCAP ROS 2 bags: write and read real ROS 2 messages (JointState, Image, ...) in the layout
`ros2 bag`, rosbags and Foxglove read.

A bag written here has the `ros2` profile; each channel carries `cdr` messages of one type
whose schema (encoding `ros2msg`) is the type's message definition followed by those of
every type it uses, each after a line of 80 '=' and `MSG: package/Type`, as rosbag2 writes
them. Messages are serialised to the CDR bytes a publisher sends (contract.serialization); definitions
are read from the message packages' share/<package>/msg/<Type>.msg.

    with BagWriter("episode.mcap") as bag:
        bag.write("/joint_states", joint_state_msg, stamp=1.25)
    for m in read_bag("episode.mcap", topics=["/joint_states"]):
        m.topic, m.stamp, m.msg            # a sensor_msgs.msg.JointState

ROS message packages (and, through the contract, rclpy) are imported when a bag is opened,
not when this module is.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator

SEPARATOR = "=" * 80
PRIMITIVES = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
              "int64", "uint64", "string", "wstring"}
_FIELD = re.compile(r"^\s*([A-Za-z_][\w/]*)(\[[^\]]*\])?(<=\d+)?\s+[A-Za-z_]\w*")


class BagError(RuntimeError):
    """A bag cannot be written or read as asked; the message says what and why."""


def type_name(msg_or_class: Any) -> str:
    """'sensor_msgs/msg/JointState' for a message or its class."""
    cls = msg_or_class if isinstance(msg_or_class, type) else type(msg_or_class)
    package = cls.__module__.split(".")[0]
    if not hasattr(type(cls), "__import_type_support__"):  # what rosidl's message metaclass provides
        raise BagError(f"{cls.__module__}.{cls.__name__} is not a ROS 2 message class")
    return f"{package}/msg/{cls.__name__}"


def message_class(name: str):
    """The Python class of 'package/msg/Type' (or 'package/Type')."""
    package, _, short = name.replace("/msg/", "/").partition("/")
    try:
        return getattr(importlib.import_module(f"{package}.msg"), short)
    except (ImportError, AttributeError):
        raise BagError(f"message type {name!r} is not installed (expected the Python package {package} "
                       f"with a message {short})") from None


def _share_dirs(package: str) -> Iterator[Path]:
    try:
        from ament_index_python.packages import get_package_share_directory
        yield Path(get_package_share_directory(package))
    except Exception:  # no ament index (pip-installed ROS wheels): the environment's share/
        pass
    for prefix in (sys.prefix, *os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        if prefix:
            yield Path(prefix) / "share" / package


@lru_cache(maxsize=None)
def _msg_file(package: str, short: str) -> str:
    for share in _share_dirs(package):
        path = share / "msg" / f"{short}.msg"
        if path.is_file():
            return path.read_text()
    raise BagError(f"no definition of {package}/msg/{short}: {short}.msg is not in share/{package}/msg of this "
                   "environment (is the message package installed?)")


def _dependencies(package: str, text: str) -> list[str]:
    """'package/Type' of every non-primitive field type, in order of appearance."""
    out = []
    for line in text.splitlines():
        match = _FIELD.match(line.split("#", 1)[0])
        if not match or match.group(1) in PRIMITIVES:  # constants are always primitive
            continue
        kind = match.group(1)
        if kind == "Header":
            kind = "std_msgs/Header"
        out.append(kind if "/" in kind else f"{package}/{kind}")
    return out


@lru_cache(maxsize=None)
def message_definition(name: str) -> str:
    """The rosbag2-style concatenated definition of 'package/msg/Type'."""
    package, _, short = name.replace("/msg/", "/").partition("/")
    main = _msg_file(package, short)
    parts, seen, queue = [main.rstrip("\n")], {f"{package}/{short}"}, _dependencies(package, main)
    while queue:
        dep = queue.pop(0)
        if dep in seen:
            continue
        seen.add(dep)
        dep_package, dep_short = dep.split("/")
        text = _msg_file(dep_package, dep_short)
        parts.append(f"{SEPARATOR}\nMSG: {dep}\n{text.rstrip(chr(10))}")
        queue.extend(_dependencies(dep_package, text))
    return "\n".join(parts) + "\n"


def _header_stamp(msg: Any) -> float | None:
    header = getattr(msg, "header", None)
    stamp = getattr(header, "stamp", None)
    if stamp is None:
        return None
    return stamp.sec + stamp.nanosec * 1e-9


class BagWriter:
    """An MCAP file of ROS 2 messages; `write` one message at a time, `close` (or `with`) to finish."""

    def __init__(self, path: str | Path):
        from mcap.writer import CompressionType, Writer
        from r2s2r.contract.serialization import to_cdr
        self._serialize = to_cdr
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")
        self._writer = Writer(self._file, compression=CompressionType.ZSTD)
        self._writer.start(profile="ros2", library="r2s2r")
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, tuple[int, str]] = {}
        self._sequence: dict[str, int] = {}
        self.count = 0

    def write(self, topic: str, msg: Any, stamp: float | None = None) -> None:
        """Write `msg` on `topic` at `stamp` seconds (default: its header stamp, else the wall clock)."""
        channel = self._channel(topic, type_name(msg))
        if stamp is None:
            stamp = _header_stamp(msg)
        self._add(topic, channel, self._serialize(msg), time.time() if stamp is None else stamp)

    def write_serialized(self, topic: str, type_name: str, data: bytes, stamp: float,
                         offered_qos_profiles: str | None = None) -> None:
        """Write a message already in its CDR bytes (as a raw subscription receives it), of type
        'package/msg/Type', at `stamp` seconds. `offered_qos_profiles` (rosbag2's YAML of the
        publishers' QoS) goes into the channel's metadata when the topic is first written."""
        self._add(topic, self._channel(topic, type_name, offered_qos_profiles), bytes(data), stamp)

    def _channel(self, topic: str, name: str, offered_qos_profiles: str | None = None) -> int:
        if not topic.startswith("/"):
            raise BagError(f"topic {topic!r}: expected an absolute topic name (starting with '/')")
        if name not in self._schemas:
            self._schemas[name] = self._writer.register_schema(name, "ros2msg", message_definition(name).encode())
        if topic not in self._channels:
            metadata = {} if offered_qos_profiles is None else {"offered_qos_profiles": offered_qos_profiles}
            channel = self._writer.register_channel(topic, "cdr", self._schemas[name], metadata)
            self._channels[topic] = (channel, name)
            self._sequence[topic] = 0
        channel, registered = self._channels[topic]
        if registered != name:
            raise BagError(f"topic {topic} carries {registered}; got a {name}")
        return channel

    def _add(self, topic: str, channel: int, data: bytes, stamp: float) -> None:
        nanoseconds = int(round(stamp * 1e9))
        self._writer.add_message(channel, log_time=nanoseconds, data=data, publish_time=nanoseconds,
                                 sequence=self._sequence[topic])
        self._sequence[topic] += 1
        self.count += 1

    def close(self) -> None:
        if self._file.closed:
            return
        self._writer.finish()
        self._file.close()

    def __enter__(self) -> "BagWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class BagMessage:
    topic: str
    stamp: float  # log time, seconds
    type: str  # 'package/msg/Type'
    msg: Any  # the deserialised ROS 2 message


def topics(path: str | Path) -> dict[str, str]:
    """Topic -> message type of every channel in the bag."""
    from mcap.reader import make_reader
    with open(path, "rb") as f:
        summary = make_reader(f).get_summary()
    if summary is None:
        raise BagError(f"{path}: no summary section (was the bag closed?)")
    return {c.topic: summary.schemas[c.schema_id].name for c in summary.channels.values()}


def read_bag(path: str | Path, topics: Iterable[str] | None = None) -> Iterator[BagMessage]:
    """The bag's messages (of `topics`, default all) in log-time order, as ROS 2 messages."""
    from mcap.reader import make_reader
    from r2s2r.contract.serialization import from_cdr
    path = Path(path)
    if not path.is_file():
        raise BagError(f"{path}: no such bag")
    wanted = None if topics is None else list(topics)
    classes: dict[str, Any] = {}
    with open(path, "rb") as f:
        reader = make_reader(f)
        for schema, channel, message in reader.iter_messages(topics=wanted, log_time_order=True):
            if channel.message_encoding != "cdr":
                raise BagError(f"{path}: topic {channel.topic} has encoding {channel.message_encoding}; expected cdr")
            if schema.name not in classes:
                classes[schema.name] = message_class(schema.name)
            yield BagMessage(channel.topic, message.log_time * 1e-9, schema.name,
                             from_cdr(message.data, classes[schema.name]))


__all__ = ["BagWriter", "BagMessage", "BagError", "read_bag", "topics", "message_definition", "message_class",
           "type_name"]
