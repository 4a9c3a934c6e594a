"""LeRobotDataset v3.0 on disk, written and read by r2s2r itself: pyarrow for the tables, PyAV
for the videos, numpy for the statistics. lerobot 0.4.4 loads what `DatasetWriter` writes with
`LeRobotDataset(repo_id, root=DIR)`; docs/datasets.md lists the files and their fields.

A dataset is written whole episodes at a time (`DatasetWriter.add`) and finished by `close`,
which writes meta/info.json last: a folder without it is an unfinished dataset and
`open_dataset` says so. Reading (`open_dataset`) checks that the files agree with each other
(frame counts, index ranges, video files and their frames) and names the first that does not.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000  # files per chunk folder
DATA_FILE_MB = 100  # a data file is closed after the episode that takes it past this size
VIDEO_FILE_MB = 200
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)
FRAME_TOLERANCE_S = 1e-4  # a decoded frame's time may differ from the asked one by this much (lerobot's)
# Every other frame a keyframe, as lerobot encodes: a random frame decodes after at most one other.
GOP = 2
# H.264 first: SVT-AV1 raises the priority of the thread that opens it to SCHED_FIFO where it may
# (as root), and every process that thread starts then inherits real-time priority (the test
# suite hung on it). PyAV's FFmpeg may lack some: the first it has.
CODECS = ("libx264", "libopenh264", "libsvtav1")
IMAGE_NAMES = ["height", "width", "channels"]


class DatasetError(ValueError):
    """A dataset is unusable or a write was refused; the message names the file or the field and what was expected."""


@dataclass(frozen=True)
class Feature:
    """One field of every frame: dtype "float32", "int64" or "video" (H x W x 3 uint8 images)."""

    dtype: str
    shape: tuple[int, ...]
    names: list[str] | None = None
    info: dict | None = None  # a video's encoding (filled in when the dataset is written)

    @property
    def is_video(self) -> bool:
        return self.dtype == "video"

    def to_json(self) -> dict:
        entry = {"dtype": self.dtype, "shape": list(self.shape), "names": self.names}
        if self.info is not None:
            entry["info"] = self.info
        return entry

    @classmethod
    def from_json(cls, key: str, entry: Mapping, where: str) -> "Feature":
        try:
            dtype, shape = str(entry["dtype"]), tuple(int(n) for n in entry["shape"])
        except (KeyError, TypeError, ValueError):
            raise DatasetError(f"{where}: feature {key!r} is {entry!r}; expected dtype and shape") from None
        return cls(dtype, shape, entry.get("names"), entry.get("info"))


# The fields lerobot adds to every frame, after the dataset's own.
INDEX_FEATURES = {
    "timestamp": Feature("float32", (1,)),
    "frame_index": Feature("int64", (1,)),
    "episode_index": Feature("int64", (1,)),
    "index": Feature("int64", (1,)),
    "task_index": Feature("int64", (1,)),
}


@dataclass
class Episode:
    """One episode's frames: feature -> array of (frames, *shape) (videos: uint8 H x W x 3
    images); `meta`: further per-episode columns of meta/episodes (r2s2r's own: seed, outcome)."""

    task: str
    frames: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return len(next(iter(self.frames.values()))) if self.frames else 0


# -- statistics ---------------------------------------------------------------------------------------
def vector_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """min, max, mean, std (population), count and quantiles of (frames, *shape) values, per element."""
    values = np.asarray(values, dtype=np.float64)
    stats = {"min": values.min(axis=0), "max": values.max(axis=0), "mean": values.mean(axis=0),
             "std": values.std(axis=0), "count": np.array([len(values)])}
    for key, q in QUANTILES.items():
        stats[key] = np.quantile(values, q, axis=0)
    return stats


@dataclass
class ImageHistogram:
    """Per colour channel, how many pixels took each value 0..255: every image statistic, exact,
    for any number of frames (the quantiles are numpy's linear ones over all pixels, scaled to 0-1)."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros((3, 256), np.int64))
    frames: int = 0

    def add(self, images: np.ndarray) -> None:
        images = np.asarray(images)
        for c in range(images.shape[-1]):
            self.counts[c] += np.bincount(images[..., c].ravel(), minlength=256)
        self.frames += len(images)

    def merge(self, other: "ImageHistogram") -> None:
        self.counts += other.counts
        self.frames += other.frames

    def stats(self) -> dict[str, np.ndarray]:
        levels = np.arange(256) / 255.0
        out = {k: np.zeros(3) for k in ("min", "max", "mean", "std", *QUANTILES)}
        for c, counts in enumerate(self.counts):
            n = counts.sum()
            present = np.nonzero(counts)[0]
            mean = float((levels * counts).sum() / n)
            out["min"][c], out["max"][c] = levels[present[0]], levels[present[-1]]
            out["mean"][c] = mean
            out["std"][c] = math.sqrt(float((((levels - mean) ** 2) * counts).sum() / n))
            cumulative = np.cumsum(counts)
            for key, q in QUANTILES.items():
                position = q * (n - 1)
                below, above = math.floor(position), math.ceil(position)
                low = levels[np.searchsorted(cumulative, below, side="right")]
                high = levels[np.searchsorted(cumulative, above, side="right")]
                out[key][c] = low + (high - low) * (position - below)
        stats = {k: v.reshape(3, 1, 1) for k, v in out.items()}
        stats["count"] = np.array([self.frames])
        return stats


def _json_stats(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    return {key: {name: np.asarray(value).tolist() for name, value in feature.items()}
            for key, feature in stats.items()}


# -- video ---------------------------------------------------------------------------------------------
def available_codec() -> str:
    """The first of CODECS this PyAV's FFmpeg can encode with."""
    import av
    for name in CODECS:
        try:
            av.codec.Codec(name, "w")
            return name
        except Exception:  # av raises UnknownCodecError (or ValueError in older releases)
            continue
    raise DatasetError(f"PyAV's FFmpeg has none of the video encoders {', '.join(CODECS)}")


class _VideoFile:
    """One mp4 that episodes are appended to, frame i at i / fps."""

    def __init__(self, path: Path, fps: int, width: int, height: int, codec: str, crf: int):
        import av
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1, if it is the one: errors only, not its whole configuration
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.fps, self.frames = path, fps, 0
        self.muxed_bytes, self.muxed_packets = 0, 0
        self.container = av.open(str(path), "w")
        options = {"g": str(GOP), "crf": str(crf)} if codec != "libopenh264" else {"g": str(GOP)}
        self.stream = self.container.add_stream(codec, rate=fps, options=options)
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"
        self.stream.time_base = Fraction(1, fps)

    def append(self, images: np.ndarray) -> tuple[float, float]:
        """Encode `images` (frames x H x W x 3, uint8); their (from, to) times in this file."""
        import av
        start = self.frames
        for image in images:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts, frame.time_base = self.frames, Fraction(1, self.fps)
            self._mux(self.stream.encode(frame))
            self.frames += 1
        return start / self.fps, self.frames / self.fps

    def _mux(self, packets) -> None:
        for packet in packets:
            self.muxed_bytes += packet.size
            self.muxed_packets += 1
            self.container.mux(packet)

    def size_mb(self) -> float:
        """The file's size once finished, estimated: the encoder holds frames back (its look-ahead),
        counted at the mean size of those it gave (a twentieth of a raw frame before any)."""
        stream = self.stream
        mean = self.muxed_bytes / self.muxed_packets if self.muxed_packets else stream.width * stream.height * 3 / 20
        return (self.muxed_bytes + (self.frames - self.muxed_packets) * mean) / 2**20

    def close(self) -> None:
        self._mux(self.stream.encode())
        self.container.close()


def video_info(path: Path) -> dict:
    """The `info` of a video feature, as lerobot reads it from the file."""
    import av
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {"video.height": stream.height, "video.width": stream.width,
                "video.codec": stream.codec_context.codec.canonical_name, "video.pix_fmt": stream.pix_fmt,
                "video.is_depth_map": False, "video.fps": int(stream.base_rate), "video.channels": 3,
                "has_audio": False}


def decode_frames(path: Path, start_s: float, count: int, fps: int) -> np.ndarray:
    """`count` frames of an mp4 from `start_s` on, at 1 / fps apart: (count, H, W, 3) uint8.
    Each decoded frame's time must be within FRAME_TOLERANCE_S of where it belongs."""
    import av
    wanted = start_s + np.arange(count) / fps
    frames: list[np.ndarray] = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        container.seek(int(start_s / stream.time_base), stream=stream, backward=True, any_frame=False)
        for frame in container.decode(stream):
            t = float(frame.pts * stream.time_base)
            if t < wanted[0] - FRAME_TOLERANCE_S:
                continue
            i = len(frames)
            if abs(t - wanted[i]) > FRAME_TOLERANCE_S:
                raise DatasetError(f"{path}: the frame for {wanted[i]:.6f} s is at {t:.6f} s; "
                                   f"expected within {FRAME_TOLERANCE_S} s")
            frames.append(frame.to_ndarray(format="rgb24"))
            if len(frames) == count:
                break
    if len(frames) < count:
        raise DatasetError(f"{path}: {len(frames)} frames from {start_s:.4f} s; expected {count} "
                           f"(the video ends early: truncated?)")
    return np.stack(frames)


# -- writing -------------------------------------------------------------------------------------------
def _arrow_type(feature: Feature):
    import pyarrow as pa
    scalar = pa.float32() if feature.dtype == "float32" else pa.int64()
    return scalar if feature.shape == (1,) else pa.list_(scalar, feature.shape[0])


def _tasks_table(tasks: Sequence[str]):
    """meta/tasks.parquet: the task text as the (pandas) index, `task_index` its column. The pandas
    metadata is written by hand: pandas would be a dependency for this one index."""
    import pyarrow as pa
    index = "__index_level_0__"
    pandas_meta = {
        "index_columns": [index], "column_indexes": [],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": None, "field_name": index, "pandas_type": "unicode", "numpy_type": "object",
                     "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.0"}
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), index: pa.array(list(tasks), pa.string())})
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def check_features(features: Mapping[str, Feature]) -> None:
    for key, feature in features.items():
        if key in INDEX_FEATURES:
            raise DatasetError(f"feature {key!r} is one lerobot adds itself ({', '.join(INDEX_FEATURES)})")
        if feature.dtype not in ("float32", "int64", "video"):
            raise DatasetError(f"feature {key!r} has dtype {feature.dtype!r}; expected float32, int64 or video")
        if feature.is_video:
            if len(feature.shape) != 3 or feature.shape[2] != 3 or feature.shape[0] % 2 or feature.shape[1] % 2:
                raise DatasetError(f"video feature {key!r} has shape {feature.shape}; expected (height, width, 3) "
                                   f"with an even height and width (yuv420p)")
        elif len(feature.shape) != 1 or feature.shape[0] < 1:
            raise DatasetError(f"feature {key!r} has shape {feature.shape}; expected (n,) with n >= 1")


