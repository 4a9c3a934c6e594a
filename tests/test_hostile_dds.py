"""A hostile client over DDS, against every robot's twin: its stack (config/stacks/<robot>_sim.yaml, franka_fr3_sim
for the FR3) in a process of its own, and a RobotClient that sends what tests/backend_helpers.hostile_round
makes (valid far targets, edges, NaN, Inf, wrong lengths, out-of-limit values, 1e9, bad
trajectories and gripper openings) on every group's and gripper's topics, then falls silent, then
streams a far target and presses the estop while the arm moves, and carries on sending.

Each twin runs its stack's own scene without its free objects (its table and everything fixed),
and the valid targets go anywhere within the joint limits: the command path refuses those that
would touch the cell or the robot itself and stops short motions that would (sim.collision), so
no contact breaks a bound. What moves is not an obstacle to the check (docs/safety.md): an arm
swung at speed into a free object strikes it, and the strike breaks the bounds (ALOHA's wrist
once measured 25x its acceleration limit on the stack's own table and objects).

What the client sees on joint_states (every message, by its header stamp, on the twin's clock):
the joints never move faster than the datasheet allows (beyond the servos' overshoot) nor
accelerate faster than the spec (but where fingers or two hands touch, as the guard lets slow
motion do: the test's valid targets keep them clear, not the paths between; nothing else
touches), the arm
comes to rest after the silence and after the estop within the stopping time plus the servos'
settling and then stays put while every command is dropped; diagnostics report the rejections.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
import yaml
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from r2s2r.contract import Topics, qos
from r2s2r.robots import get_robot
from r2s2r.sim.collision import guard_for
from r2s2r.waiting import wait_for
from tests.backend_helpers import COMMAND_PERIOD_S, REPO, HostileCommand, clear_far_target, hostile_round
from tests.test_collision_guard import stack_scene, stack_scene_path
from tests.test_twin_servos import SPEED_TOLERANCE  # the servos' measured overshoot, justified there

ROBOTS = ("aloha", "flexiv_rizon4", "franka_fr3", "rby1", "xarm7")  # each twin's stack: config/stacks/<robot>_sim.yaml
STREAM_S = 2.5  # of hostile commands, on the twin's clock
BURST_S = 0.4  # a far target streamed this long before the estop, so that it meets a moving arm
HOLD_S = 0.8  # how long a stopped arm is watched for staying put
STILL_RAD = 1e-4  # servo noise of a twin at rest: a joint that moves less than this stands still
# How long before and after a sample that touches the impact may show in the velocities: at 50 Hz
# (ALOHA) a touch may begin between samples, and in process an ALOHA wrist still measured 20x its
# limit 40 ms after its last touching sample, the servos catching up; 0.1 s left every free
# stretch of 8 touching streams (ALOHA, RB-Y1) within 0.81x.
TOUCH_BEFORE_S, TOUCH_AFTER_S = 0.04, 0.1
# Kinds a twin never hears of: a topic of a group or gripper the robot lacks has no subscriber.
UNHEARD = ("unknown_group", "unknown_gripper")


class JointStateLog:
    """Every joint_states message the client receives: header stamp, positions and velocities
    of the robot's joints (in robot.joint_names order), and each gripper's opening."""

    def __init__(self, node, robot):
        self.joint_names = tuple(robot.joint_names)
        self._grippers = [g.joints for g in robot.grippers]
        self._lock = threading.Lock()
        self._stamps, self._positions, self._velocities, self._openings = [], [], [], []
        self._index = self._finger_index = None
        node.create_subscription(JointState, Topics.JOINT_STATES, self._on_message, qos.STATE)

    def _on_message(self, msg: JointState) -> None:
        if self._index is None:
            names = list(msg.name)
            self._index = [names.index(j) for j in self.joint_names]
            self._finger_index = [[names.index(j) for j in joints] for joints in self._grippers]
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        position = np.asarray(msg.position)
        with self._lock:
            self._stamps.append(stamp)
            self._positions.append(position[self._index])
            self._openings.append([position[index].sum() for index in self._finger_index])
            self._velocities.append(np.asarray(msg.velocity)[self._index] if len(msg.velocity) else
                                    np.full(len(self._index), np.nan))

    def latest(self) -> float:
        with self._lock:
            return self._stamps[-1] if self._stamps else -math.inf

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with self._lock:
            return np.array(self._stamps), np.array(self._positions), np.array(self._velocities)

    def openings(self, count: int) -> np.ndarray:
        """The grippers' openings of the first `count` messages (those of an earlier arrays())."""
        with self._lock:
            return np.array(self._openings[:count]).reshape(count, len(self._grippers))

    def wait_until(self, stamp: float, timeout: float) -> None:
        """Until a message stamped `stamp` or later has come (the twin's clock may run slower than the wall's)."""
        assert wait_for(lambda: self.latest() >= stamp, timeout), \
            f"joint_states stopped at {self.latest():.3f} s, short of {stamp:.3f} s"


