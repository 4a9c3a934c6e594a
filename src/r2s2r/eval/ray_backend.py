"""Trials on Ray (`--backend ray`): one actor per worker, each a TrialWorker keeping its caches.

Ray is an optional extra (`pip install 'r2s2r[ray]'`), imported only here. `address`: None
starts a local Ray instance for this campaign; "auto" joins the cluster this machine belongs
to; "HOST:PORT" joins that head node; "ray://HOST:PORT" connects through Ray Client. Every
node needs r2s2r and the task's and policy's files installed at the same paths (or a Ray
runtime_env that ships them). The trial function is the process pool's: the same trials
give the same rows.
"""

from __future__ import annotations

import os
import sys
from typing import Iterable

from r2s2r.eval.runner import TrialResult, TrialSpec, TrialWorker


class _Worker:
    def __init__(self):
        self.worker = TrialWorker(threads=1)

    def run(self, spec: TrialSpec) -> TrialResult:
        return self.worker.run(spec)


def _local(address: str | None) -> bool:
    return address in (None, "", "local")


def _ray(address: str | None = "auto"):
    if _local(address) and "ray" not in sys.modules:
        # Read when Ray is imported: a single-node instance binds to loopback (Ray's own choice on
        # macOS and Windows) and reports no usage statistics.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise ImportError("--backend ray needs Ray: pip install 'r2s2r[ray]' (or pip install ray)") from None
    return ray


def connect(address: str | None, workers: int) -> None:
    """Join (or start) the Ray instance once per process. Without an address, a local instance
    with `workers` CPUs, on loopback, without a dashboard."""
    ray = _ray(address)
    if ray.is_initialized():
        return
    if _local(address):
        ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)


class RayWorkers:
    """`workers` actors on Ray, each a TrialWorker that keeps its caches between trials."""

    def __init__(self, workers: int, address: str | None):
        connect(address, workers)
        self.ray = _ray(address)
        actor = self.ray.remote(num_cpus=1)(_Worker)
        self.actors = [actor.remote() for _ in range(workers)]

    def run(self, specs) -> Iterable[TrialResult]:
        """The results of `specs` in the order they finish; each actor runs one trial at a time."""
        ray = self.ray
        queue = list(reversed(specs))
        running = {}  # object ref -> the actor running it
        for a in self.actors:
            if queue:
                running[a.run.remote(queue.pop())] = a
        while running:
            (ref,), _ = ray.wait(list(running), num_returns=1)
            a = running.pop(ref)
            if queue:
                running[a.run.remote(queue.pop())] = a
            yield ray.get(ref)

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
