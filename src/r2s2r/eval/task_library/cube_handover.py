"""One arm picks an object, hands it to the other in the air, which places it in a bowl.

Success: as block_in_bowl (the object in the bowl, no finger on it) and the object was handed
over: held by the taker's gripper after being lifted by the giver's, and not put in the bowl by
the giver. Margin, in metres: block_in_bowl's terms and a handover term, +5 cm once handed over,
else minus the closest the taker's TCP came to the object (at least 1 mm).

Failure stages, first that applies: collision (an arm pressed on the table, the bowl or the
other arm harder than `collision_force`), out_of_reach (the giver never came within
`reach_tolerance`), missed_grasp (the giver never pinched it), slip_or_drop (the giver lost it
before the handover, or the taker after it, without opening), handover_failed (the giver lifted
it, the taker never held it), missed_place (let go outside the bowl), timeout (still held).
"""

from __future__ import annotations

from r2s2r.eval.task_library.block_in_bowl import BlockInBowl
from r2s2r.eval.task_library.common import CLEARANCE_CAP_M, COMMON_KEYS, finger_clearance
from r2s2r.eval.tasks import Outcome
from r2s2r.robots import get_robot


class CubeHandover(BlockInBowl):
    PARAMS = COMMON_KEYS | {"object", "container", "giver", "taker"}

    def __init__(self, task, params):
        super().__init__(task, params)
        grippers = [g.name for g in get_robot(task.robot).grippers]
        if len(grippers) < 2:
            raise params.error("giver", f"a robot with two grippers ({task.robot} has {len(grippers)})")
        self.giver = params.string("giver", choices=grippers)
        self.taker = params.string("taker", choices=[g for g in grippers if g != self.giver])

    def handed_over(self) -> bool:
        t = self.tracker
        return t.was_lifted(self.giver) and t.grasps[self.taker] > 0 and t.lifted[self.taker] > 0

    def step(self, twin) -> None:
        super().step(twin)
        if not self.handed_over():  # the giver putting it in the bowl is no success
            self._settled_since = None

    def outcome(self, twin, timed_out: bool) -> Outcome:
        radial, below_rim = self._placement_terms(twin)
        clearance = finger_clearance(twin, self.index, self.geom)
        t = self.tracker
        handover = CLEARANCE_CAP_M if self.handed_over() else -max(t.min_tcp_distance[self.taker], 0.001)
        margin = min(radial, below_rim, clearance, handover)
        metrics = {"radial_margin": radial, "below_rim": below_rim, "finger_clearance": clearance,
                   "handover": handover, "max_rise": t.max_rise,
                   "giver_min_tcp_distance": t.min_tcp_distance[self.giver],
                   "taker_min_tcp_distance": t.min_tcp_distance[self.taker],
                   "max_collision_force": self.collisions.max_force,
                   "giver_grasps": float(t.grasps[self.giver]), "taker_grasps": float(t.grasps[self.taker]),
                   "time": twin.time}
        if margin > 0:
            return Outcome(True, margin, "success", metrics)
        return Outcome(False, margin, self._handover_stage(), metrics)

    def _handover_stage(self) -> str:
        t = self.tracker
        if self.collisions.max_force > self.limits["collision_force"]:
            return "collision"
        if not t.touched[self.giver] and t.min_tcp_distance[self.giver] > self.limits["reach_tolerance"]:
            return "out_of_reach"
        if t.grasps[self.giver] == 0:
            return "missed_grasp"
        if not t.was_lifted(self.giver):
            return "slip_or_drop"
        if t.grasps[self.taker] == 0:
            giver_losses = [loss for loss in t.losses if loss.gripper == self.giver]
            dropped = giver_losses and not giver_losses[-1].released and not t.held_by()
            return "slip_or_drop" if dropped else "handover_failed"
        if t.held_by():
            return "timeout"
        last = t.losses[-1]
        return "missed_place" if last.released else "slip_or_drop"


LOGIC = CubeHandover
