"""`r2s2r demo`: bring up the Franka twin stack, drive it over DDS from this process, check the
arm arrived, save a camera frame, shut the stack down cleanly, then search the scripted
expert's failures on franka_block_in_bowl and print the path of the report, and last collect
expert demonstrations, train a state policy on them and evaluate it (train.demo)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from r2s2r.processes import signal_group

ARRIVAL_TOLERANCE_RAD = 1e-3
STACK = "config/stacks/franka_fr3_sim.yaml"


def _say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def run(out_dir: str = "demo_output") -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # keep the demo off the LAN
    from r2s2r import paths
    from r2s2r.contract import Topics
    from r2s2r.nodes.client import RobotClient
    from r2s2r.robots import get_robot

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stack_file = paths.resolve(STACK)
    _say(f"starting `r2s2r up {STACK}` (ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID', '0')})")
    stack = subprocess.Popen([sys.executable, "-u", "-m", "r2s2r.cli", "up", str(stack_file)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    threading.Thread(target=lambda: [print(line, end="", flush=True) for line in stack.stdout], daemon=True).start()
    client = None
    ok = False
    try:
        robot = get_robot("franka_fr3")
        arm = robot.group("arm")
        client = RobotClient("r2s2r_demo", cameras=("scene",))
        start = client.wait_for_joint_states(timeout=60.0)
        _say(f"joint_states from the twin: {len(start.names)} joints at t={start.stamp:.3f} s")
        if not client.wait_for_subscriber(Topics.joint_trajectory("arm"), _trajectory_type(), timeout=30.0):
            raise TimeoutError(f"the driver never subscribed to {Topics.joint_trajectory('arm')}")
        home = np.array([robot.home[j] for j in arm.joints])
        reach = home + np.array([0.5, 0.35, -0.3, 0.45, 0.2, -0.3, -0.4])
        goal = home + np.array([-0.4, 0.2, 0.25, 0.3, -0.2, 0.2, 0.6])
        _say("sending a 3 s joint trajectory (two waypoints) on arm_controller/joint_trajectory")
        client.send_trajectory("arm", arm.joints, [1.5, 3.0], [reach, goal])
        client.send_gripper("gripper", 0.02)
        arrived = client.wait_until_at(arm.joints, goal, ARRIVAL_TOLERANCE_RAD, timeout=20.0)
        error = np.max(np.abs(client.positions(arm.joints) - goal))
        _say(f"arm {'arrived' if arrived else 'did NOT arrive'}: max joint error {error * 1e3:.3f} mrad "
             f"(tolerance {ARRIVAL_TOLERANCE_RAD * 1e3:.1f} mrad)")
        if not client.wait_for(lambda: client.image("scene") is not None, 20.0):
            raise TimeoutError("no image on cameras/scene/image_raw")
        image = client.image("scene")
        import cv2
        png = out / "franka_scene.png"
        cv2.imwrite(str(png), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        _say(f"saved {png} ({image.shape[1]}x{image.shape[0]})")
        ok = arrived
    except Exception as exc:
        _say(f"failed: {type(exc).__name__}: {exc}")
    finally:
        if client is not None:
            client.close()
        t0 = time.monotonic()
        stack.send_signal(signal.SIGINT)
        try:
            code = stack.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            signal_group(stack.pid, signal.SIGKILL)
            code = stack.wait()
            ok = False
        _say(f"stack stopped in {time.monotonic() - t0:.2f} s (exit code {code})")
    if ok:
        from r2s2r.eval.demo import BUDGET, TASK, run_search_demo
        _say(f"failure search: {BUDGET} CEM trials of {TASK} with its scripted expert, 2 workers")
        report = run_search_demo(out / "search")
        _say(f"failure search report: {report.resolve()}")
        from r2s2r.train.demo import ENVELOPE, EPISODES, STEPS, TRIALS, run_data_demo
        _say(f"data: {EPISODES} expert episodes of {TASK} ({ENVELOPE} envelope) into a LeRobot v3.0 dataset, a state "
             f"policy trained {STEPS} steps, both evaluated on {TRIALS} held-out trials")
        data = run_data_demo(out / "data")
        _say(f"dataset: {data.dataset} (r2s2r dataset info {data.dataset})")
        _say(f"checkpoint: {data.checkpoint} (loss curves: {data.losses})")
        _say(f"held-out trials: trained policy {data.policy_successes}/{data.trials}, expert "
             f"{data.expert_successes}/{data.trials} (a short training: bench/train_and_eval.py trains for real)")
    _say("demo passed" if ok else "demo FAILED")
    return 0 if ok else 1


def _trajectory_type():
    from trajectory_msgs.msg import JointTrajectory
    return JointTrajectory


if __name__ == "__main__":
    raise SystemExit(run(*sys.argv[1:2]))
