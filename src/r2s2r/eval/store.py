"""The trial store: one SQLite file (WAL), one row per trial, written as each trial ends.

A row holds the trial's inputs (policy, task, perturbation, seed, loop rate) and its result
(success, margin, failure stage, metrics, simulated and wall durations), keyed by the
trial's deterministic id (`runner.TrialSpec.id`). A campaign is a named, ordered list of
trial ids; the same trial run by two campaigns is stored once. A campaign's place holds the
trial its latest run put there (a newer r2s2r whose sampler proposes otherwise replaces it).
Each trial is committed in its own transaction, so a campaign killed at any moment (kill -9
included) loses only the trials still running, and resuming skips every id already stored.

Floats are stored as SQLite REALs (IEEE doubles) and JSON with `repr` precision, so what is
read back equals what was written, bit for bit.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Iterable

from r2s2r.eval.runner import TrialResult

SCHEMA = """
CREATE TABLE IF NOT EXISTS trials (
    id TEXT PRIMARY KEY,
    policy TEXT NOT NULL,
    task TEXT NOT NULL,
    seed INTEGER NOT NULL,
    control_rate_hz REAL,
    perturbation TEXT NOT NULL,
    success INTEGER NOT NULL,
    margin REAL NOT NULL,
    stage TEXT NOT NULL,
    sim_time_s REAL NOT NULL,
    wall_s REAL NOT NULL,
    metrics TEXT NOT NULL,
    finished REAL NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS campaigns (
    name TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS members (
    campaign TEXT NOT NULL,
    idx INTEGER NOT NULL,
    trial TEXT NOT NULL REFERENCES trials(id),
    sampler TEXT NOT NULL,
    PRIMARY KEY (campaign, idx)
);
CREATE INDEX IF NOT EXISTS members_trial ON members(trial);
"""

_COLUMNS = ("id", "policy", "task", "seed", "control_rate_hz", "perturbation", "success", "margin", "stage",
            "sim_time_s", "wall_s", "metrics", "detail")


class StoreError(RuntimeError):
    """The store cannot do what was asked; the message says what and why."""


def _row_to_result(row: sqlite3.Row) -> TrialResult:
    return TrialResult(id=row["id"], policy=row["policy"], task=row["task"], seed=row["seed"],
                       control_rate_hz=row["control_rate_hz"], perturbation=json.loads(row["perturbation"]),
                       success=bool(row["success"]), margin=row["margin"], stage=row["stage"],
                       sim_time_s=row["sim_time_s"], wall_s=row["wall_s"], metrics=json.loads(row["metrics"]),
                       detail=row["detail"])


class TrialStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One writer (the campaign's driver process); readers (reports) may open it at any time.
        self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed trial survives a killed process
        self.db.executescript(SCHEMA)
        # Stores written before trials recorded why a policy failed to act gain the column, empty.
        if "detail" not in {row["name"] for row in self.db.execute("PRAGMA table_info(trials)")}:
            self.db.execute("ALTER TABLE trials ADD COLUMN detail TEXT NOT NULL DEFAULT ''")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "TrialStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- campaigns ------------------------------------------------------------------------------
    def open_campaign(self, name: str, config: dict) -> None:
        """Record a campaign's configuration; resuming it requires the same configuration."""
        text = json.dumps(config, sort_keys=True)
        row = self.db.execute("SELECT config FROM campaigns WHERE name = ?", (name,)).fetchone()
        if row is None:
            self.db.execute("INSERT INTO campaigns (name, config, created) VALUES (?, ?, ?)", (name, text, time.time()))
            return
        if row["config"] != text:
            stored = json.loads(row["config"])
            changed = sorted(k for k in set(stored) | set(config) if stored.get(k) != config.get(k))
            raise StoreError(f"{self.path}: campaign {name!r} was started with other settings ({', '.join(changed)} "
                             f"differ); resume it with the same settings, or give another --campaign name or store")

    def campaign_config(self, name: str) -> dict:
        row = self.db.execute("SELECT config FROM campaigns WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no campaign {name!r}; campaigns: {', '.join(self.campaigns()) or 'none'}")
        return json.loads(row["config"])

    def campaigns(self) -> list[str]:
        return [r["name"] for r in self.db.execute("SELECT name FROM campaigns ORDER BY created")]

    # -- trials ---------------------------------------------------------------------------------
    def add(self, result: TrialResult, campaign: str, idx: int, sampler: str) -> None:
        """Store one finished trial and its place in a campaign, in one transaction."""
        r = result
        values = (r.id, r.policy, r.task, r.seed, r.control_rate_hz, json.dumps(r.perturbation, sort_keys=True),
                  int(r.success), r.margin, r.stage, r.sim_time_s, r.wall_s, json.dumps(r.metrics, sort_keys=True),
                  r.detail, time.time())
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(f"INSERT OR IGNORE INTO trials ({', '.join(_COLUMNS)}, finished) "
                            f"VALUES ({', '.join('?' * (len(_COLUMNS) + 1))})", values)
            self.db.execute("INSERT OR REPLACE INTO members (campaign, idx, trial, sampler) VALUES (?, ?, ?, ?)",
                            (campaign, idx, r.id, sampler))

    def link(self, trial_id: str, campaign: str, idx: int, sampler: str) -> None:
        """Make a stored trial part of a campaign (a trial another campaign already ran)."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT OR REPLACE INTO members (campaign, idx, trial, sampler) VALUES (?, ?, ?, ?)",
                            (campaign, idx, trial_id, sampler))

    def stored_ids(self, ids: Iterable[str]) -> set[str]:
        ids = list(ids)
        found: set[str] = set()
        for start in range(0, len(ids), 500):  # SQLite's limit on bound parameters
            chunk = ids[start:start + 500]
            rows = self.db.execute(f"SELECT id FROM trials WHERE id IN ({', '.join('?' * len(chunk))})", chunk)
            found.update(r["id"] for r in rows)
        return found

    def get(self, trial_id: str) -> TrialResult:
        row = self.db.execute("SELECT * FROM trials WHERE id = ?", (trial_id,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no trial {trial_id!r}")
        return _row_to_result(row)

    def find(self, prefix: str) -> TrialResult:
        """A trial by its id or a unique prefix of it (as reports print them)."""
        rows = self.db.execute("SELECT * FROM trials WHERE id LIKE ? || '%' LIMIT 2", (prefix,)).fetchall()
        if not rows:
            raise StoreError(f"{self.path}: no trial with id {prefix!r}")
        if len(rows) > 1:
            raise StoreError(f"{self.path}: {prefix!r} is the prefix of several trial ids; give more of it")
        return _row_to_result(rows[0])

    def results(self, campaign: str | None = None, sampler: str | None = None) -> list[TrialResult]:
        """Every trial (of a campaign, in campaign order; of one sampler of it)."""
        if campaign is None:
            rows = self.db.execute("SELECT * FROM trials ORDER BY finished, id")
        else:
            query = "SELECT t.* FROM members m JOIN trials t ON t.id = m.trial WHERE m.campaign = ?"
            args: tuple = (campaign,)
            if sampler is not None:
                query += " AND m.sampler = ?"
                args += (sampler,)
            rows = self.db.execute(query + " ORDER BY m.idx", args)
        return [_row_to_result(r) for r in rows]

    def samplers(self, campaign: str) -> dict[str, str]:
        """Trial id -> the sampler (or phase) that proposed it in this campaign."""
        rows = self.db.execute("SELECT trial, sampler FROM members WHERE campaign = ?", (campaign,))
        return {r["trial"]: r["sampler"] for r in rows}

    def count(self, campaign: str | None = None) -> int:
        if campaign is None:
            return self.db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        return self.db.execute("SELECT COUNT(*) FROM members WHERE campaign = ?", (campaign,)).fetchone()[0]


__all__ = ["TrialStore", "StoreError"]
