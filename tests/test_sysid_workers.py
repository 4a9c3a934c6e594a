"""System identification on the trial runner's workers: `TrialPool.map` (order, a context built
once per worker), and a fit whose CMA-ES generations run on 2 worker processes or 2 Ray actors
giving the one-worker fit bit for bit. A 1 s proxy-real excitation episode, 2 global generations
and 1 least-squares iteration: the same work as a real fit, in a few seconds."""

import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from r2s2r.eval.runner import TrialPool
from tests.eval_helpers import subprocess_env

NAMES = ["arm.kp_scale", "arm.damping_scale"]
_BUILDS: dict[str, int] = {}  # per process: how often each context key was built


@dataclass(frozen=True)
class Counted:
    """A JobContext whose state records how often this process has built it."""

    key: str

    def build(self) -> dict:
        _BUILDS[self.key] = _BUILDS.get(self.key, 0) + 1
        return {"builds": _BUILDS[self.key]}


def slow_double(state, item):
    time.sleep(0.03 * (6 - item))  # later items finish first
    return 2 * item, os.getpid(), state["builds"]


def check_map(pool: TrialPool) -> set[int]:
    """Results in item order, each worker building a context once for two calls; returns the pids."""
    first, again = Counted(uuid.uuid4().hex), Counted(uuid.uuid4().hex)
    out = pool.map(slow_double, range(6), context=first) + pool.map(slow_double, range(6), context=first)
    out += pool.map(slow_double, range(6), context=again)
    assert [r[0] for r in out] == [2 * i for i in range(6)] * 3
    assert {r[2] for r in out} == {1}  # built once per worker and key, kept between calls
    assert pool.map(slow_double, []) == []
    return {r[1] for r in out}


def test_pool_map_returns_in_item_order_and_builds_a_context_once_per_worker():
    with TrialPool(1) as here:
        assert check_map(here) == {os.getpid()}  # one worker: this process
    with TrialPool(2) as pool:
        pids = check_map(pool)
        assert os.getpid() not in pids and len(pids) <= 2


@pytest.fixture(scope="module")
def excitation(tmp_path_factory):
    from r2s2r.real2sim.proxy import Hidden, ProxyCell, excitation_script
    from r2s2r.robots import get_robot
    from r2s2r.sim.scene import load_scene
    scene = load_scene("config/real2sim/proxy_cell.yaml")
    path = tmp_path_factory.mktemp("sysid") / "excitation.mcap"
    hidden = Hidden(values={"arm.kp_scale": 0.8, "arm.damping_scale": 2.0, "latency_s": 0.012})
    ProxyCell(scene, hidden).record(excitation_script(get_robot(scene.robot), 1.0), path, 1.2)
    return scene, str(path)


def small_fit(excitation, **kwargs):
    """A fit with every residual block (finger too, on the window and on the workers)."""
    from r2s2r.data.episode import load_episode
    from r2s2r.real2sim.sysid import fit
    scene, path = excitation
    return fit(scene, [load_episode(path)], NAMES, episode_paths=[path], global_iterations=2, max_iters=1,
               window_s=0.5, **kwargs)


def same_fit(a, b) -> None:
    assert a.history == b.history  # every generation's best cost, bit for bit
    assert a.values == b.values
    ra, rb = a.report(), b.report()
    for r in (ra, rb):
        del r["wall_s"], r["workers"]
    assert ra == rb


@pytest.fixture(scope="module")
def fits(excitation):
    calls = []
    original = TrialPool.map

    def counted(pool, fn, items, context=None):
        calls.append((pool.workers, pool.backend, len(items)))
        return original(pool, fn, items, context)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TrialPool, "map", counted)
        one = small_fit(excitation, workers=1)
        assert calls == []  # one worker: the generations run here, on the fit's own evaluators
        two = small_fit(excitation, workers=2)
    return one, two, calls


def test_a_fit_on_two_worker_processes_equals_the_fit_on_one(fits):
    one, two, calls = fits
    # Every generation went to the pool: 2 global ones of 10 candidates (least squares runs here).
    assert calls == [(2, "process", 10)] * 2
    assert len(two.history) == len(calls)
    same_fit(one, two)
    assert one.evaluations == two.evaluations


def test_ray_without_episode_files_is_refused(excitation):
    from r2s2r.real2sim.sysid import fit
    with pytest.raises(ValueError, match="needs episode_paths"):
        fit(excitation[0], [], NAMES, backend="ray")


def test_a_fits_generations_on_ray_give_the_process_pools_costs(fits, excitation, monkeypatch):
    # Ray's workers import this module (check_map's function and context) by its name.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), subprocess_env()["PYTHONPATH"]]))
    try:
        on_ray = small_fit(excitation, workers=2, backend="ray")  # no address: a local instance, loopback
        import ray
        assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
        same_fit(fits[1], on_ray)
        with TrialPool(2, "ray") as actors:
            assert os.getpid() not in check_map(actors)
    finally:
        if "ray" in sys.modules:
            sys.modules["ray"].shutdown()
