"""The `r2s2r` command."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from r2s2r.config import ConfigError
from r2s2r.eval.cli import add_eval_parsers


def _robots_list(args) -> int:
    from r2s2r.robots import registry
    for spec in registry().values():
        print(spec.summary())
    return 0


def _backends_list(args) -> int:
    from r2s2r import plugins
    for name in plugins.names("backends"):
        print(f"{name:<10} {plugins.source('backends', name)}")
    return 0


def _tasks_list(args) -> int:
    from r2s2r.eval.tasks import load_task, task_files
    for name, path in task_files().items():
        task = load_task(name)
        print(f"{name:<26} {task.scene().robot:<14} {task.time_limit_s:g} s  {path}")
    return 0


def _robots_export(args) -> int:
    from r2s2r.robots import get_robot
    robot = get_robot(args.robot)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.format == "urdf":
        shutil.copyfile(robot.urdf_path, out)
    else:
        from r2s2r.robots.model import build_robot_spec
        spec = build_robot_spec(robot)
        spec.compile()
        out.write_text(spec.to_xml())
    print(f"wrote {out} ({args.format}, {robot.name})")
    return 0


def _robots_moveit(args) -> int:
    from r2s2r.robots import get_robot
    from r2s2r.sim import moveit
    robot = get_robot(args.robot)
    if args.samples < 0:
        print(f"--samples {args.samples}: expected a positive number of poses", file=sys.stderr)
        return 2
    samples = args.samples or moveit.COLLISION_SAMPLES
    print(f"{robot.name}: sampling {samples} poses for the collision matrix ...", flush=True)
    for path in moveit.write(robot, args.out, samples=samples):
        print(f"wrote {path}")
    return 0


def _up(args) -> int:
    from r2s2r.stack import StackRunner, load_stack
    overrides = {}
    for item in args.param or []:
        if ":=" not in item:
            raise ConfigError("command line", item, "NAME:=VALUE")
        import yaml
        key, value = item.split(":=", 1)
        overrides[key] = yaml.safe_load(value)
    stack = load_stack(args.stack, overrides)
    return StackRunner(stack).run()


def _demo(args) -> int:
    from r2s2r.demo import run
    return run(args.out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="r2s2r", description="Real-to-sim-to-real engine for robot manipulation")
    sub = parser.add_subparsers(dest="command", required=True)

    robots = sub.add_parser("robots", help="the robot registry").add_subparsers(dest="action", required=True)
    robots.add_parser("list", help="print the registered robots").set_defaults(func=_robots_list)
    export = robots.add_parser("export", help="write a robot's model")
    export.add_argument("robot")
    export.add_argument("--format", choices=("mjcf", "urdf"), default="mjcf")
    export.add_argument("--out", required=True)
    export.set_defaults(func=_robots_export)
    moveit = robots.add_parser("moveit", help="write a MoveIt 2 configuration for a robot (docs/moveit.md)")
    moveit.add_argument("robot")
    moveit.add_argument("--out", required=True, help="the folder to write it into")
    moveit.add_argument("--samples", type=int, default=0,
                        help="random poses sampled for the collision matrix (default: docs/moveit.md)")
    moveit.set_defaults(func=_robots_moveit)

    backends = sub.add_parser("backends", help="the hardware backends").add_subparsers(dest="action", required=True)
    backends.add_parser("list", help="print the installed backends").set_defaults(func=_backends_list)
    tasks = sub.add_parser("tasks", help="the evaluation tasks").add_subparsers(dest="action", required=True)
    tasks.add_parser("list", help="print the registered tasks").set_defaults(func=_tasks_list)

    from r2s2r import ros_interfaces
    interfaces = sub.add_parser("interfaces", help="the ROS interface packages the PyPI wheels lack") \
        .add_subparsers(dest="action", required=True)
    build = interfaces.add_parser("build", help=f"generate and compile {', '.join(ros_interfaces.PACKAGES)} "
                                                "into this Python's prefix")
    ros_interfaces.add_arguments(build)
    build.set_defaults(func=ros_interfaces.run)

    up = sub.add_parser("up", help="start a stack's nodes (config/stacks/<name>.yaml)")
    up.add_argument("stack")
    up.add_argument("-p", "--param", action="append", metavar="NAME:=VALUE",
                    help="set a parameter on every node of the stack")
    up.set_defaults(func=_up)

    from r2s2r.camera.cli import add_calibrate_parser
    add_calibrate_parser(sub)

    demo = sub.add_parser("demo", help="the end-to-end demo (`make demo`)")
    demo.add_argument("--out", default="demo_output", help="folder for the demo's images and reports")
    demo.set_defaults(func=_demo)
    add_eval_parsers(sub)
    from r2s2r.data.cli import add_dataset_parsers, add_replay_parser
    add_replay_parser(sub)
    add_dataset_parsers(sub)
    from r2s2r.train.cli import add_train_parser
    add_train_parser(sub)

    from r2s2r.real2sim.cli import add_real2sim_parsers
    add_real2sim_parsers(sub)
    from r2s2r.loop.cli import add_loop_parsers
    add_loop_parsers(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, KeyError, ValueError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"r2s2r: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
