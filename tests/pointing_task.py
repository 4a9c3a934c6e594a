"""A task for image policies in the tests: turn the arm's first joint to point at an object.

Where the object is varies (object_x, object_y) and so does its colour, and a policy learns it
only from a camera: the task a visuomotor policy fails when it gets no images, or the wrong ones.
Success: by the time limit the joint points at the object's azimuth from the robot's base
within `tolerance` rad; the margin is the tolerance left (rad). With `finish_within` (rad) a
trial ends as soon as the aim is that close (so trials of one campaign end at different ticks)."""

from __future__ import annotations

import math

from r2s2r.eval.tasks import Outcome, TaskLogic


class PointAt(TaskLogic):
    def __init__(self, task, params):
        super().__init__(task, params)
        params.reject_unknown({"object", "joint", "tolerance", "finish_within"})
        self.object = params.string("object")
        self.joint = params.string("joint")
        self.tolerance = params.number("tolerance", positive=True)
        self.finish_within = params.number("finish_within", 0.0, minimum=0.0)

    def done(self, twin) -> bool:
        return self.aim_error(twin) < self.finish_within

    def aim_error(self, twin) -> float:
        x, y = twin.data.body(self.object).xpos[:2]
        return abs(float(twin.data.joint(self.joint).qpos[0]) - math.atan2(y, x))

    def outcome(self, twin, timed_out: bool) -> Outcome:
        error = self.aim_error(twin)
        hit = error < self.tolerance
        return Outcome(hit, self.tolerance - error, "success" if hit else "missed_aim", {"aim_error_rad": error})


LOGIC = PointAt