class DatasetWriter:
    """Writes a LeRobotDataset v3.0 into `root` (which must be empty or absent), one whole
    episode per `add`, finished by `close`. Episodes share data files (up to DATA_FILE_MB) and,
    per camera, video files (up to VIDEO_FILE_MB)."""

    def __init__(self, root: str | Path, fps: int, features: Mapping[str, Feature], robot_type: str,
                 codec: str | None = None, crf: int = 23):
        self.root = Path(root)
        if self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir())):
            raise DatasetError(f"{self.root} exists and is not an empty folder; expected a new dataset's folder")
        if not (isinstance(fps, int) and fps > 0):
            raise DatasetError(f"fps is {fps!r}; expected a whole number of frames per second (lerobot's)")
        check_features(features)
        self.fps, self.robot_type, self.crf = fps, robot_type, int(crf)
        self.features = dict(features)
        self.codec = (codec or available_codec()) if any(f.is_video for f in features.values()) else None
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict] = []
        self.frames = 0
        self._data_writer = None
        self._data_file = (0, 0)
        self._videos: dict[str, _VideoFile] = {}
        self._video_files = {key: (0, 0) for key, f in features.items() if f.is_video}
        self._video_info: dict[str, dict] = {}
        self._vectors: dict[str, list[np.ndarray]] = {k: [] for k in (*self.vector_keys, *INDEX_FEATURES)}
        self._histograms = {key: ImageHistogram() for key in self._video_files}
        self._schema = None
        self._closed = False

    @property
    def vector_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if not f.is_video]

    def _check(self, episode: Episode) -> int:
        missing = [k for k in self.features if k not in episode.frames]
        extra = [k for k in episode.frames if k not in self.features]
        if missing or extra:
            raise DatasetError(f"episode {len(self.episodes)}: features {sorted(episode.frames)}; expected "
                               f"{sorted(self.features)} (missing {missing}, unknown {extra})")
        lengths = {k: len(v) for k, v in episode.frames.items()}
        if len(set(lengths.values())) != 1 or 0 in lengths.values():
            raise DatasetError(f"episode {len(self.episodes)}: frames per feature {lengths}; expected one length >= 1")
        for key, values in episode.frames.items():
            feature = self.features[key]
            values = np.asarray(values)
            if feature.is_video:
                if values.dtype != np.uint8 or values.shape[1:] != feature.shape:
                    raise DatasetError(f"episode {len(self.episodes)}: {key} images are {values.dtype} "
                                       f"{values.shape[1:]}; expected uint8 {feature.shape}")
            elif values.reshape(len(values), -1).shape[1:] != feature.shape:
                raise DatasetError(f"episode {len(self.episodes)}: {key} has shape {values.shape[1:]} per frame; "
                                   f"expected {feature.shape}")
            elif feature.dtype == "float32" and not np.all(np.isfinite(values)):
                raise DatasetError(f"episode {len(self.episodes)}: {key} has NaN or Inf; expected finite values")
        if not isinstance(episode.task, str) or not episode.task:
            raise DatasetError(f"episode {len(self.episodes)}: task {episode.task!r}; expected the task's text")
        return next(iter(lengths.values()))

    def add(self, episode: Episode) -> int:
        """Write one episode; its index."""
        import pyarrow as pa
        if self._closed:
            raise DatasetError(f"{self.root}: the dataset is closed")
        length = self._check(episode)
        index = len(self.episodes)
        task_index = self.tasks.setdefault(episode.task, len(self.tasks))
        columns = {}
        for key in self.vector_keys:
            feature = self.features[key]
            dtype = np.float32 if feature.dtype == "float32" else np.int64
            values = np.asarray(episode.frames[key]).reshape(length, -1).astype(dtype)
            columns[key] = values
        columns["timestamp"] = (np.arange(length) / self.fps).astype(np.float32)
        columns["frame_index"] = np.arange(length, dtype=np.int64)
        columns["episode_index"] = np.full(length, index, np.int64)
        columns["index"] = np.arange(self.frames, self.frames + length, dtype=np.int64)
        columns["task_index"] = np.full(length, task_index, np.int64)
        row = {"episode_index": index, "tasks": [episode.task], "length": length}
        if self._data_writer is None:
            self._open_data_file()
        row["data/chunk_index"], row["data/file_index"] = self._data_file
        arrays = []
        for key in (*self.vector_keys, *INDEX_FEATURES):
            feature = self.features.get(key) or INDEX_FEATURES[key]
            values = columns[key]
            if feature.shape == (1,):
                arrays.append(pa.array(values.reshape(length), _arrow_type(feature)))
            else:
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), feature.shape[0]))
        self._data_writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema))
        row["dataset_from_index"], row["dataset_to_index"] = self.frames, self.frames + length
        episode_stats = {}
        for key, values in columns.items():
            self._vectors[key].append(values.reshape(length, -1))
            episode_stats[key] = vector_stats(values.reshape(length, -1))
        for key in self._video_files:
            row.update(self._append_video(key, np.asarray(episode.frames[key])))
            histogram = ImageHistogram()
            histogram.add(episode.frames[key])
            self._histograms[key].merge(histogram)
            episode_stats[key] = histogram.stats()
        for key, stats in episode_stats.items():
            for name, value in stats.items():
                row[f"stats/{key}/{name}"] = np.asarray(value).tolist()
        row["meta/episodes/chunk_index"], row["meta/episodes/file_index"] = 0, 0
        row.update(episode.meta)
        self.episodes.append(row)
        self.frames += length
        if Path(self._data_writer.where).stat().st_size >= DATA_FILE_MB * 2**20:
            self._data_writer.close()
            self._data_writer, self._data_file = None, _next_file(*self._data_file)
        return index

    def _open_data_file(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        if self._schema is None:
            self._schema = pa.schema([(key, _arrow_type(self.features.get(key) or INDEX_FEATURES[key]))
                                      for key in (*self.vector_keys, *INDEX_FEATURES)])
        chunk, file = self._data_file
        path = self.root / DATA_PATH.format(chunk_index=chunk, file_index=file)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._data_writer = pq.ParquetWriter(path, self._schema, compression="snappy")

    def _append_video(self, key: str, images: np.ndarray) -> dict:
        video = self._videos.get(key)
        if video is None:
            chunk, file = self._video_files[key]
            height, width, _ = self.features[key].shape
            path = self.root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            video = self._videos[key] = _VideoFile(path, self.fps, width, height, self.codec, self.crf)
        start, end = video.append(images)
        chunk, file = self._video_files[key]
        entry = {f"videos/{key}/chunk_index": chunk, f"videos/{key}/file_index": file,
                 f"videos/{key}/from_timestamp": start, f"videos/{key}/to_timestamp": end}
        if video.size_mb() >= VIDEO_FILE_MB:
            self._close_video(key)
            self._video_files[key] = _next_file(chunk, file)
        return entry

    def _close_video(self, key: str) -> None:
        video = self._videos.pop(key)
        video.close()
        self._video_info.setdefault(key, video_info(video.path))

    def close(self) -> Path:
        """Finish the files and write the metadata (info.json last); the dataset's folder."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        if self._closed:
            return self.root
        if not self.episodes:
            raise DatasetError(f"{self.root}: no episode was added; a dataset needs one at least")
        self._closed = True
        if self._data_writer is not None:
            self._data_writer.close()
        for key in list(self._videos):
            self._close_video(key)
        path = self.root / EPISODES_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(self.episodes), path)
        pq.write_table(_tasks_table(list(self.tasks)), self.root / TASKS_PATH)
        stats = {key: vector_stats(np.concatenate(values)) for key, values in self._vectors.items()}
        stats.update({key: histogram.stats() for key, histogram in self._histograms.items()})
        _write_json(self.root / STATS_PATH, _json_stats(stats))
        features = {key: Feature(f.dtype, f.shape, f.names if f.names or not f.is_video else IMAGE_NAMES,
                                 self._video_info.get(key, f.info)) for key, f in self.features.items()}
        features.update(INDEX_FEATURES)
        info = {
            "codebase_version": CODEBASE_VERSION, "robot_type": self.robot_type,
            "total_episodes": len(self.episodes), "total_frames": self.frames, "total_tasks": len(self.tasks),
            "chunks_size": CHUNKS_SIZE, "data_files_size_in_mb": DATA_FILE_MB,
            "video_files_size_in_mb": VIDEO_FILE_MB, "fps": self.fps,
            "splits": {"train": f"0:{len(self.episodes)}"}, "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if self._video_files else None,
            "features": {key: f.to_json() for key, f in features.items()},
        }
        _write_json(self.root / INFO_PATH, info)
        return self.root

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is None:
            self.close()


def _next_file(chunk: int, file: int) -> tuple[int, int]:
    return (chunk + 1, 0) if file == CHUNKS_SIZE - 1 else (chunk, file + 1)


def _write_json(path: Path, data: dict) -> None:
    """Written whole or not at all (a killed writer leaves the previous file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(data, indent=2))
    os.replace(partial, path)


# -- reading -------------------------------------------------------------------------------------------
REQUIRED_INFO = ("codebase_version", "fps", "total_episodes", "total_frames", "total_tasks", "data_path", "features")
REQUIRED_EPISODE = ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
                    "dataset_from_index", "dataset_to_index")


