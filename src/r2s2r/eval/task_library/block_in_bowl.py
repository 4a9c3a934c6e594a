"""Pick an object from the table and place it in a bowl fixture.

Success: the object's centre is within the bowl's inner radius, its bottom below the rim, and
no finger touches it. Margin, in metres, is the smallest of: inner radius - horizontal
distance of the object's centre from the bowl's axis; rim height - height of the object's
bottom; the fingers' clearance from the object (counted up to 5 cm). Beside the bowl the
margin is minus the distance to the inner radius.

Failure stages, first that applies: collision (the robot pressed on the table or the bowl
harder than `collision_force`), out_of_reach (no TCP came within `reach_tolerance` of the
object and no finger touched it), missed_grasp (never held between both fingers), slip_or_drop
(it last left a gripper that was not opening), missed_place (it was last let go by an opening
gripper, but not into the bowl), timeout (still held, or never let go).
"""

from __future__ import annotations

import numpy as np

from r2s2r.eval.task_library.common import (COMMON_KEYS, CollisionTracker, ObjectTracker, PlaceAndSettle, SceneIndex,
                                            finger_clearance, grasp_stage, read_common)
from r2s2r.eval.tasks import Outcome, TaskLogic


class BlockInBowl(PlaceAndSettle, TaskLogic):
    PARAMS = COMMON_KEYS | {"object", "container"}

    def __init__(self, task, params):
        super().__init__(task, params)
        params.reject_unknown(self.PARAMS)
        self.limits = read_common(params)
        scene = task.base_scene
        objects = [o.name for o in scene.objects]
        self.object = params.string("object", choices=objects)
        bowls = [f.name for f in scene.fixtures if f.kind == "bowl"]
        if not bowls:
            raise params.error("container", "a bowl fixture in the task's scene (it has none)")
        self.container = params.string("container", choices=bowls)
        self._settled_since: float | None = None

    def start(self, twin) -> None:
        self.index = SceneIndex(twin)
        self.collisions = CollisionTracker(self.index)
        self.tracker = ObjectTracker.of(twin, self.index, self.object)
        self.geom = twin.model.geom(self.object).id
        self.bowl = next(f for f in twin.scene.fixtures if f.name == self.container)
        self.bowl_body = twin.model.body(self.container).id
        self.half_height = next(o for o in twin.scene.objects if o.name == self.object).half_height
        self.table_z = twin.scene.table.height if twin.scene.table is not None else 0.0

    def _placed(self, twin) -> bool:
        return min(self._placement_terms(twin)) > 0

    def _placement_terms(self, twin) -> tuple[float, float]:
        d = twin.data
        pos = d.xpos[self.tracker.body]
        centre = d.xpos[self.bowl_body]
        radial = self.bowl.radius - float(np.hypot(pos[0] - centre[0], pos[1] - centre[1]))
        below_rim = float(centre[2] + self.bowl.height - (pos[2] - self.half_height))
        return radial, below_rim

    def outcome(self, twin, timed_out: bool) -> Outcome:
        radial, below_rim = self._placement_terms(twin)
        clearance = finger_clearance(twin, self.index, self.geom)
        margin = min(radial, below_rim, clearance)
        t = self.tracker
        metrics = {"radial_margin": radial, "below_rim": below_rim, "finger_clearance": clearance,
                   "max_rise": t.max_rise, "min_tcp_distance": min(t.min_tcp_distance.values()),
                   "max_collision_force": self.collisions.max_force, "grasps": float(sum(t.grasps.values())),
                   "time": twin.time}
        if margin > 0:
            return Outcome(True, margin, "success", metrics)
        return Outcome(False, margin, self._failure_stage(), metrics)

    def _failure_stage(self) -> str:
        t = self.tracker
        if self.collisions.max_force > self.limits["collision_force"]:
            return "collision"
        if not any(t.touched.values()) and min(t.min_tcp_distance.values()) > self.limits["reach_tolerance"]:
            return "out_of_reach"
        return grasp_stage(t)


LOGIC = BlockInBowl
