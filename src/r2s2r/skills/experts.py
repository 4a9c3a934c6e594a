"""The scripted experts of the evaluation tasks, `scripted:<task>` through the policy layer.

Each is a StageExpert planned from privileged object poses (Observation.objects) and the
task's *nominal* geometry, as a hand-written controller would be. Their weak spots are real
and deliberate, the first targets of failure search:

- the gripper keeps the yaw it has at home: a block turned far enough that its width across
  the fingers exceeds their opening is not grasped;
- the grip closes to the nominal width minus a fixed squeeze: a smaller object is held
  loosely or not at all, a slippery or heavy one slides out;
- goals beyond the arm's reach are approached as near as IK gets, then given up;
- the cup goes in along a fixed line and the door is pushed shut along an arc from where it
  is seen: a door opened too little is in the cup's or the arm's way.

Parameters (all optional): `speed` (m/s, average TCP speed), `control_rate_hz`,
`chunk_length`, `squeeze` (m the grip closes past the nominal width), `grasp_retries` (how
often a failed grasp is tried again, default 0), `grasp_offset` (franka_block_in_bowl: m above
the object's centre the fingers close at; more is a shallower grasp), `task` (name or path of
the task whose nominal geometry is used; default the expert's own), `feedback`
(franka_block_in_bowl: the expert as a law of the state, which acts from any state; the
relabeller of `r2s2r collect --relabel`), `grasp_yaw` (franka_block_in_bowl: `home`, the
default, or `object`: the grasp turns to close across the block's narrowest side), `skills`
(a SKILLS.yaml of `r2s2r skills refine`: rules that choose these parameters from what the robot
sees at the start; skills.rules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from r2s2r.config import Section
from r2s2r.eval.tasks import Task, load_task
from r2s2r.policy.types import ActionChunk, Observation, ObservationSpace, PolicyMetadata
from r2s2r.robots import get_robot
from r2s2r.skills.ik import ArmIK, quat_to_mat
from r2s2r.skills.rules import RuleExpert, read_skills
from r2s2r.skills.stages import Follow, Grip, Hold, Move, Pose, StageExpert, Verify, top_down, yaw_of

CHUNK = 2
_KEYS = {"speed", "control_rate_hz", "chunk_length", "squeeze", "grasp_retries", "grasp_offset", "task", "feedback",
         "grasp_yaw", "skills"}
GRASP_YAWS = ("home", "object")
GRASP_S = 0.6  # how long the gripper closes before the arm lifts
LEAD_S = 0.3  # how far a feedback command leads the TCP: the expert's own commands lead it 0.15-0.3 s
APPROACH_S = 0.25  # a feedback command slows within this many seconds' travel of its goal


def _metadata(task: Task, params: Section, name: str) -> PolicyMetadata:
    robot = get_robot(task.robot)
    base = PolicyMetadata.for_robot(robot)
    rate = params.number("control_rate_hz", task.control_rate_hz, positive=True)
    chunk = params.integer("chunk_length", CHUNK, minimum=1)
    return PolicyMetadata(ObservationSpace(base.observation.joints, base.observation.grippers), base.action,
                          rate, chunk, name)


def _object_spec(task: Task, name: str):
    return next(o for o in task.base_scene.objects if o.name == name)


def _width_across_fingers(obj, yaw: float) -> float:
    """The nominal object's extent along the fingers' closing axis for a top grasp at `yaw`."""
    if obj.shape == "box":
        rel = yaw - yaw_of(obj.quat)
        return abs(math.sin(rel)) * obj.size[0] + abs(math.cos(rel)) * obj.size[1]
    return 2 * obj.size[0]


def _squeezed(width: float, squeeze: float, gripper) -> float:
    return max(gripper.opening_range[0], width - squeeze)


# -- franka_block_in_bowl ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _BlockInBowl:
    """What franka_block_in_bowl's expert plans with, from the task's nominal geometry and its
    parameters: shared by the stage expert and its state-feedback form."""

    robot: object
    obj_name: str
    bowl_name: str
    obj: object
    bowl: object
    gripper: object
    rot: np.ndarray
    grip: float  # the closed gripper's target opening
    offset: float  # above the object's centre the fingers close at
    squeeze: float = 0.01
    turn: bool = False  # grasp_yaw "object": the grasp turns to the object's narrowest side
    lift: float = 0.15
    hover: float = 0.12

    @classmethod
    def of(cls, task: Task, params: Section) -> "_BlockInBowl":
        robot = get_robot(task.robot)
        logic = task.params
        obj = _object_spec(task, logic["object"])
        gripper = robot.grippers[0]
        yaw = 0.0  # the home yaw, kept throughout (see the module docstring)
        squeeze = params.number("squeeze", 0.01, minimum=0.0)
        offset = params.number("grasp_offset", 0.0, minimum=-obj.half_height, maximum=obj.half_height)
        turn = params.string("grasp_yaw", "home", choices=GRASP_YAWS) == "object"
        return cls(robot, logic["object"], logic["container"], obj,
                   next(f for f in task.base_scene.fixtures if f.name == logic["container"]), gripper,
                   top_down(yaw), _squeezed(_width_across_fingers(obj, yaw), squeeze, gripper), offset, squeeze,
                   turn)

    def grasp(self, obj_quat) -> tuple[np.ndarray, float]:
        """The grasp's TCP rotation and closed opening for the object seen at `obj_quat`: the home
        yaw, or (turn) the yaw within a quarter turn of home that closes across its narrowest side."""
        if not self.turn:
            return self.rot, self.grip
        turned = yaw_of(obj_quat) - yaw_of(self.obj.quat)  # from its nominal pose
        candidates = [math.remainder(turned + k * math.pi / 2, 2 * math.pi) for k in range(4)]
        candidates = [y for y in candidates if abs(y) <= math.pi / 2 + 1e-9]
        yaw = min(candidates, key=lambda y: (round(_width_across_fingers(self.obj, y - turned), 4), abs(y)))
        return top_down(yaw), _squeezed(_width_across_fingers(self.obj, yaw - turned), self.squeeze, self.gripper)

    @property
    def opened(self) -> float:
        return self.gripper.opening_range[1]

    def carry_height(self, bowl_pos) -> float:
        return bowl_pos[2] + self.bowl.height + self.obj.half_height + 0.1

    def place_height(self, bowl_pos) -> float:
        return bowl_pos[2] + self.bowl.height + self.obj.half_height + 0.015


def block_in_bowl_expert(task: Task, params: Section, name: str) -> StageExpert:
    g = _BlockInBowl.of(task, params)
    arm, obj_name, bowl_name = "arm", g.obj_name, g.bowl_name
    retries = params.integer("grasp_retries", 0, minimum=0)

    def above_object(e, obs):
        pos, quat = e.object(obs, obj_name)
        e.memory["rot"], e.memory["grip"] = g.grasp(quat)  # planned from where the object is seen
        return Pose(pos + [0, 0, g.hover], e.memory["rot"])

    def at_object(e, obs):
        pos = e.object(obs, obj_name)[0]
        e.memory["grasp_z"] = pos[2]
        return Pose(pos + [0, 0, g.offset], e.memory["rot"])

    def lifted(e, obs):
        return e.arms[arm].pose.moved(dz=g.lift)

    def holding(e, obs):
        pos = e.object(obs, obj_name)[0]
        tcp = e.tcp(arm, obs).pos
        return pos[2] > e.memory["grasp_z"] + g.lift / 2 and np.linalg.norm(pos - tcp) < 0.05

    def above_bowl(e, obs):
        centre = e.object(obs, bowl_name)[0]
        return Pose(np.array([centre[0], centre[1], g.carry_height(centre)]), e.memory["rot"])

    def into_bowl(e, obs):
        centre = e.object(obs, bowl_name)[0]
        return Pose(np.array([centre[0], centre[1], g.place_height(centre)]), e.memory["rot"])

    stages = [
        Move("approach", {arm: above_object}, grippers={arm: g.opened}),
        Move("descend", {arm: at_object}, speed=0.12),
        Grip("grasp", {arm: lambda e, obs: e.memory["grip"]}, duration=GRASP_S),
        Move("lift", {arm: lifted}, speed=0.15),
        Verify("verify_grasp", holding, retry="approach", retries=retries, give_up="give_up"),
        Move("move", {arm: above_bowl}),
        Move("place", {arm: into_bowl}, speed=0.12),
        Grip("release", {arm: g.opened}, duration=0.4),
        Move("retreat", {arm: lambda e, obs: e.arms[arm].pose.moved(dz=0.1)}, speed=0.15),
        Hold("done"),
        Move("give_up", {arm: lambda e, obs: e.arms[arm].pose.moved(dz=0.05)}, grippers={arm: g.opened}),
        Hold("gave_up"),
    ]
    return StageExpert(_metadata(task, params, name), g.robot, {arm: g.gripper.name}, stages,
                       speed=params.number("speed", 0.25, positive=True))


class BlockInBowlFeedback:
    """franka_block_in_bowl's expert as a law of the state: from any state of the task (the
    arm's joints, the gripper's opening, the block's and the bowl's poses) it picks the stage
    that applies and commands the next step of it, so it can label the states another policy
    visits with what the expert would do there (`r2s2r collect --relabel`, DAgger).

    The stages are the stage expert's, with the same goals and speeds; each applies when:

    - retreat: the block rests in the bowl and the gripper does not hold it;
    - lift, move, place, release: the gripper holds the block (closed on it, near the TCP, and
      either lifted or past the grasp's dwell), in that order by where the TCP is;
    - grasp: the TCP is at the grasp pose (closing for GRASP_S, then lifting);
    - open: the gripper is closed on nothing (a missed grasp, a drop): it opens again;
    - approach (rising first when low), then descend: the rest.

    A command leads the measured TCP by LEAD_S of travel at the stage's speed, slowing within
    APPROACH_S of the goal: the lead the expert's own commands have over the arm. Its memory is
    the block's resting height (first seen) and how long the TCP has dwelt at the grasp pose.
    """

    def __init__(self, task: Task, params: Section, name: str):
        self.g = g = _BlockInBowl.of(task, params)
        if g.turn:
            raise params.error("grasp_yaw", "home: the state-feedback form keeps the home yaw", "object")
        self.metadata = _metadata(task, params, name)
        self.speed = params.number("speed", 0.25, positive=True)
        self.ik = ArmIK(g.robot, "arm")
        self.reset()

    def reset(self) -> None:
        self.rest_z: float | None = None
        self.grasp_since: float | None = None
        self.stage = ""

    def decide(self, obs: Observation) -> tuple[str, np.ndarray, float, float]:
        """(stage, TCP goal position, gripper target, speed) for the state `obs`."""
        g = self.g
        block, bowl = (np.asarray(obs.objects[n][0], float) for n in (g.obj_name, g.bowl_name))
        if self.rest_z is None:
            self.rest_z = float(block[2])
        tcp = self.ik.fk(obs.joints["arm"])[0]
        opening = float(obs.grippers[g.gripper.name])
        grasp_pose = block + [0, 0, g.offset]
        at_grasp = np.linalg.norm(tcp - grasp_pose) < 0.015 and block[2] < self.rest_z + 0.01
        if at_grasp:
            self.grasp_since = obs.stamp if self.grasp_since is None else self.grasp_since
        dwelt = self.grasp_since is not None and obs.stamp - self.grasp_since >= GRASP_S - 1e-9
        closed = opening < g.opened - 0.01
        on_block = np.linalg.norm(block - tcp) < 0.04 and opening > g.grip - 0.004  # fingers stopped by it
        held = closed and on_block and (block[2] > self.rest_z + 0.005 or dwelt)
        to_bowl = np.linalg.norm((tcp - bowl)[:2])
        in_bowl = np.linalg.norm((block - bowl)[:2]) < g.bowl.radius and block[2] < bowl[2] + g.bowl.height + 0.02
        if not at_grasp and not held:
            self.grasp_since = None
        if in_bowl and not held:
            return "retreat", np.array([tcp[0], tcp[1], g.carry_height(bowl) + 0.05]), g.opened, 0.15
        if held:
            carry, place = g.carry_height(bowl), g.place_height(bowl)
            if to_bowl > 0.015 and tcp[2] < carry - 0.03:
                return "lift", np.array([tcp[0], tcp[1], carry]), g.grip, 0.15
            if to_bowl > 0.015:
                return "move", np.array([bowl[0], bowl[1], carry]), g.grip, self.speed
            if tcp[2] > place + 0.01:
                return "place", np.array([bowl[0], bowl[1], place]), g.grip, 0.12
            return "release", np.array([bowl[0], bowl[1], place]), g.opened, 0.12
        if at_grasp:
            return "grasp", grasp_pose, g.grip, 0.12
        if closed:
            return "open", np.array([tcp[0], tcp[1], max(tcp[2], block[2] + 0.05)]), g.opened, 0.12
        above = block + [0, 0, g.hover]
        off_axis = np.linalg.norm((tcp - block)[:2])
        if off_axis > 0.03 and tcp[2] < above[2] - 0.03:  # low and aside: up first, clear of the block
            return "approach", np.array([tcp[0], tcp[1], above[2]]), g.opened, self.speed
        if off_axis > 0.02:  # nearer, it goes down, aligning on the way
            return "approach", above, g.opened, self.speed
        return "descend", grasp_pose, g.opened, 0.12

    def act(self, obs: Observation) -> ActionChunk:
        stage, goal, opening, speed = self.decide(obs)
        self.stage = stage
        q = np.asarray(obs.joints["arm"], float)
        tcp = self.ik.fk(q)[0]
        offset = goal - tcp
        distance = float(np.linalg.norm(offset))
        step = min(speed, distance / APPROACH_S) * LEAD_S
        target = tcp + (offset / distance * step if distance > 1e-9 else 0.0)
        q_target = self.ik.solve(target, self.g.rot, q, iterations=10).q
        md = self.metadata
        joints = {group: np.repeat(np.asarray(obs.joints[group], float)[None], md.chunk_length, 0)
                  for group in md.action.joints}
        joints["arm"] = np.repeat(q_target[None], md.chunk_length, 0)
        grippers = {name: np.full(md.chunk_length, float(obs.grippers[name])) for name in md.action.grippers}
        grippers[self.g.gripper.name] = np.full(md.chunk_length, opening)
        return ActionChunk(obs.stamp, md.dt, joints, grippers)


def block_in_bowl_feedback(task: Task, params: Section, name: str) -> BlockInBowlFeedback:
    return BlockInBowlFeedback(task, params, name)


# -- franka_cup_in_microwave -------------------------------------------------------------------------
def _door_angle(box, box_quat, door_quat) -> float:
    """The door's opening angle from the box's and the door's observed orientations."""
    rel = yaw_of(door_quat) - yaw_of(box_quat)
    return math.remainder(-box.hinge_side * rel, 2 * math.pi)


def cup_in_microwave_expert(task: Task, params: Section, name: str) -> StageExpert:
    robot = get_robot(task.robot)
    logic = task.params
    cup_name, box_name = logic["object"], logic["container"]
    cup = _object_spec(task, cup_name)
    box = next(f for f in task.base_scene.fixtures if f.name == box_name)
    arm, gripper = "arm", robot.grippers[0]
    rot = top_down(0.0)
    squeeze = params.number("squeeze", 0.01, minimum=0.0)
    retries = params.integer("grasp_retries", 0, minimum=0)
    grip = _squeezed(2 * cup.size[0], squeeze, gripper)
    cup_height = cup.size[1]
    below_top = 0.03  # the TCP grasps this far below the cup's rim
    (x0, _), _, (z0, _) = box.inner_extent
    place_depth = 0.13  # from the opening to the cup's centre
    place_side = -box.hinge_side * 0.04  # off the box's centre line, away from the hinge and the door
    carry_clearance = 0.03  # of the cup's bottom over the box's floor
    door_radius = 0.7 * box.door_width  # where along the door the hand pushes
    hand_half_thickness = 0.0315  # the Franka hand across its fingers' closing axis
    push_height = 0.2  # of the TCP above the box's floor level
    closed_angle = float(logic.get("door_closed_angle", 0.08))

    def box_frame(e, obs):
        pos, quat = e.object(obs, box_name)
        return pos, quat_to_mat(quat)

    def in_box(e, obs, local):
        pos, frame = box_frame(e, obs)
        return pos + frame @ np.asarray(local, float)

    def carry_z(e, obs):
        return e.object(obs, box_name)[0][2] + z0 + carry_clearance + cup_height - below_top

    def above_cup(e, obs):
        return Pose(e.object(obs, cup_name)[0] + [0, 0, cup_height / 2 + 0.1], rot)

    def at_cup(e, obs):
        pos = e.object(obs, cup_name)[0]
        e.memory["grasp_z"] = pos[2]
        return Pose(pos + [0, 0, cup_height / 2 - below_top], rot)

    def lifted(e, obs):
        pose = e.arms[arm].pose
        return Pose(np.array([pose.pos[0], pose.pos[1], carry_z(e, obs) + 0.02]), rot)

    def holding(e, obs):
        pos = e.object(obs, cup_name)[0]
        return pos[2] > e.memory["grasp_z"] + 0.02 and np.linalg.norm(pos - e.tcp(arm, obs).pos) < 0.08

    def box_yaw_rot(e, obs):
        return top_down(yaw_of(e.object(obs, box_name)[1]))

    def before_opening(e, obs):
        target = in_box(e, obs, (x0 - 0.1, place_side, 0.0))
        return Pose(np.array([target[0], target[1], carry_z(e, obs) + 0.02]), box_yaw_rot(e, obs))

    def inside(e, obs):
        target = in_box(e, obs, (x0 + place_depth, place_side, 0.0))
        return Pose(np.array([target[0], target[1], carry_z(e, obs)]), box_yaw_rot(e, obs))

    def set_down(e, obs):
        return e.arms[arm].pose.moved(dz=-(carry_clearance - 0.008))

    def withdraw(e, obs):
        target = in_box(e, obs, (x0 - 0.12, place_side, 0.0))
        pose = e.arms[arm].pose
        return Pose(np.array([target[0], target[1], pose.pos[2] + 0.01]), pose.rot)

    # The door: hinge at the door body's origin. The hand's broad side lies flat on the door's
    # outer face, `offset` metres off the door's mid-plane, `door_radius` out from the hinge.
    def door_pose(e, obs, angle, offset):
        hinge = e.object(obs, f"{box_name}_door")[0]
        side = box.hinge_side
        a = yaw_of(e.object(obs, box_name)[1]) - side * angle
        c, s = math.cos(a), math.sin(a)
        along = np.array([side * s, -side * c, 0.0])  # from the hinge to the door's free edge
        normal = np.array([-c, -s, 0.0])  # from the door toward the side it is pushed from
        pos = hinge + door_radius * along + offset * normal
        pos[2] = hinge[2] + push_height
        return Pose(pos, top_down(a))

    def door_now(e, obs):
        return _door_angle(box, e.object(obs, box_name)[1], e.object(obs, f"{box_name}_door")[1])

    clear = hand_half_thickness + 0.05  # off the door's mid-plane before pushing
    contact = hand_half_thickness + box.wall / 2 - 0.006  # a little into the door: it is pushed

    def over_door(e, obs):
        e.memory["door_start"] = door_now(e, obs)
        return door_pose(e, obs, e.memory["door_start"], clear).moved(dz=box.size[2] - push_height + 0.1)

    def door_side(e, obs):
        return door_pose(e, obs, e.memory["door_start"], clear)

    def on_door(e, obs):
        return door_pose(e, obs, e.memory["door_start"], contact)

    def sweep(e, obs, start):
        begin = e.memory["door_start"]

        def at(s):
            return door_pose(e, obs, begin * (1.0 - s), contact)
        return at, max(1.0, begin * door_radius / 0.12)

    def back_off(e, obs):
        a = yaw_of(e.object(obs, box_name)[1])
        return e.arms[arm].pose.moved(dx=-0.08 * math.cos(a), dy=-0.08 * math.sin(a))

    def door_closed(e, obs):
        return door_now(e, obs) < closed_angle

    def up(e, obs):
        """Straight up to clear the box (and the door) by 10 cm."""
        pose = e.arms[arm].pose
        return Pose(np.array([pose.pos[0], pose.pos[1], e.object(obs, box_name)[0][2] + box.size[2] + 0.1]),
                    pose.rot)

    def close_door(prefix: str) -> list:
        return [Move(f"{prefix}approach", {arm: over_door}, grippers={arm: gripper.opening_range[0]}),
                Move(f"{prefix}descend", {arm: door_side}),
                Move(f"{prefix}engage", {arm: on_door}, speed=0.05),
                Follow(f"{prefix}close", arm, sweep),
                Move(f"{prefix}retreat", {arm: back_off}, speed=0.15)]

    stages = [
        Move("approach", {arm: above_cup}, grippers={arm: gripper.opening_range[1]}),
        Move("descend", {arm: at_cup}, speed=0.12),
        Grip("grasp", {arm: grip}, duration=0.6),
        Move("lift", {arm: lifted}, speed=0.15),
        Verify("verify_grasp", holding, retry="approach", retries=retries, give_up="give_up"),
        Move("move", {arm: before_opening}),
        Move("insert", {arm: inside}, speed=0.15),
        Move("place", {arm: set_down}, speed=0.08),
        Grip("release", {arm: gripper.opening_range[1]}, duration=0.4),
        Move("withdraw", {arm: withdraw}, speed=0.15),
        Move("rise", {arm: up}),
        *close_door("door_"),
        Verify("verify_door", door_closed, retry="door_rise", retries=1, give_up="done"),
        Hold("done"),
        Move("door_rise", {arm: up}),
        *close_door("door_retry_"),
        Hold("retried"),
        Move("give_up", {arm: up}, grippers={arm: gripper.opening_range[1]}),
        Hold("gave_up"),
    ]
    return StageExpert(_metadata(task, params, name), robot, {arm: gripper.name}, stages,
                       speed=params.number("speed", 0.25, positive=True))


# -- aloha_cube_handover ---------------------------------------------------------------------------------
# TCP frames of a ViperX gripper: x along the fingers (the approach), y the closing axis.
_DOWN = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])  # pointing down, closing along y
_DOWN_X = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, -1.0], [-1.0, 0.0, 0.0]])  # pointing down, closing along x
_FORWARD = np.eye(3)  # pointing +x, closing along y