class Dataset:
    """A LeRobotDataset v3.0 folder, checked for consistency when opened (`open_dataset`)."""

    def __init__(self, root: Path, info: dict, features: dict[str, Feature], episodes: list[dict],
                 tasks: list[str], stats: dict):
        self.root, self.info, self.features = root, info, features
        self.episodes, self.tasks, self.stats = episodes, tasks, stats
        self._tables: dict[tuple[int, int], Any] = {}

    @property
    def fps(self) -> int:
        return int(self.info["fps"])

    @property
    def robot_type(self) -> str:
        return str(self.info.get("robot_type") or "")

    @property
    def total_frames(self) -> int:
        return int(self.info["total_frames"])

    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.is_video]

    @property
    def own_features(self) -> dict[str, Feature]:
        """The dataset's features without lerobot's index fields."""
        return {k: f for k, f in self.features.items() if k not in INDEX_FEATURES}

    def _table(self, chunk: int, file: int):
        import pyarrow.parquet as pq
        key = (chunk, file)
        if key not in self._tables:
            self._tables.clear()  # one data file at a time in memory
            self._tables[key] = pq.read_table(self.root / self.info["data_path"].format(chunk_index=chunk,
                                                                                         file_index=file))
        return self._tables[key]

    def episode(self, index: int, videos: bool = True) -> Episode:
        """Episode `index`: its frames (videos decoded, unless `videos` is False) and its metadata."""
        if not 0 <= index < len(self.episodes):
            raise DatasetError(f"{self.root}: episode {index}; expected 0 to {len(self.episodes) - 1}")
        row = self.episodes[index]
        table = self._table(row["data/chunk_index"], row["data/file_index"])
        episode_column = table.column("episode_index").to_numpy()
        rows = np.nonzero(episode_column == index)[0]
        if len(rows) != row["length"]:
            raise DatasetError(f"{self.root}: episode {index} has {len(rows)} frames in its data file; "
                               f"meta/episodes says {row['length']}")
        part = table.slice(int(rows[0]), len(rows))
        frames = {}
        for key, feature in self.features.items():
            if feature.is_video:
                if videos:
                    frames[key] = self.video_frames(index, key)
                continue
            column = part.column(key)
            values = np.asarray(column.combine_chunks().flatten() if feature.shape != (1,) else column,
                                dtype=np.float32 if feature.dtype == "float32" else np.int64)
            frames[key] = values.reshape(len(rows), *([feature.shape[0]] if feature.shape != (1,) else []))
        meta = {k: v for k, v in row.items()
                if k not in REQUIRED_EPISODE and not k.startswith(("stats/", "videos/", "meta/"))}
        return Episode(self.tasks[int(frames["task_index"][0])], frames, meta)

    def video_frames(self, index: int, key: str) -> np.ndarray:
        row = self.episodes[index]
        path = self.root / self.info["video_path"].format(video_key=key, chunk_index=row[f"videos/{key}/chunk_index"],
                                                         file_index=row[f"videos/{key}/file_index"])
        return decode_frames(path, float(row[f"videos/{key}/from_timestamp"]), int(row["length"]), self.fps)

    def __iter__(self) -> Iterator[Episode]:
        for index in range(len(self.episodes)):
            yield self.episode(index)

    def summary(self) -> str:
        lines = [f"{self.root}: LeRobotDataset {self.info['codebase_version']}, robot {self.robot_type or '?'}, "
                 f"{self.fps} fps, {len(self.episodes)} episodes, {self.total_frames} frames "
                 f"({self.total_frames / self.fps:.1f} s), {len(self.tasks)} task(s)"]
        for key, feature in self.own_features.items():
            detail = f"{feature.shape[1]}x{feature.shape[0]} video, {feature.info.get('video.codec', '?')}" \
                if feature.is_video and feature.info else f"{feature.dtype} {list(feature.shape)}"
            names = f": {', '.join(map(str, feature.names))}" if feature.names and not feature.is_video else ""
            lines.append(f"  {key}: {detail}{names}")
        for task in self.tasks:
            lines.append(f"  task: {task}")
        judged = [e["r2s2r/success"] for e in self.episodes if e.get("r2s2r/success") is not None]
        if judged:
            lines.append(f"  outcomes: {sum(judged)} of {len(judged)} judged episodes succeeded"
                         + (f" ({len(self.episodes) - len(judged)} not judged: recorded)"
                            if len(judged) < len(self.episodes) else ""))
        return "\n".join(lines)


