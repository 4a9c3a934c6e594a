"""Stage-level skills: IK on the robot's own model (ik), stage-level experts (stages), and the
scripted experts of the evaluation tasks (experts: `scripted:<task>`)."""
