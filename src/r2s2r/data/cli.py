"""`r2s2r replay`, `r2s2r collect` and `r2s2r dataset`: episodes out of the twin.

    r2s2r replay TRIAL_ID [--store DIR/trials.sqlite] [--camera scene] [--out DIR (default DIR/replays)]
    r2s2r collect --task T [--policy P] --episodes N [--envelope E | --conditions FILE] [--keep success|all]
                  [--cameras a,b] [--image-size 128x96] [--privileged] --out DATASET
    r2s2r dataset info DATASET
    r2s2r dataset merge DATASET... --out DATASET
    r2s2r dataset from-mcap EPISODE.mcap... --task TASK --out DATASET [--fps 20] [--cameras a,b] [--image-size 128x96]
    r2s2r dataset stills --task T --scenes N --poses-from DATASET [--poses 4] [--envelope E] [--cameras a,b]
                         [--image-size 128x96] --out DATASET
"""

from __future__ import annotations

from pathlib import Path

from r2s2r.eval.cli import DEFAULT_OUT, STORE_NAME, _count, guarded
from r2s2r.resumable import run_resumable


def _replay(args) -> int:
    from r2s2r.data.trial_bag import replay
    from r2s2r.eval.store import TrialStore

    store_path = Path(args.store)
    if not store_path.is_file():
        raise FileNotFoundError(f"no store at {store_path} (give --store, the trials.sqlite a campaign wrote)")
    out = Path(args.out) if args.out else store_path.parent / "replays"  # beside the campaign's report
    with TrialStore(store_path) as store:
        result = replay(store, args.trial, out, args.camera, video=not args.no_video, bag=not args.no_bag)
    r = result.result
    print(f"trial {r.id}: {'success' if r.success else 'failure'} ({r.stage}), margin {r.margin!r}, "
          f"{r.sim_time_s:.2f} s simulated")
    print("reproduced bit for bit" if result.identical else
          f"NOT reproduced: stored margin {result.stored.margin!r}, stage {result.stored.stage}")
    if result.video:
        print(f"video: {result.video} ({result.frames} frames, camera {args.camera})")
    if result.bag:
        print(f"bag: {result.bag}")
    return 0 if result.identical else 1


def add_replay_parser(sub) -> None:
    rp = sub.add_parser("replay", help="rerun one stored trial bit for bit; record an MP4 and an MCAP bag")
    rp.add_argument("trial", help="trial id (or a unique prefix)")
    rp.add_argument("--store", default=f"{DEFAULT_OUT}/{STORE_NAME}", help="the campaign's SQLite store")
    rp.add_argument("--out", default=None, help="folder for the video and the bag (default: replays/ beside the store)")
    rp.add_argument("--camera", default="scene")
    rp.add_argument("--no-video", action="store_true")
    rp.add_argument("--no-bag", action="store_true")
    rp.set_defaults(func=guarded(_replay))


def image_size_type(text: str) -> tuple[int, int]:
    import argparse
    width, sep, height = text.lower().partition("x")
    try:
        size = (int(width), int(height))
    except ValueError:
        size = None
    if not sep or size is None or min(size) < 2 or max(size) > 4096 or size[0] % 2 or size[1] % 2:
        raise argparse.ArgumentTypeError(f"{text!r}; expected WIDTHxHEIGHT with even numbers, e.g. 128x96")
    return size


