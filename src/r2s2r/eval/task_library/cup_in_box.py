"""Place an object inside a hinged_box fixture through its open door, then close the door.

Success: the object stands upright inside the box's cavity, no finger touches it, and the
door is closed (opening angle below `door_closed_angle`). Margin, in metres, is the smallest
of: the object's clearance from the cavity's side, back and front planes and ceiling (its
centre inset by its radius); its uprightness (half its height times max_tilt - tilt);
the fingers' clearance (up to 5 cm); and the door's free edge: (door_closed_angle - angle)
times the door's width.

Failure stages, first that applies: collision (the robot pressed on the table or the box's
walls harder than `collision_force`; pushing the door is not a collision), door_not_closed
(the object is in, upright and let go, the door is not closed), knocked_over (the object lies
tilted past `max_tilt`), out_of_reach, missed_grasp, slip_or_drop, missed_place (let go
outside the box), timeout (still held).
"""

from __future__ import annotations

import math


from r2s2r.eval.task_library.common import (COMMON_KEYS, CollisionTracker, ObjectTracker, PlaceAndSettle, SceneIndex,
                                            finger_clearance, grasp_stage, read_common)
from r2s2r.eval.tasks import Outcome, TaskLogic


class CupInBox(PlaceAndSettle, TaskLogic):
    def __init__(self, task, params):
        super().__init__(task, params)
        params.reject_unknown(COMMON_KEYS | {"object", "container", "door_closed_angle", "max_tilt"})
        self.limits = read_common(params)
        scene = task.base_scene
        self.object = params.string("object", choices=[o.name for o in scene.objects])
        boxes = [f.name for f in scene.fixtures if f.kind == "hinged_box"]
        if not boxes:
            raise params.error("container", "a hinged_box fixture in the task's scene (it has none)")
        self.container = params.string("container", choices=boxes)
        self.closed_angle = params.number("door_closed_angle", 0.08, positive=True)
        self.max_tilt = params.number("max_tilt", 0.5, positive=True, maximum=math.pi / 2)
        self._settled_since: float | None = None

    def start(self, twin) -> None:
        m = twin.model
        self.index = SceneIndex(twin, pushable=(f"{self.container}_door",))
        self.collisions = CollisionTracker(self.index)
        self.tracker = ObjectTracker.of(twin, self.index, self.object)
        self.geom = m.geom(self.object).id
        self.box = next(f for f in twin.scene.fixtures if f.name == self.container)
        self.box_body = m.body(self.container).id
        self.hinge_qpos = m.jnt_qposadr[m.joint(f"{self.container}_hinge").id]
        obj = next(o for o in twin.scene.objects if o.name == self.object)
        self.radius = obj.size[0] if obj.shape != "box" else max(obj.size[:2]) / 2
        self.half_height = obj.half_height
        self.table_z = twin.scene.table.height if twin.scene.table is not None else 0.0

    def door_angle(self, twin) -> float:
        return float(twin.data.qpos[self.hinge_qpos])

    def _terms(self, twin) -> dict[str, float]:
        d = twin.data
        frame = d.xmat[self.box_body].reshape(3, 3)
        local = frame.T @ (d.xpos[self.tracker.body] - d.xpos[self.box_body])
        (x0, x1), (y0, y1), (_, z1) = self.box.inner_extent
        r = self.radius
        inside = min(local[0] - x0 - r, x1 - local[0] - r, local[1] - y0 - r, y1 - local[1] - r,
                     z1 - (local[2] + self.half_height))
        axis_z = float(d.xmat[self.tracker.body].reshape(3, 3)[2, 2])  # the object's own z, upward
        tilt = math.acos(min(1.0, max(-1.0, axis_z)))
        upright = self.half_height * (self.max_tilt - tilt)  # how far its top may still swing
        door = (self.closed_angle - self.door_angle(twin)) * self.box.door_width
        return {"inside": float(inside), "upright": upright, "door": door}

    def _placed(self, twin) -> bool:
        return min(self._terms(twin).values()) > 0

    def outcome(self, twin, timed_out: bool) -> Outcome:
        terms = self._terms(twin)
        terms["finger_clearance"] = finger_clearance(twin, self.index, self.geom)
        margin = min(terms.values())
        t = self.tracker
        metrics = {**terms, "door_angle": self.door_angle(twin), "max_rise": t.max_rise,
                   "min_tcp_distance": min(t.min_tcp_distance.values()),
                   "max_collision_force": self.collisions.max_force, "grasps": float(sum(t.grasps.values())),
                   "time": twin.time}
        if margin > 0:
            return Outcome(True, margin, "success", metrics)
        return Outcome(False, margin, self._failure_stage(terms), metrics)

    def _failure_stage(self, terms: dict[str, float]) -> str:
        t = self.tracker
        if self.collisions.max_force > self.limits["collision_force"]:
            return "collision"
        placed = terms["inside"] > 0 and terms["finger_clearance"] > 0
        if placed and terms["upright"] > 0:
            return "door_not_closed"
        if terms["upright"] <= 0 and not t.held_by():
            return "knocked_over"
        if not any(t.touched.values()) and min(t.min_tcp_distance.values()) > self.limits["reach_tolerance"]:
            return "out_of_reach"
        return grasp_stage(t)


LOGIC = CupInBox
