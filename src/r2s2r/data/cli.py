"""`r2s2r replay`: rerun one stored trial bit for bit, recording an MP4 and an MCAP bag.

    r2s2r replay TRIAL_ID [--store DIR/trials.sqlite] [--camera scene] [--out DIR (default DIR/replays)]
"""

from __future__ import annotations

from pathlib import Path

from r2s2r.eval.cli import DEFAULT_OUT, STORE_NAME, guarded


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


__all__ = ["add_replay_parser"]
