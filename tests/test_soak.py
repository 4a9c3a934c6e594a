"""`r2s2r soak` through the live graph (driver_node on the twin, policy_node in a process of its
own, on this test session's ROS domain): drilled interventions (a knocked-off object, a killed
policy node) are counted with their cause, the soak goes on after each (the node restarted),
its episodes are the in-process runner's trials, and every node's memory is sampled."""

import json
import subprocess
import sys

import numpy as np
import pytest

from r2s2r.eval.runner import plan_eval
from r2s2r.eval.tasks import load_task
from r2s2r.policy.types import PolicyError
from r2s2r.loop.soak import SoakConfig, SoakError, parse_drill, parse_duration, run_soak
from r2s2r.sim.twin import Twin

TASK = "franka_block_in_bowl"
EXPERT = f"scripted:{TASK}"


def test_a_soak_counts_drilled_interventions_and_goes_on(tmp_path):
    config = SoakConfig(task=TASK, policy=EXPERT, duration_s=900, episodes=4, envelope="operating", seed=3,
                        sample_s=0.5, inject=(parse_drill("knock@1"), parse_drill("kill-policy@2")))
    soak = run_soak(config, tmp_path / "soak", progress=False)
    episodes = soak.episodes
    rows = "\n".join(json.dumps({k: v for k, v in e.items() if k != "perturbation"}) for e in episodes)
    assert [e["episode"] for e in episodes] == [0, 1, 2, 3], rows
    assert [e.get("intervention", {}).get("cause") for e in episodes] == [None, "object out of reach", "node died",
                                                                         None], rows
    assert "block" in episodes[1]["intervention"]["detail"] and "-9" in episodes[2]["intervention"]["detail"]
    assert [e["policy_starts"] for e in episodes] == [1, 1, 1, 2], rows  # restarted after it died, and acting again
    # The policy acted in every episode that ran on (the one after the restart included: its
    # commands reached the driver), and every episode is the draw an evaluation campaign of the
    # same seed and envelope makes (its outcome through the asynchronous graph may differ on a
    # trial near the edge: tests/test_eval_graph.py compares outcomes on trials well inside).
    assert episodes[0]["commands_accepted"] > 50 and episodes[3]["commands_accepted"] > 50, rows
    assert episodes[0]["commands_rejected"] == 0 and episodes[3]["commands_rejected"] == 0, rows
    assert episodes[0]["outcome"] in ("success", "failure") and episodes[3]["outcome"] in ("success", "failure"), rows
    planned = plan_eval(EXPERT, load_task(TASK), 4, 3, envelope="operating")
    assert [(e["perturbation"], e["seed"]) for e in episodes] == [(p.spec.values, p.spec.seed) for p in planned]

    summary = json.loads((tmp_path / "soak" / "soak.json").read_text())
    assert summary["episodes"] == 4 and len(summary["interventions"]) == 2
    assert summary["interventions_by_cause"] == {"object out of reach": 1, "node died": 1}
    assert summary["interventions"][0]["at_s"] < summary["interventions"][1]["at_s"]
    rejected = [e["commands_rejected"] for e in episodes if "commands_rejected" in e]
    assert summary["commands"]["rejected"] == sum(rejected)
    assert summary["commands"]["episodes_with_rejections"] == sum(1 for r in rejected if r)
    assert summary["commands"]["accepted"] >= episodes[0]["commands_accepted"] + episodes[3]["commands_accepted"]
    memory = summary["memory"]
    assert set(memory) == {"driver_node + judge", "policy_node"}
    assert memory["policy_node"]["processes"] == 2, memory  # the killed one and its replacement, each sampled
    assert all(m["samples"] >= 2 and m["last_mb"] > 10 and np.isfinite(m["growth_mb_per_h"])
               and np.isfinite(m["growth_mb_per_h_second_half"]) for m in memory.values()), memory
    page = (tmp_path / "soak" / "soak.html").read_text()
    assert "object out of reach" in page and "node died" in page and "policy_node" in page


def test_soak_settings_are_refused_by_name_before_anything_runs(tmp_path):
    assert parse_duration("1h") == 3600 and parse_duration("1h30m") == 5400 and parse_duration("90s") == 90
    assert parse_duration("45") == 45
    for bad in ("", "an hour", "0", "-5m", "9999h"):
        with pytest.raises(SoakError, match="duration"):
            parse_duration(bad)
    for bad in ("knock", "explode@1", "knock@x"):
        with pytest.raises(SoakError, match="DRILL@EPISODE"):
            parse_drill(bad)
    with pytest.raises(SoakError, match="stuck_s"):
        run_soak(SoakConfig(task=TASK, policy=EXPERT, stuck_s=float("nan")), tmp_path / "x", progress=False)
    with pytest.raises(Exception, match="no_such_task"):
        run_soak(SoakConfig(task="no_such_task", policy=EXPERT), tmp_path / "y", progress=False)
    with pytest.raises(PolicyError, match="step_000100"):
        run_soak(SoakConfig(task=TASK, policy=str(tmp_path / "run" / "checkpoints" / "step_000100")), tmp_path / "z",
                 progress=False)
    assert not any((tmp_path / d).exists() for d in "xyz")


def test_a_twin_reset_onto_a_later_clock_and_its_fixtures_and_drills():
    task = load_task(TASK)
    twin = Twin(task.scene({}))
    twin.reset(0, time=42.5)
    assert twin.time == 42.5
    twin.step(10)
    assert twin.time == pytest.approx(42.5 + 10 * twin.model.opt.timestep)
    assert set(twin.fixture_poses()) == {"bowl"}
    assert task.logic.object_poses(twin).keys() == {"block", "bowl"}
    twin.displace_object("block", (0.5, 2.0, 0.3))
    assert np.allclose(twin.object_poses()["block"][0], (0.5, 2.0, 0.3))


TRIM_PROBE = """
import ctypes, os
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
page = os.sysconf("SC_PAGE_SIZE")
def resident_mb():
    return int(open("/proc/self/statm").read().split()[1]) * page / 2**20
blocks = [libc.malloc(64 << 10) for _ in range(512)]  # 32 MiB from the arena, below the mmap threshold
for b in blocks:
    ctypes.memset(b, 1, 64 << 10)
for b in blocks[:-1]:
    libc.free(b)  # the last block, still in use, keeps the heap's top: nothing is trimmed on free
held = resident_mb()
from r2s2r.processes import trim_heap
print(trim_heap(), held - resident_mb())
"""


def test_between_episodes_the_soak_gives_freed_heap_pages_back():
    """What a torn-down driver leaves in glibc's arenas is no leak, and the soak's memory figures
    must not read it as one: trim_heap hands the free pages back."""
    result = subprocess.run([sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    trimmed, returned_mb = result.stdout.split()
    assert trimmed == "True" and float(returned_mb) > 24, result.stdout