def _collect(args) -> int:
    from r2s2r.data.collect import CollectOptions, collect, read_conditions
    from r2s2r.data.lerobot_v3 import open_dataset
    from r2s2r.eval.runner import TrialPool
    from r2s2r.eval.tasks import load_task

    task = load_task(args.task)
    if args.envelope and args.conditions:
        raise ValueError("--envelope and --conditions both given; expected one of them")
    if args.envelope:
        task.perturbations.within(args.envelope)  # an unknown envelope is named before anything runs
    conditions = read_conditions(args.conditions, task) if args.conditions else None
    cameras = None if args.cameras is None else tuple(c.strip() for c in args.cameras.split(",") if c.strip())
    options = CollectOptions(task=task.name, policy=args.policy or task.expert, episodes=args.episodes,
                             seed=args.seed, keep=args.keep, envelope=args.envelope, conditions=conditions,
                             cameras=cameras, image_size=args.image_size, privileged=args.privileged,
                             relabel=args.relabel)
    def run():
        with TrialPool(args.workers, args.backend, args.address) as pool:
            return collect(options, args.out, pool, progress=not args.no_progress)

    def staged() -> str:
        count = len(list((Path(args.out) / ".collect" / "episodes").glob("*.npz")))
        return f"{count} trials staged in {args.out}/.collect; rerun the same command to resume"
    done, code = run_resumable("collect", run, (), staged)
    if done is None:
        return code
    print(f"{done.episodes} episodes from {done.trials} trials ({done.successes} succeeded)")
    print(open_dataset(done.out).summary())
    return 0


def _dataset_info(args) -> int:
    from r2s2r.data.lerobot_v3 import open_dataset
    print(open_dataset(args.dataset).summary())
    return 0


def _dataset_merge(args) -> int:
    from r2s2r.data.lerobot_v3 import merge, open_dataset
    print(open_dataset(merge(args.datasets, args.out)).summary())
    return 0


def _dataset_from_mcap(args) -> int:
    from r2s2r.data.from_mcap import from_mcap
    from r2s2r.data.lerobot_v3 import open_dataset
    from r2s2r.eval.tasks import task_files
    # A registered task's name gives its description, so real and simulated episodes share the task text.
    task = args.task
    if task in task_files():
        from r2s2r.eval.tasks import load_task
        loaded = load_task(task)
        task = loaded.description or loaded.name
    cameras = tuple(c.strip() for c in (args.cameras or "").split(",") if c.strip())
    print(open_dataset(from_mcap(args.bags, args.out, task, args.fps, cameras, args.image_size)).summary())
    return 0


def _dataset_stills(args) -> int:
    from r2s2r.data.lerobot_v3 import open_dataset
    from r2s2r.data.stills import StillsOptions, render_stills
    from r2s2r.eval.runner import TrialPool
    from r2s2r.eval.tasks import load_task

    task = load_task(args.task)
    if args.envelope:
        task.perturbations.within(args.envelope)  # an unknown envelope is named before anything runs
    cameras = None if args.cameras is None else tuple(c.strip() for c in args.cameras.split(",") if c.strip())
    options = StillsOptions(task=task.name, scenes=args.scenes, poses_from=str(Path(args.poses_from).resolve()),
                            poses=args.poses, seed=args.seed, envelope=args.envelope, cameras=cameras,
                            image_size=args.image_size)
    def run():
        with TrialPool(args.workers) as pool:
            return render_stills(options, args.out, pool, progress=not args.no_progress)
    out, code = run_resumable("dataset stills", run, (),
                              lambda: f"rerun the same command to resume from what {args.out}/.stills holds")
    if out is None:
        return code
    print(open_dataset(out).summary())
    return 0


