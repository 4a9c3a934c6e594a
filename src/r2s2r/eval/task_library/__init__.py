"""One module per task logic: success predicate, margin, failure-stage classifier (see
r2s2r.eval.tasks.TaskLogic); common.py holds the trackers they share."""
