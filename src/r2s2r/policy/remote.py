"""A remote policy server speaking openpi's websocket protocol (`openpi://HOST:PORT`).

The protocol, as openpi's server and `openpi-client` implement it: on connect the server
sends its metadata (one binary frame); then each binary frame the client sends is one
observation dict and each reply is one action dict holding `actions`, an array of shape
(chunk, action_dim). A server that fails sends its traceback as a text frame and closes
the connection. Frames are msgpack with numpy arrays as maps
{__ndarray__: true, data: bytes, dtype: str, shape: list} and numpy scalars as
{__npgeneric__: true, data: value, dtype: str}, the marker keys as msgpack bytes.

This module speaks the protocol with `msgpack` and `websockets` itself: openpi-client pins
numpy < 2, which the rest of r2s2r does not use.
"""

from __future__ import annotations

import numpy as np

from r2s2r.config import Section
from r2s2r.policy.types import ActionChunk, DeadlineMiss, Observation, PolicyError, PolicyMetadata

DEFAULT_PORT = 8000  # openpi's serve_policy.py default


# -- msgpack with numpy -----------------------------------------------------------------------------
def _encode(obj):
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in ("V", "O", "c"):
        raise TypeError(f"numpy dtype {obj.dtype} cannot be sent; expected numbers, booleans or strings")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": np.ascontiguousarray(obj).tobytes(), b"dtype": obj.dtype.str,
                b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot encode {type(obj).__name__} for an openpi server")


def _decode(obj: dict):
    if b"__ndarray__" in obj:
        return np.frombuffer(obj[b"data"], dtype=np.dtype(obj[b"dtype"])).reshape(obj[b"shape"]).copy()
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def packb(obj) -> bytes:
    import msgpack
    return msgpack.packb(obj, default=_encode)


def unpackb(data: bytes):
    import msgpack
    return msgpack.unpackb(data, object_hook=_decode)


def _websocket_client():
    try:
        import msgpack  # noqa: F401
        import websockets.sync.client
    except ImportError as exc:
        raise PolicyError(f"openpi:// policies need the `msgpack` and `websockets` packages (the r2s2r[remote] "
                          f"extra): {exc}") from None
    return websockets.sync.client


# -- what is sent ------------------------------------------------------------------------------------
def default_observation_keys(metadata: PolicyMetadata) -> dict[str, str]:
    """openpi's generic layout: a flat `state`, images under `images`, the task as `prompt`."""
    keys = {"state": "state"}
    keys.update({f"images.{camera}": f"image.{camera}" for camera in metadata.observation.cameras})
    if metadata.observation.task:
        keys["prompt"] = "task"
    return keys


