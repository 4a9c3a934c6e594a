"""The endurance benchmark's short version: the FR3 stack with cameras, a streaming policy node
and the recorder for 40 s under bench/stack_endurance.py; every node stays alive, memory and the
joint_states period are reported, and the loose bounds here only catch a gross leak or a stalled
driver. The hour-long run with the real bounds is `python bench/stack_endurance.py`."""

import subprocess
import sys

from tests.ros_helpers import REPO


def test_the_stack_runs_40_s_with_every_node_alive():
    result = subprocess.run([sys.executable, "bench/stack_endurance.py", "--duration", "40", "--warmup-s", "10",
                             "--window-s", "10", "--sample-s", "2", "--max-growth", "25", "--max-p99-change", "20"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    out = result.stdout
    assert "every node alive: yes" in out, out + result.stderr[-3000:]
    for node in ("driver", "policy", "recorder"):
        assert f"   {node} " in out or f"{node:>9} " in out, out
    assert "joint_states period: first window" in out, out
    assert result.returncode == 0 and "verdict: pass" in out, out