def cube_handover_expert(task: Task, params: Section, name: str) -> StageExpert:
    """The giver (left) picks the cube from above and presents it at the meeting point held at
    its fingertips, pointing at the taker; the taker (right) comes down on it from above with
    its fingers closing along x, on the faces the giver leaves free, then carries it to the
    bowl. Only for a giver on the left (-x) of the taker, as ALOHA's arms stand."""
    robot = get_robot(task.robot)
    logic = task.params
    cube_name, bowl_name = logic["object"], logic["container"]
    cube = _object_spec(task, cube_name)
    bowl = next(f for f in task.base_scene.fixtures if f.name == bowl_name)
    giver_gripper, taker_gripper = robot.gripper(logic["giver"]), robot.gripper(logic["taker"])
    giver, taker = logic["giver"].replace("gripper", "arm"), logic["taker"].replace("gripper", "arm")
    squeeze = params.number("squeeze", 0.01, minimum=0.0)
    retries = params.integer("grasp_retries", 0, minimum=0)
    width = _width_across_fingers(cube, 0.0)
    half = cube.size[2] / 2
    above_centre = 0.018  # the giver's TCP over the cube's centre: the cube sits at its fingertips
    meet = np.array([0.0, 0.06, 0.22])  # where the cube changes hands, centre of the cube

    def above_cube(e, obs):
        return Pose(e.object(obs, cube_name)[0] + [0, 0, 0.12], _DOWN)

    def at_cube(e, obs):
        pos = e.object(obs, cube_name)[0]
        e.memory["grasp_z"] = pos[2]
        return Pose(pos + [0, 0, above_centre], _DOWN)

    def lifted(e, obs):
        return e.arms[giver].pose.moved(dz=0.12)

    def lifted_by_giver(e, obs):
        pos = e.object(obs, cube_name)[0]
        return pos[2] > e.memory["grasp_z"] + 0.04 and np.linalg.norm(pos - e.tcp(giver, obs).pos) < 0.05

    def held_by_taker(e, obs):
        pos = e.object(obs, cube_name)[0]
        return pos[2] > meet[2] - 0.05 and np.linalg.norm(pos - e.tcp(taker, obs).pos) < 0.03

    def present(e, obs):
        return Pose(meet - [above_centre, 0, 0], _FORWARD)

    def taker_ready(e, obs):
        return Pose(meet + [0, 0, 0.12], _DOWN_X)

    def taker_at_cube(e, obs):
        return Pose(e.object(obs, cube_name)[0].copy(), _DOWN_X)

    def giver_away(e, obs):
        return e.arms[giver].pose.moved(dx=-0.12)

    def over_bowl(height):
        def goal(e, obs):
            # Where the taker holds the cube, measured once it has it, so the cube lands centred.
            held = e.memory.setdefault("held_offset", e.object(obs, cube_name)[0] - e.tcp(taker, obs).pos)
            centre = e.object(obs, bowl_name)[0]
            return Pose(centre + [0, 0, bowl.height + half + height] - held, _DOWN_X)
        return goal

    open_giver, open_taker = giver_gripper.opening_range[1], taker_gripper.opening_range[1]
    stages = [
        Move("approach", {giver: above_cube}, grippers={giver: open_giver}),
        Move("descend", {giver: at_cube}, speed=0.12),
        Grip("grasp", {giver: _squeezed(width, squeeze, giver_gripper)}, duration=0.6),
        Move("lift", {giver: lifted}, speed=0.15),
        Verify("verify_grasp", lifted_by_giver, retry="approach", retries=retries, give_up="give_up"),
        Move("present", {giver: present, taker: taker_ready}, grippers={taker: open_taker}),
        Move("reach", {taker: taker_at_cube}, speed=0.08),
        Grip("take", {taker: _squeezed(cube.size[0], squeeze, taker_gripper)}, duration=0.6),
        Grip("let_go", {giver: open_giver}, duration=0.5),
        Move("part", {giver: giver_away}, speed=0.15),
        Verify("verify_handover", held_by_taker, give_up="give_up"),
        Move("carry", {taker: over_bowl(0.08)}),
        Move("place", {taker: over_bowl(0.015)}, speed=0.1),
        Grip("release", {taker: open_taker}, duration=0.4),
        Move("retreat", {taker: lambda e, obs: e.arms[taker].pose.moved(dz=0.08)}, speed=0.15),
        Hold("done"),
        Move("give_up", {giver: lambda e, obs: e.arms[giver].pose.moved(dz=0.05)},
             grippers={giver: open_giver, taker: open_taker}),
        Hold("gave_up"),
    ]
    return StageExpert(_metadata(task, params, name), robot, {giver: giver_gripper.name, taker: taker_gripper.name},
                       stages, speed=params.number("speed", 0.25, positive=True))


