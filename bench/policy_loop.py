"""Policy loop figures.

1. Observation-to-command latency over DDS (p50 / p99): this script plays the robot, publishing
   `joint_states` at 100 Hz (and a 320x240 camera at 30 Hz), while policy_node runs in its own
   process and publishes `arm_streaming_controller/commands` at 100 Hz. The policy echoes the
   observed arm position, so each command names the joint state it came from: the figure runs
   from publishing that joint state to receiving the first command computed from it, and so
   includes DDS both ways, observation assembly, waiting for the next inference slot, the
   inference itself and waiting for the next command tick. Two policies: a trivial echo, and
   the echo behind a forward pass of a ~10 M-parameter CNN (r2s2r.policy.models.ConvPolicy,
   one 224x224 camera) on the CPU.
2. In-process overhead of the runtime per step against calling the model directly (ratio):
   PolicyRuntime.step with inference every step (normalisation, image conversion, chunking,
   interpolation) versus the bare torch forward on prepared tensors, for a tiny MLP policy and
   for the CNN.

Usage: python bench/policy_loop.py [--seconds S] [--steps N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from _machine import machine_line
from _ros import isolate_ros_domain
from r2s2r.config import Section
from r2s2r.policy import ActionChunk, ActionSpace, Observation, ObservationSpace, PolicyMetadata

BENCH = Path(__file__).resolve().parent
CNN = {"channels": (32, 64, 128, 256, 512), "hidden": 1920}  # 10.1 M parameters with one camera
IMAGE = (224, 224)
RATE_HZ = 100.0
SEQ_BASE, SEQ_STEP, SEQ_MOD = 0.1, 1e-4, 1000  # joint1 = base + (seq % mod) * step names the sample


def cnn_model(cameras: int, state: int = 8, action: int = 8, chunk: int = 10):
    import torch
    from r2s2r.policy.models import ConvPolicy
    torch.manual_seed(0)
    return ConvPolicy(state, action, chunk, cameras, **CNN).eval()


class EchoPolicy:
    """Returns the observed state as its chunk, after an optional CNN forward pass on the
    observation (so the command carries the identity of the joint state it was computed from)."""

    def __init__(self, metadata: PolicyMetadata, cnn: bool):
        self.metadata = metadata
        self.tensor = None
        if cnn:
            from r2s2r.policy import Normalizer
            from r2s2r.policy.formats import torch_runner
            from r2s2r.policy.tensor import TensorPolicy
            self.tensor = TensorPolicy(metadata, Normalizer(), torch_runner(cnn_model(1)), "bench cnn")

    def reset(self) -> None:
        pass

    def act(self, observation: Observation) -> ActionChunk:
        if self.tensor is not None:
            self.tensor.act(observation)
        state = observation.state(self.metadata.action)
        return ActionChunk.from_array(self.metadata.action, np.repeat(state[None], self.metadata.chunk_length, 0),
                                      observation.stamp, self.metadata.dt)


def bench_echo(params: Section, defaults: PolicyMetadata | None) -> EchoPolicy:
    cnn = params.boolean("cnn", False)
    cameras = {"scene": IMAGE} if cnn else {}
    space = defaults.action
    # Half a second of chunk at 100 Hz: a slow forward pass still lands inside its chunk.
    metadata = PolicyMetadata(ObservationSpace(space.joints, space.grippers, cameras), space, RATE_HZ, 50, "echo")
    return EchoPolicy(metadata, cnn)


# -- 1. over DDS -------------------------------------------------------------------------------------
def dds_latency(cnn: bool, seconds: float) -> np.ndarray:
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Float64MultiArray
    from r2s2r.contract import Topics, convert, qos
    from r2s2r.robots import get_robot

    robot = get_robot("franka_fr3")
    names = list(robot.group("arm").joints + robot.gripper_joint_names)
    import r2s2r
    # The node imports this file as `policy_loop` (scripted:policy_loop:bench_echo) and r2s2r from where we do.
    path = [str(BENCH), str(Path(r2s2r.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    node_cmd = [sys.executable, "-m", "r2s2r.nodes.policy_node", "--ros-args", "-r", "__node:=policy",
                "-p", "robot:=franka_fr3", "-p", "policy:=scripted:policy_loop:bench_echo",
                "-p", f'policy_params:="{{cnn: {str(cnn).lower()}}}"', "-p", "autostart:=true",
                "-p", f"command_rate_hz:={RATE_HZ}", "-p", "replan_steps:=1", "-p", "deadline_s:=1.0"]
    log = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty node never blocks on it
    proc = subprocess.Popen(node_cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    node = Node("bench_policy_loop")
    published: dict[int, float] = {}
    latencies: list[float] = []
    seen: set[int] = set()
    lock = threading.Lock()

    def on_command(msg: Float64MultiArray) -> None:
        arrived = time.perf_counter()
        seq = int(round((msg.data[0] - SEQ_BASE) / SEQ_STEP))
        with lock:
            if seq in published and seq not in seen:
                seen.add(seq)
                latencies.append(arrived - published[seq])
    node.create_subscription(Float64MultiArray, Topics.streaming_commands("arm"), on_command, qos.COMMAND)
    states = node.create_publisher(JointState, Topics.JOINT_STATES, qos.STATE)
    images = node.create_publisher(Image, Topics.camera_image("scene"), qos.SENSOR)
    frame = np.random.default_rng(0).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    counter = {"seq": 0}

    def publish_state() -> None:
        seq = counter["seq"] % SEQ_MOD
        counter["seq"] += 1
        position = list(robot.home_positions) + [0.04, 0.04]
        position[0] = SEQ_BASE + seq * SEQ_STEP
        msg = JointState(name=names, position=position)
        msg.header.stamp = node.get_clock().now().to_msg()
        with lock:
            published[seq] = time.perf_counter()
            seen.discard(seq)
        states.publish(msg)

    def publish_image() -> None:
        images.publish(convert.image_msg(frame, "rgb8", node.get_clock().now().nanoseconds * 1e-9, "scene_optical"))
    node.create_timer(1.0 / RATE_HZ, publish_state)
    if cnn:
        node.create_timer(1.0 / 30.0, publish_image)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not latencies and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        if not latencies:
            log.seek(0)
            raise RuntimeError(f"policy_node sent no command within 60 s:\n{log.read()}")
        time.sleep(1.0)  # warm-up: the first inferences allocate
        with lock:
            latencies.clear()
        time.sleep(seconds)
        with lock:
            return np.array(latencies)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()


# -- 2. in process -------------------------------------------------------------------------------------
def overhead(model, metadata: PolicyMetadata, steps: int) -> tuple[float, float]:
    """(seconds per runtime step, seconds per direct model call)."""
    import torch
    from r2s2r.policy import Normalizer, PolicyRuntime, RuntimeConfig
    from r2s2r.policy.formats import torch_runner
    from r2s2r.policy.tensor import TensorPolicy, example_inputs

    stats = {"state": {"mode": "mean_std", "mean": [0.0] * 8, "std": [1.0] * 8},
             "action": {"mode": "mean_std", "mean": [0.0] * 8, "std": [1.0] * 8}}
    policy = TensorPolicy(metadata, Normalizer.from_dict(stats), torch_runner(model), "bench")
    runtime = PolicyRuntime(policy, RuntimeConfig(asynchronous=False, replan_steps=1))
    rng = np.random.default_rng(0)
    images = {c: rng.integers(0, 256, (*size, 3), dtype=np.uint8) for c, size in metadata.observation.cameras.items()}
    tensors = [torch.from_numpy(a + 0.1) for a in example_inputs(metadata)]
    ticks = iter(range(10 ** 9))  # the runtime's clock moves one policy step per call

    def run_runtime(n):
        start = time.perf_counter()
        for _ in range(n):
            now = next(ticks) * metadata.dt
            runtime.step(now, Observation(now, {"arm": np.full(7, 0.1)}, {"gripper": 0.04}, images))
        return (time.perf_counter() - start) / n

    def run_model(n):
        start = time.perf_counter()
        for _ in range(n):
            with torch.inference_mode():
                model(*tensors)
        return (time.perf_counter() - start) / n
    run_runtime(10), run_model(10)  # warm-up
    assert runtime.stats.inferences == 10
    # Interleave the two so a noisy neighbour hits both alike.
    rt, md = [], []
    for _ in range(5):
        rt.append(run_runtime(steps // 5))
        md.append(run_model(steps // 5))
    assert runtime.stats.inferences == 10 + 5 * (steps // 5), runtime.stats  # one inference per step
    return float(np.median(rt)), float(np.median(md))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measuring time per DDS run")
    parser.add_argument("--steps", type=int, default=200, help="in-process steps per model")
    args = parser.parse_args()
    isolate_ros_domain()
    import rclpy
    import torch
    from r2s2r.policy.models import ConvPolicy

    print(f"policy loop; {machine_line()}; "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads)")
    cnn = cnn_model(1)
    print(f"CNN: {sum(p.numel() for p in cnn.parameters()) / 1e6:.1f} M parameters, one {IMAGE[0]}x{IMAGE[1]} camera")

    rclpy.init()
    try:
        print("\nobservation-to-command latency over DDS (policy_node, 100 Hz commands)")
        for label, use_cnn in (("trivial echo", False), ("echo + 10 M CNN", True)):
            lat = dds_latency(use_cnn, args.seconds) * 1e3
            print(f"  {label:18s} p50 {np.percentile(lat, 50):7.2f} ms   p99 {np.percentile(lat, 99):7.2f} ms"
                  f"   ({lat.size} samples)")
    finally:
        rclpy.shutdown()

    print("\nin-process runtime step (inference every step) vs the bare model call")
    layout = ActionSpace({"arm": 7}, ("gripper",))
    tiny = ConvPolicy(8, 8, 10, 0, hidden=64).eval()
    cases = (("tiny MLP", tiny, PolicyMetadata(ObservationSpace(layout.joints, layout.grippers), layout, 10.0, 10)),
             ("10 M CNN", cnn, PolicyMetadata(ObservationSpace(layout.joints, layout.grippers, {"scene": IMAGE}),
                                              layout, 10.0, 10)))
    for label, model, metadata in cases:
        step, direct = overhead(model, metadata, args.steps)
        print(f"  {label:10s} runtime {step * 1e6:9.1f} us/step   model {direct * 1e6:9.1f} us/call   "
              f"ratio {step / direct:5.2f}   overhead {(step - direct) * 1e6:7.1f} us")


if __name__ == "__main__":
    main()