def publish(client, command) -> None:
    if command.channel == "positions":
        client.send_positions(command.target, command.values, streaming=True)  # the watchdog's topic
    elif command.channel == "trajectory":
        client.send_trajectory(command.target, command.names, command.times, command.values)
    else:
        client.send_gripper(command.target, list(command.values))


def stream_until(client, log: JointStateLog, until: float, make_round, timeout: float = 60.0) -> None:
    """Publish `make_round()`'s commands every COMMAND_PERIOD_S of wall time until joint_states
    reach `until` on the twin's clock (pacing, not synchronisation: the stamps decide the end)."""
    deadline = time.monotonic() + timeout
    while log.latest() < until:
        assert time.monotonic() < deadline, f"joint_states stopped at {log.latest():.3f} s, short of {until:.3f} s"
        for command in make_round():
            publish(client, command)
        time.sleep(COMMAND_PERIOD_S)  # pacing, as a client streaming at 100 Hz


def swing(stamps, positions, start: float, end: float) -> np.ndarray:
    window = positions[(stamps >= start) & (stamps <= end)]
    assert len(window) >= 5, f"only {len(window)} joint_states from {start:.3f} to {end:.3f} s"
    return np.ptp(window, axis=0)


def fixed_scene(robot_name: str, folder) -> str:
    """The stack's scene file with only its fixed objects, written to `folder`."""
    data = yaml.safe_load((REPO / stack_scene_path(robot_name)).read_text())
    data["objects"] = [o for o in data.get("objects") or [] if o.get("fixed")]
    path = folder / f"{robot_name}_fixed.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def stack_twin(robot_name: str):
    """The SimHardware of the robot's sim stack's scene, connected (for its limits and servos)."""
    from r2s2r.hardware.sim import SimHardware
    hardware = SimHardware(stack_scene(robot_name))
    hardware.on_configure()
    return hardware


def twin_command_limits(robot, hardware):
    """The limits the twin's driver commands with (SimHardware.command_limits narrows the datasheet's
    where its servos need it) and how long its servos take, once the setpoints stop, to settle within
    STILL_RAD: their lag at full speed, (kv + damping) / kp x vmax, decaying at that time constant,
    after the period over which the drives interpolate a setpoint."""
    from r2s2r.hardware.safety import SafetyLimits
    limits = hardware.command_limits(SafetyLimits.of(robot))
    model = hardware.twin.model
    kp = np.array([model.actuator(j).gainprm[0] for j in robot.joint_names])
    kv = np.array([-model.actuator(j).biasprm[2] + model.dof_damping[model.joint(j).dofadr[0]]
                   for j in robot.joint_names])
    lag = kv / kp * limits.velocity
    settle = float(np.max(kv / kp * np.log(np.maximum(lag / STILL_RAD, 1.0))))
    return limits, settle + 1.0 / robot.control_rate_hz + 0.2


def driver_status(client, robot_name: str, key: str, since: float = -math.inf, timeout: float = 60.0) -> dict:
    """The newest diagnostics of this robot's driver that carry `key` and were published at
    `since` or later on the robot's clock. The newest status on the topic may be an earlier test's
    driver's last one, or this driver's from before its loop ran, or one a second old."""
    found = {}

    def ready() -> bool:
        values = client.diagnostic_values()
        if values.get("robot") == robot_name and values.get(key, "nan") not in ("", "nan") and \
                float(values.get("time", "nan")) >= since:
            found.update(values)
            return True
        return False
    assert wait_for(ready, timeout), \
        f"no diagnostics of the {robot_name} driver with {key} from {since:.3f} s on: {client.diagnostic_values()}"
    return found


