"""TF and robot_description messages (ROS side: nodes only). tf2_msgs is built at set-up like
control_msgs (r2s2r interfaces build), so it is imported here alone, with an error that says so."""

from __future__ import annotations

from typing import Sequence

import numpy as np

try:
    from tf2_msgs.msg import TFMessage
except ImportError as error:  # the interfaces are built at set-up, not shipped as wheels
    raise ImportError(f"tf2_msgs is not importable ({error}); build it with `r2s2r interfaces build` "
                      "(make does), or source a ROS 2 Jazzy install") from None
from geometry_msgs.msg import TransformStamped

from r2s2r.contract.convert import to_time


def tf_message(transforms: Sequence, stamp: float) -> TFMessage:
    """robots.transforms.Transform values (parent, child, translation, rotation x y z w) as a TFMessage."""
    msg = TFMessage()
    time = to_time(stamp)
    for t in transforms:
        out = TransformStamped()
        out.header.stamp = time
        out.header.frame_id = t.parent
        out.child_frame_id = t.child
        out.transform.translation.x, out.transform.translation.y, out.transform.translation.z = (
            float(v) for v in t.translation)
        (out.transform.rotation.x, out.transform.rotation.y, out.transform.rotation.z,
         out.transform.rotation.w) = (float(v) for v in t.rotation)
        msg.transforms.append(out)
    return msg


def poses_in(msg: TFMessage, parent: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The transforms of `msg` whose parent frame is `parent`, as child -> (position xyz,
    quaternion wxyz as MuJoCo gives it)."""
    poses = {}
    for t in msg.transforms:
        if t.header.frame_id != parent:
            continue
        p, q = t.transform.translation, t.transform.rotation
        poses[t.child_frame_id] = (np.array([p.x, p.y, p.z]), np.array([q.w, q.x, q.y, q.z]))
    return poses
