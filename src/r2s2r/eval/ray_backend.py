"""Trials on Ray (`--backend ray`): one actor per worker, each a TrialWorker keeping its caches.

Ray is an optional extra (`pip install 'r2s2r[ray]'`), imported only here. `address`: None
starts a local Ray instance for this campaign; "auto" joins the cluster this machine belongs
to; "HOST:PORT" joins that head node; "ray://HOST:PORT" connects through Ray Client. Every
node needs r2s2r and the task's and policy's files installed at the same paths (or a Ray
runtime_env that ships them). The trial function is the process pool's: the same trials
give the same rows. Other jobs (`TrialPool.map`) run on the same actors, their context put in
the object store once per call.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Iterable, Sequence

from r2s2r.eval.runner import JobContext, TrialResult, TrialSpec, TrialWorker


class _Worker:
    def __init__(self):
        self.worker = TrialWorker(threads=1)

    def run(self, specs: Sequence[TrialSpec]) -> list[TrialResult]:
        return self.worker.run_batch(specs)

    def job(self, fn, context, item):
        return self.worker.job(fn, context, item)

    def run_recorded(self, spec: TrialSpec, recorder):
        return self.worker.run_recorded(spec, recorder)


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

    def run(self, batches: Sequence[Sequence[TrialSpec]]) -> Iterable[list[TrialResult]]:
        """The results of each batch of specs (TrialWorker.run_batch) in the order they finish;
        each actor runs one batch at a time."""
        for _, results in self._dispatch(lambda actor, batch: actor.run.remote(batch), batches):
            yield results

    def run_recorded(self, specs: Sequence[TrialSpec], recorder) -> Iterable[tuple[TrialResult, Any]]:
        """(result, recorded) of each spec, in the order they finish (TrialPool.run_recorded)."""
        for _, pair in self._dispatch(lambda actor, spec: actor.run_recorded.remote(spec, recorder), specs):
            yield pair

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence, context: JobContext | None) -> list:
        """fn(state, item) for every item, in the items' order (see TrialPool.map)."""
        ref = self.ray.put(context)  # once, not with every item; an actor gets it resolved
        done = dict(self._dispatch(lambda actor, item: actor.job.remote(fn, ref, item), items))
        return [done[i] for i in range(len(items))]

    def _dispatch(self, submit, items) -> Iterable[tuple[int, Any]]:
        """(index, result) of submit(actor, item) for every item, in the order they finish; an
        actor gets its next item when it has returned one."""
        ray = self.ray
        queue = list(reversed(list(enumerate(items))))
        running = {}  # object ref -> (the actor running it, the item's index)
        for a in self.actors:
            if queue:
                index, item = queue.pop()
                running[submit(a, item)] = (a, index)
        while running:
            (ref,), _ = ray.wait(list(running), num_returns=1)
            a, index = running.pop(ref)
            if queue:
                following, item = queue.pop()
                running[submit(a, item)] = (a, following)
            yield index, ray.get(ref)

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