class OpenPIPolicy:
    """The client side. One connection, opened at load (a wrong address fails there) and
    reopened on the next `act` after the server dropped it."""

    def __init__(self, uri: str, metadata: PolicyMetadata, params: Section):
        params.reject_unknown({"observation", "image_layout", "task", "timeout_s", "connect_timeout_s", "api_key"})
        self._client = _websocket_client()
        self.uri = uri
        self.metadata = metadata
        given = params.section("observation", {}).data
        self.keys = {str(k): str(v) for k, v in (given or default_observation_keys(metadata)).items()}
        self._check_keys(params)
        self.image_layout = params.string("image_layout", "hwc", choices=("hwc", "chw"))
        self.default_task = params.raw("task", "") or ""
        self.timeout_s = params.number("timeout_s", 10.0, positive=True)
        self.connect_timeout_s = params.number("connect_timeout_s", 5.0, positive=True)
        api_key = params.raw("api_key", "") or ""
        self._headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        self.server_metadata: dict = {}
        self._ws = None
        self._connect()

    def _check_keys(self, params: Section) -> None:
        cameras = self.metadata.observation.cameras
        for key, source in self.keys.items():
            kind, _, name = source.partition(".")
            ok = (source in ("state", "task") or (kind == "joints" and name in self.metadata.observation.joints)
                  or (kind == "gripper" and name in self.metadata.observation.grippers)
                  or (kind == "image" and name in cameras))
            if not ok:
                raise params.error(f"observation.{key}", "state, task, joints.<group>, gripper.<gripper> or "
                                   "image.<camera> of the policy's observation space", source)

    # -- connection ------------------------------------------------------------------------------
    def _connect(self) -> None:
        try:
            # legacy=True: a connection that outlives one `with` block (websockets >= 17 wants it said)
            ws = self._client.connect(self.uri, compression=None, max_size=None, open_timeout=self.connect_timeout_s,
                                      additional_headers=self._headers, legacy=True)
        except (OSError, TimeoutError) as exc:
            raise PolicyError(f"{self.uri}: cannot connect ({exc}); expected a policy server speaking openpi's "
                              "websocket protocol (openpi's scripts/serve_policy.py)") from None
        except Exception as exc:  # websockets' handshake errors (an HTTP server that is not a websocket)
            raise PolicyError(f"{self.uri}: websocket handshake failed ({type(exc).__name__}: {exc})") from None
        try:
            first = ws.recv(timeout=self.connect_timeout_s)
            metadata = unpackb(first) if isinstance(first, bytes) else None
        except Exception:
            metadata = None
        if not isinstance(metadata, dict):
            ws.close()
            raise PolicyError(f"{self.uri}: the server did not send its metadata (a msgpack map) on connect; "
                              "expected an openpi policy server")
        self.server_metadata = metadata
        self._ws = ws

    def _drop(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None

    def close(self) -> None:
        self._drop()

    def reset(self) -> None:
        """openpi servers keep no episode state a client can reset (openpi-client's reset does nothing)."""

    # -- inference --------------------------------------------------------------------------------
    def request(self, observation: Observation) -> dict:
        """The observation dict as the server gets it."""
        state = observation.state(self.metadata.observation)
        request: dict = {}
        for key, source in self.keys.items():
            kind, _, name = source.partition(".")
            if source == "state":
                value = state.astype(np.float32)
            elif source == "task":
                value = observation.task or self.default_task
            elif kind == "joints":
                value = np.asarray(observation.joints[name], np.float32)
            elif kind == "gripper":
                value = np.array([observation.grippers[name]], np.float32)
            else:
                if name not in observation.images:
                    raise PolicyError(f"observation has no image from camera {name!r} (sent as {key!r})")
                value = np.ascontiguousarray(observation.images[name], np.uint8)
                if self.image_layout == "chw":
                    value = np.ascontiguousarray(value.transpose(2, 0, 1))
            target = request
            *parents, leaf = key.split(".")
            for parent in parents:
                target = target.setdefault(parent, {})
            target[leaf] = value
        return request

    def act(self, observation: Observation) -> ActionChunk:
        from websockets.exceptions import ConnectionClosed
        if self._ws is None:
            self._connect()
        try:
            self._ws.send(packb(self.request(observation)))
            reply = self._ws.recv(timeout=self.timeout_s)
        except TimeoutError:
            self._drop()  # the late reply would answer the next request: start afresh
            raise DeadlineMiss(f"{self.uri}: no reply within {self.timeout_s:g} s") from None
        except ConnectionClosed as exc:
            self._drop()
            raise PolicyError(f"{self.uri}: the server closed the connection ({exc})") from None
        if isinstance(reply, str):
            self._drop()
            last = reply.strip().splitlines()[-1] if reply.strip() else "(empty)"
            raise PolicyError(f"{self.uri}: the server failed: {last}")
        try:
            response = unpackb(reply)
        except Exception as exc:
            raise PolicyError(f"{self.uri}: the reply is not msgpack ({type(exc).__name__}); expected an "
                              "action dict with `actions`") from None
        if not isinstance(response, dict) or "actions" not in response:
            got = sorted(map(str, response)) if isinstance(response, dict) else type(response).__name__
            raise PolicyError(f"{self.uri}: the reply has no `actions`; expected a dict with an `actions` array "
                              f"of shape (chunk, {self.metadata.action.size}), got {got}")
        try:
            return ActionChunk.from_array(self.metadata.action, response["actions"], observation.stamp,
                                          self.metadata.dt)
        except (PolicyError, TypeError, ValueError) as exc:
            raise PolicyError(f"{self.uri}: {exc}") from None


def parse_uri(uri: str) -> str:
    """openpi://HOST[:PORT] -> ws://HOST:PORT."""
    rest = uri.removeprefix("openpi://")
    host, _, port = rest.partition(":")
    if not host or "/" in rest or (port and not port.isdigit()):
        raise PolicyError(f"policy URI {uri!r} is not openpi://HOST:PORT (e.g. openpi://localhost:{DEFAULT_PORT})")
    return f"ws://{host}:{port or DEFAULT_PORT}"