def open_dataset(root: str | Path) -> Dataset:
    """Open and check a dataset: its metadata, that every data and video file is there, and
    that frame counts and index ranges agree. DatasetError names the first disagreement."""
    import pyarrow.parquet as pq
    root = Path(root)
    info_path = root / INFO_PATH
    if not info_path.is_file():
        hint = " (an unfinished dataset: its writer never closed it)" if (root / "data").is_dir() else ""
        raise DatasetError(f"{root}: no {INFO_PATH}{hint}; expected a LeRobotDataset v3.0 folder")
    try:
        info = json.loads(info_path.read_text())
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{info_path}: not JSON ({exc})") from None
    missing = [k for k in REQUIRED_INFO if k not in info]
    if missing:
        raise DatasetError(f"{info_path}: lacks {', '.join(missing)}")
    if info["codebase_version"] != CODEBASE_VERSION:
        raise DatasetError(f"{info_path}: codebase_version {info['codebase_version']!r}; expected {CODEBASE_VERSION!r}")
    features = {k: Feature.from_json(k, v, str(info_path)) for k, v in info["features"].items()}
    absent = [k for k in INDEX_FEATURES if k not in features]
    if absent:
        raise DatasetError(f"{info_path}: features lack {', '.join(absent)}")
    for name in (TASKS_PATH,):
        if not (root / name).is_file():
            raise DatasetError(f"{root}: no {name}")
    task_table = pq.read_table(root / TASKS_PATH).to_pydict()
    index_column = next((k for k in task_table if k != "task_index"), None)
    if index_column is None or "task_index" not in task_table:
        raise DatasetError(f"{root / TASKS_PATH}: columns {list(task_table)}; expected the task text and task_index")
    tasks = [t for _, t in sorted(zip(task_table["task_index"], task_table[index_column]))]
    episode_files = sorted((root / "meta/episodes").glob("*/*.parquet"))
    if not episode_files:
        raise DatasetError(f"{root}: no meta/episodes/*/*.parquet")
    episodes: list[dict] = []
    for path in episode_files:
        episodes += pq.read_table(path).to_pylist()
    if episodes:
        absent = [k for k in REQUIRED_EPISODE if k not in episodes[0]]
        if absent:
            raise DatasetError(f"{episode_files[0]}: lacks the columns {', '.join(absent)}")
    episodes.sort(key=lambda e: e["episode_index"])
    if [e["episode_index"] for e in episodes] != list(range(len(episodes))) or len(episodes) != info["total_episodes"]:
        raise DatasetError(f"{root}: meta/episodes holds episodes {[e['episode_index'] for e in episodes][:10]}...; "
                           f"info.json says total_episodes {info['total_episodes']} (expected 0 to n-1, each once)")
    start = 0
    for e in episodes:
        if e["dataset_from_index"] != start or e["dataset_to_index"] != start + e["length"]:
            raise DatasetError(f"{root}: episode {e['episode_index']} covers frames {e['dataset_from_index']} to "
                               f"{e['dataset_to_index']}; expected {start} to {start + e['length']}")
        start += e["length"]
    if start != info["total_frames"]:
        raise DatasetError(f"{root}: the episodes hold {start} frames; info.json says total_frames {info['total_frames']}")
    rows: dict[tuple[int, int], int] = {}
    for e in episodes:
        rows[(e["data/chunk_index"], e["data/file_index"])] = rows.get((e["data/chunk_index"], e["data/file_index"]),
                                                                       0) + e["length"]
    for (chunk, file), expected in rows.items():
        path = root / info["data_path"].format(chunk_index=chunk, file_index=file)
        if not path.is_file():
            raise DatasetError(f"{root}: {path.relative_to(root)} is missing (episodes refer to it)")
        try:
            found = pq.read_metadata(path).num_rows
        except Exception as exc:
            raise DatasetError(f"{path}: unreadable parquet ({exc}): truncated?") from None
        if found != expected:
            raise DatasetError(f"{path}: {found} frames; the episodes that refer to it hold {expected}")
    videos = [k for k, f in features.items() if f.is_video]
    for key in videos:
        ends: dict[tuple[int, int], float] = {}
        for e in episodes:
            file = (e[f"videos/{key}/chunk_index"], e[f"videos/{key}/file_index"])
            ends[file] = max(ends.get(file, 0.0), float(e[f"videos/{key}/to_timestamp"]))
        for (chunk, file), end in ends.items():
            path = root / info["video_path"].format(video_key=key, chunk_index=chunk, file_index=file)
            if not path.is_file():
                raise DatasetError(f"{root}: {path.relative_to(root)} is missing (episodes refer to it)")
            _check_video_length(path, end, info["fps"])
    stats = json.loads((root / STATS_PATH).read_text()) if (root / STATS_PATH).is_file() else {}
    return Dataset(root, info, features, episodes, tasks, stats)