def settled(stamps, positions, start: float, end: float) -> float:
    """How long after `start` the joints last moved by STILL_RAD or more from where they are at
    `end` (for the report: how long the servos took to come to rest)."""
    window = (stamps >= start) & (stamps <= end)
    final = positions[window][-1]
    away = np.any(np.abs(positions[window] - final) >= STILL_RAD / 2, axis=1)
    return float(stamps[window][away].max() - start) if away.any() else 0.0


@pytest.mark.parametrize("robot_name", ROBOTS)
def test_a_hostile_client_is_refused_and_the_twin_comes_to_rest(robot_name, stack_process, ros_client, tmp_path):
    robot = get_robot(robot_name)
    hardware = stack_twin(robot_name)
    twin_limits, settle_s = twin_command_limits(robot, hardware)
    names, limits = robot.joint_names, robot.limits
    client = ros_client()
    # Clients of one test session share a DDS participant: the previous robot's driver must be gone.
    assert wait_for(lambda: client.node.count_publishers(Topics.JOINT_STATES) == 0, 30), "an earlier driver lingers"
    log = JointStateLog(client.node, robot)
    # The cameras are off: rendering would only take CPU from the twin on a small machine.
    proc = stack_process(f"config/stacks/{robot_name}_sim.yaml", "camera_rate_hz:=0.0",
                         f"scene:={fixed_scene(robot_name, tmp_path)}")
    assert wait_for(lambda: client.joints is not None or proc.proc.poll() is not None, 60) and client.joints, \
        f"no joint_states within 60 s:\n{proc.output[-3000:]}"
    for group in robot.group_names:
        assert client.wait_for_subscriber(Topics.streaming_commands(group), Float64MultiArray, 30)
        assert client.wait_for_subscriber(Topics.joint_trajectory(group), JointTrajectory, 30)
    for gripper in robot.grippers:
        assert client.wait_for_subscriber(Topics.gripper_commands(gripper.name), Float64MultiArray, 30)
    assert client.wait_for_subscriber(Topics.ESTOP, Bool, 30)
    rng = np.random.default_rng(ROBOTS.index(robot_name))
    watchdog_s = 0.5  # driver_node's default
    stopping_time = float(np.max(twin_limits.velocity / twin_limits.acceleration))
    rest_after = watchdog_s + stopping_time + settle_s

    guard = guard_for(hardware.scene)

    sent_targets: dict[str, tuple] = {}  # per group: its columns in names, the last valid target sent
    sent_openings: dict[int, float] = {}  # and per gripper

    def clear_of_the_cell(command) -> bool:
        """Whether a valid command keeps every link, fingers too, outside the margins, with the other
        groups at the targets last sent to them and each gripper as wide as it is or was last sent
        (what the driver may be moving them to). The check lets fingers and hands touch slowly (a
        grasp near the table, a handover); that is contact, and its impact is beyond any
        acceleration bound (a finger set on the table took an RB-Y1 wrist to 8x its limit in
        process, one hand opened into the other took ALOHA's to 25x), so the valid commands here
        keep fingers and hands clear, as at speed."""
        joints = client.joints
        if not command.valid or joints is None or command.target not in robot.group_names + \
                tuple(g.name for g in robot.grippers):
            return True
        pose = joints.positions_of(names)
        for columns, values in sent_targets.values():
            pose[columns] = values
        measured = [joints.positions_of(g.joints).sum() for g in robot.grippers]
        openings = np.array([max(m, sent_openings.get(i, m)) for i, m in enumerate(measured)])
        if command.channel == "gripper":
            k = [g.name for g in robot.grippers].index(command.target)
            sweep = [openings.copy() for _ in range(9)]
            for share, row in zip(np.linspace(0.0, 1.0, 9), sweep):
                row[k] = measured[k] + share * (float(command.values[0]) - measured[k])
            if all(guard.clearance(pose, row, slow=False).clear for row in sweep):
                sent_openings[k] = float(command.values[0])
                return True
            return False
        columns = [names.index(j) for j in (command.names or robot.group(command.target).joints)]
        for row in np.atleast_2d(command.values):
            candidate = pose.copy()
            candidate[columns] = row
            if not guard.clearance(candidate, openings, slow=False).clear:
                return False
        sent_targets[command.target] = (columns, np.atleast_2d(command.values)[-1])
        return True

    def hostile(trajectories: bool):
        return lambda: [c for c in hostile_round(robot, rng, trajectories, wire=True)
                        if c.kind not in UNHEARD and clear_of_the_cell(c)]

    # The log subscribes on its own: its first message may come after the client's.
    assert wait_for(lambda: log.latest() > -math.inf, 60), "no joint_states on the test's own subscription"
    # The hostile stream (trajectories in its first half only: it ends on watched streaming targets).
    start = log.latest()
    stream_until(client, log, start + STREAM_S / 2, hostile(True))
    stream_until(client, log, start + STREAM_S, hostile(False))
    # Silence: at rest within the watchdog's grace, the stopping time and the servos' settling,
    # counted from the last command the driver took, on the robot's clock (a busy machine may
    # deliver the stream's last messages late).
    client_end = log.latest()
    log.wait_until(client_end + rest_after + HOLD_S, 60)  # seconds: every message has come, diagnostics say so
    stream_end = float(driver_status(client, robot_name, "last_command_at", client_end + rest_after)["last_command_at"])
    assert stream_end > client_end - STREAM_S, (stream_end, client_end)
    log.wait_until(stream_end + rest_after + HOLD_S, 60)
    # Diagnostics (published once a second) count the stream's rejections by kind.
    rejections = [f"rejected.{group}_position" for group in robot.group_names]
    def all_kinds_rejected() -> bool:
        values = client.diagnostic_values()
        return values.get("robot") == robot_name and all(int(values.get(key, 0)) > 0 for key in rejections)
    assert wait_for(all_kinds_rejected, 10), client.diagnostic_values()

    # A far target for every group, then the estop while the arm moves there; the client carries on.
    stamps, positions, _ = log.arrays()
    openings = [client.joints.positions_of(g.joints).sum() for g in robot.grippers]
    far = clear_far_target(robot, hardware.scene, positions[-1], twin_limits, rng, openings, 1.0 / robot.control_rate_hz)
    far_targets = [HostileCommand("positions", g.name, "far", True, far[[names.index(j) for j in g.joints]])
                   for g in robot.groups]
    burst_start = log.latest()
    stream_until(client, log, burst_start + BURST_S, lambda: far_targets)
    # On a loaded host DDS may hand the far targets over late: the estop waits until the arm moves.
    deadline = time.monotonic() + 60.0
    while True:
        stamps, positions, _ = log.arrays()
        window = positions[stamps >= burst_start]
        if len(window) >= 2 and np.ptp(window, axis=0).max() > 0.05:
            break
        assert time.monotonic() < deadline, "the far target never moved the arm"
        stream_until(client, log, log.latest() + 0.1, lambda: far_targets)
    rejected_before_estop = int(driver_status(client, robot_name, "commands_rejected")["commands_rejected"])
    client.estop(True)
    # When the driver latched it, on the robot's clock: DDS may deliver the estop late on a busy machine.
    estop_at = float(driver_status(client, robot_name, "estop_latched_at", burst_start)["estop_latched_at"])
    stream_until(client, log, estop_at + stopping_time + settle_s + HOLD_S, lambda: far_targets + hostile(True)())
    assert proc.proc.poll() is None, proc.output[-3000:]

    stamps, positions, velocities = log.arrays()
    # Speeds, from the positions between messages and as the twin reports them.
    ascending = np.diff(stamps) > 0
    measured = np.abs(np.diff(positions, axis=0)[ascending] / np.diff(stamps)[ascending][:, None])
    from_positions = measured.max(axis=0) / limits.velocity
    from_velocities = np.nanmax(np.abs(velocities), axis=0) / limits.velocity
    # Where the arm touched, from the measured poses against the cell's model. Slowly a finger, or
    # two hands, may touch, and the impact is beyond any bound (docs/safety.md); nothing else may,
    # and away from those touches the accelerations hold.
    contacts = [guard.contact(q, o) for q, o in zip(positions, log.openings(len(stamps)))]
    forbidden = sorted({found.describe() for found, kind in contacts if kind == "link"})
    touch_stamps = stamps[[bool(kind) for _, kind in contacts]]
    near_touch = np.array([np.any((touch_stamps - t <= TOUCH_BEFORE_S) & (t - touch_stamps <= TOUCH_AFTER_S))
                           for t in stamps])
    touches = ", ".join(sorted({f"{found.robot_body} on {found.other}" for found, kind in contacts if kind}))
    accelerations = np.abs(np.diff(velocities, axis=0)[ascending] / np.diff(stamps)[ascending][:, None])
    accelerations[(near_touch[:-1] | near_touch[1:])[ascending]] = np.nan
    from_accelerations = np.nanmax(accelerations, axis=0) / limits.acceleration
    moving = swing(stamps, positions, burst_start, estop_at)
    silence_end = stream_end + rest_after + HOLD_S
    after_silence = swing(stamps, positions, stream_end + rest_after, silence_end)
    after_estop = swing(stamps, positions, estop_at + stopping_time + settle_s, stamps[-1])
    # When the worst acceleration came: in the stream, the silence, the far target or after the estop.
    worst_at = float(stamps[1:][ascending][np.nanargmax(np.nanmax(accelerations / limits.acceleration, axis=1))])
    phase = next(name for name, end in (("stream", stream_end), ("silence", burst_start), ("far target", estop_at),
                                        ("estop", math.inf)) if worst_at <= end)
    worst_joint = int(np.argmax(from_accelerations))
    at = positions[np.searchsorted(stamps, worst_at), worst_joint]  # near a limit: the stop, not a contact?
    room = min(at - limits.lower[worst_joint], limits.upper[worst_joint] - at)
    report = (f"{robot_name}: worst speed / datasheet limit from positions {from_positions.max():.3f} "
              f"({names[int(np.argmax(from_positions))]}), from reported velocities {from_velocities.max():.3f} "
              f"({names[int(np.argmax(from_velocities))]}); worst acceleration / spec {from_accelerations.max():.3f} "
              f"({names[worst_joint]}, {worst_at - start:.3f} s in, {phase}, {room:.4f} rad from a limit); "
              f"still (within {STILL_RAD} rad) "
              f"{settled(stamps, positions, stream_end, silence_end):.2f} s after the stream "
              f"(allowed {rest_after:.2f}) and {settled(stamps, positions, estop_at, stamps[-1]):.2f} s after the "
              f"estop (allowed {stopping_time + settle_s:.2f}); {len(touch_stamps)} samples touching"
              f"{' (' + touches + ')' if touches else ''}")
    print(report)
    assert moving.max() > 0.05, f"the arm should be moving when the estop comes: {moving}"
    assert not forbidden, f"{robot_name}: links other than fingers touched: {forbidden}; {report}"
    assert np.all(after_silence < STILL_RAD), \
        f"{robot_name}: {rest_after:.2f} s after the hostile stream the joints still move by {after_silence} rad; " \
        f"{report}"
    assert np.all(after_estop < STILL_RAD), \
        f"{robot_name}: {stopping_time + settle_s:.2f} s after the estop, with commands refused, the joints still " \
        f"move by {after_estop} rad; {report}"
    assert np.all(from_positions <= 1 + SPEED_TOLERANCE) and np.all(from_velocities <= 1 + SPEED_TOLERANCE), report
    assert np.all(from_accelerations <= 1.0), report

    # Diagnostics: the estop latched, and the commands sent during the latch counted as rejected.
    def latched(values):
        return values.get("robot") == robot_name and values.get("mode") == "estop" and \
            int(values.get("commands_rejected", 0)) > rejected_before_estop + 10
    assert wait_for(lambda: latched(client.diagnostic_values()), 10), \
        {key: client.diagnostic_values().get(key) for key in ("mode", "message", "commands_rejected")} | \
        {"commands_rejected before the estop": rejected_before_estop}
