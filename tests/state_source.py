"""A joint_states source for recorder tests, run as `python -m tests.state_source COUNT RATE_HZ
[--clock-start S]`. Until a line arrives on stdin it sends probes (position -1) every 50 ms, so
the test can see the recorder receive before anything counts; then COUNT JointState messages
paced at RATE_HZ by the wall clock, each with its index as its one position and a header stamp
of exactly start + index / RATE_HZ, so a recording shows every message it lost. With
--clock-start it also publishes /clock at those times (a twin that has been running S seconds),
and afterwards holds the clock at the last of them until a second line arrives, then moves it
on a second every 50 ms (so a recorder with a duration stops when the test says). It exits once
every message is acknowledged and, with a clock, stdin is closed."""

from __future__ import annotations

import argparse
import os
import select
import sys
import time

import rclpy
from rclpy.duration import Duration
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from r2s2r.contract import convert, qos


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("count", type=int)
    parser.add_argument("rate_hz", type=float)
    parser.add_argument("--clock-start", type=float, default=None)
    args = parser.parse_args()
    rclpy.init()
    node = rclpy.create_node("state_source")
    states = node.create_publisher(JointState, "joint_states", qos.STATE)
    clock = node.create_publisher(Clock, "/clock", qos.CLOCK) if args.clock_start is not None else None
    deadline = time.monotonic() + 120.0
    while states.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            print("no subscriber on joint_states within 120 s", file=sys.stderr)
            return 2
        time.sleep(0.01)
    start = args.clock_start or 0.0

    def send(index: int, seconds: float) -> None:
        stamp = convert.to_time(seconds)
        if clock is not None:
            clock.publish(Clock(clock=stamp))
        msg = JointState(name=["index"], position=[float(index)])
        msg.header.stamp = stamp
        states.publish(msg)

    while not select.select([sys.stdin], [], [], 0.05)[0]:
        if time.monotonic() > deadline:
            print("no go on stdin within 120 s", file=sys.stderr)
            return 2
        send(-1, start)
    os.read(sys.stdin.fileno(), 1024)  # the "go" (unbuffered: select sees what is left)
    began = time.monotonic()
    for i in range(args.count):
        pause = began + i / args.rate_hz - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        send(i, start + i / args.rate_hz)
    if not states.wait_for_all_acked(Duration(seconds=60)):
        print("not every message was acknowledged within 60 s", file=sys.stderr)
        return 3
    print(f"published {args.count}", flush=True)
    if clock is not None:
        last = start + (args.count - 1) / args.rate_hz
        advancing = False
        while True:
            if select.select([sys.stdin], [], [], 0.05)[0]:
                if not os.read(sys.stdin.fileno(), 1024):
                    break  # stdin closed: done
                advancing = True
            if advancing:
                last += 1.0
            clock.publish(Clock(clock=convert.to_time(last)))
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