def _check_video_length(path: Path, end_s: float, fps: int) -> None:
    import av
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            frames = stream.frames
            if not frames and stream.duration is not None:
                frames = round(float(stream.duration * stream.time_base) * fps)
    except Exception as exc:
        raise DatasetError(f"{path}: unreadable video ({type(exc).__name__}: {exc}): truncated?") from None
    expected = round(end_s * fps)
    if frames < expected:
        raise DatasetError(f"{path}: {frames} frames; the episodes that refer to it need {expected}")


def write_episodes(root: str | Path, fps: int, features: Mapping[str, Feature], robot_type: str,
                   episodes: Iterable[Episode], codec: str | None = None) -> Path:
    """A dataset of `episodes`, written whole (DatasetWriter)."""
    writer = DatasetWriter(root, fps, features, robot_type, codec)
    for episode in episodes:
        writer.add(episode)
    return writer.close()


def merge(sources: Sequence[str | Path], out: str | Path,
          labels: Sequence[Mapping[str, Any] | None] | None = None) -> Path:
    """One dataset of the episodes of `sources`, in order: they must have the same fps, robot and
    features (videos are decoded and encoded again). `labels[i]`: per-episode columns added to
    every episode of source i (r2s2r improve's round and origin); None keeps what it has."""
    datasets = [open_dataset(s) for s in sources]
    if not datasets:
        raise DatasetError("merge: no dataset given")
    labels = list(labels) if labels is not None else [None] * len(datasets)
    if len(labels) != len(datasets):
        raise DatasetError(f"merge: {len(labels)} labels for {len(datasets)} datasets; expected one per dataset")
    first = datasets[0]
    shape = {k: (f.dtype, f.shape, f.names) for k, f in first.own_features.items()}
    for other in datasets[1:]:
        other_shape = {k: (f.dtype, f.shape, f.names) for k, f in other.own_features.items()}
        if other.fps != first.fps or other.robot_type != first.robot_type or other_shape != shape:
            raise DatasetError(f"merge: {other.root} has {other.fps} fps, robot {other.robot_type!r}, features "
                               f"{other_shape}; expected those of {first.root}: {first.fps} fps, robot "
                               f"{first.robot_type!r}, features {shape}")
    features = {k: Feature(f.dtype, f.shape, f.names) for k, f in first.own_features.items()}

    def episodes() -> Iterator[Episode]:
        for dataset, label in zip(datasets, labels):
            for episode in dataset:
                episode.frames = {k: v for k, v in episode.frames.items() if k in features}
                episode.meta = {**episode.meta, "r2s2r/source": str(dataset.root), **(label or {})}
                yield episode
    return write_episodes(out, first.fps, features, first.robot_type, episodes())


__all__ = ["DatasetError", "Feature", "Episode", "DatasetWriter", "Dataset", "open_dataset", "write_episodes",
           "merge", "vector_stats", "ImageHistogram", "INDEX_FEATURES", "CODEBASE_VERSION"]