FEEDBACK = {"franka_block_in_bowl": block_in_bowl_feedback}  # the experts with a state-feedback form


def _with_rules(task_name: str, task: Task, params: Section, build) -> RuleExpert:
    """The expert with the rules of the SKILLS.yaml `params.skills` (skills.rules)."""
    from pathlib import Path
    path = Path(params.string("skills"))
    if not path.is_file():
        raise params.error("skills", "a SKILLS.yaml file (r2s2r skills refine writes one)", str(path))
    skills_task, rules = read_skills(path)
    if skills_task != task_name:
        raise params.error("skills", f"rules for {task_name}; {path} holds rules for {skills_task}", str(path))
    own = {k: v for k, v in params.data.items() if k != "skills"}
    return RuleExpert(lambda use: build(task, Section({**own, **use}, params.source, params.path),
                                        f"scripted:{task_name}"), rules, get_robot(task.robot))


def _factory(task_name: str, build):
    def make(params: Section, defaults: PolicyMetadata | None):
        params.reject_unknown(_KEYS)
        task = load_task(params.string("task", task_name))
        if params.boolean("feedback", False):
            if task_name not in FEEDBACK:
                raise params.error("feedback", f"false: only {', '.join(FEEDBACK)} have a state-feedback form", True)
            return FEEDBACK[task_name](task, params, f"scripted:{task_name}")
        if params.has("skills"):
            return _with_rules(task_name, task, params, build)
        return build(task, params, f"scripted:{task_name}")
    make.__name__ = f"make_{task_name}_expert"
    return make


# The tasks' experts, registered as scripted policies named as their tasks (pyproject.toml).
franka_block_in_bowl = _factory("franka_block_in_bowl", block_in_bowl_expert)
franka_cup_in_microwave = _factory("franka_cup_in_microwave", cup_in_microwave_expert)
aloha_cube_handover = _factory("aloha_cube_handover", cube_handover_expert)