def add_dataset_parsers(sub) -> None:
    """Register `collect` and `dataset` on the r2s2r command's subparsers."""
    co = sub.add_parser("collect", help="demonstrations in the twin, written as a LeRobot v3.0 dataset (resumable)")
    co.add_argument("--task", required=True, help="a task name (config/tasks) or task YAML")
    co.add_argument("--policy", default=None, help="policy URI or config (default: the task's scripted expert)")
    co.add_argument("--episodes", type=_count(1), required=True, help="episodes in the dataset")
    co.add_argument("--keep", choices=("success", "all"), default="success",
                    help="success: run trials until EPISODES have succeeded and keep those; all: keep every trial")
    co.add_argument("--envelope", default=None, help="draw perturbations within this named envelope of the task")
    co.add_argument("--conditions", default=None,
                    help="YAML/JSON list of perturbations (factor: value), cycled over the episodes")
    co.add_argument("--cameras", default=None,
                    help="comma-separated cameras to record (default: all of the task's scene; '' for none)")
    co.add_argument("--image-size", type=image_size_type, default=(128, 96), help="WIDTHxHEIGHT of the recorded images")
    co.add_argument("--privileged", action="store_true",
                    help="also record the objects' poses (observation.environment_state, flagged as privileged)")
    co.add_argument("--relabel", action="store_true",
                    help="relabelled rollouts (DAgger): --policy acts, and each frame's action is what the task's "
                         "expert would command from that state (its state-feedback form)")
    co.add_argument("--seed", type=int, default=0, help="episode i's perturbation and seed come from it")
    co.add_argument("--workers", type=_count(1, 1024), default=1, help="parallel trials (processes, or Ray actors)")
    co.add_argument("--backend", choices=("process", "ray"), default="process")
    co.add_argument("--address", default=None, help="Ray: 'auto', HOST:PORT or ray://HOST:PORT")
    co.add_argument("--out", required=True, help="the dataset's folder (new, or an unfinished collection's)")
    co.add_argument("--no-progress", action="store_true", help="no progress bar")
    co.set_defaults(func=guarded(_collect))

    ds = sub.add_parser("dataset", help="LeRobot v3.0 datasets").add_subparsers(dest="action", required=True)
    info = ds.add_parser("info", help="print a dataset's summary (and check its files)")
    info.add_argument("dataset")
    info.set_defaults(func=_dataset_info)
    mg = ds.add_parser("merge", help="join datasets with the same features (sim + real)")
    mg.add_argument("datasets", nargs="+")
    mg.add_argument("--out", required=True)
    mg.set_defaults(func=_dataset_merge)
    fm = ds.add_parser("from-mcap", help="episodes recorded with `r2s2r record` (real or proxy) as a dataset")
    fm.add_argument("bags", nargs="+", help="episode bags (.mcap)")
    fm.add_argument("--task", required=True, help="the task's text, or a task name (its description is taken)")
    fm.add_argument("--fps", type=_count(1, 1000), default=20, help="frames per second (a collected dataset's: "
                    "its task's control rate)")
    fm.add_argument("--cameras", default=None, help="comma-separated recorded cameras to include (default: none)")
    fm.add_argument("--image-size", type=image_size_type, default=(128, 96), help="WIDTHxHEIGHT of the images")
    fm.add_argument("--out", required=True)
    fm.set_defaults(func=_dataset_from_mcap)
    st = ds.add_parser("stills", help="randomised still frames of a task's scene with the objects' poses, for "
                                      "r2s2r train --stills (resumable)")
    st.add_argument("--task", required=True, help="a task name (config/tasks) or task YAML")
    st.add_argument("--scenes", type=_count(1), required=True, help="scenes, each drawn from the task's perturbations")
    st.add_argument("--poses-from", required=True,
                    help="a dataset of the task's robot (its demonstrations): the arm's poses are drawn from its states")
    st.add_argument("--poses", type=_count(1, 1000), default=4, help="arm poses per scene")
    st.add_argument("--envelope", default=None, help="draw the scenes within this named envelope of the task")
    st.add_argument("--cameras", default=None, help="comma-separated cameras (default: all of the task's scene)")
    st.add_argument("--image-size", type=image_size_type, default=(128, 96), help="WIDTHxHEIGHT of the images")
    st.add_argument("--seed", type=int, default=0, help="scene i comes from it")
    st.add_argument("--workers", type=_count(1, 1024), default=1, help="parallel rendering processes")
    st.add_argument("--out", required=True, help="the dataset's folder (new, or unfinished stills' to resume)")
    st.add_argument("--no-progress", action="store_true", help="no progress bar")
    st.set_defaults(func=guarded(_dataset_stills))


__all__ = ["add_replay_parser", "add_dataset_parsers", "image_size_type"]
