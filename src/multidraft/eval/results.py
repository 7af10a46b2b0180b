"""The bench results file, DIR/results.jsonl: a header line (configuration, environment), then one JSON line per
prompt x method, each appended and fsynced as a whole line, so an interrupted run resumes where it stopped.

A leaf module: the runner, the report and the CLI all read it, and it imports none of them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Callable

from multidraft.errors import MultidraftError
from multidraft.fsutil import atomic_path

FORMAT = 1
RESULTS_NAME = "results.jsonl"
BASELINE = "hf_greedy"      # the column every speedup and equality check is measured against, unless --baseline
# says otherwise: HF generate() greedy, or our own greedy (no HF model loaded: `make demo`'s short run).
BASELINE_NAMES = {"hf_greedy": "HF greedy", "greedy": "our greedy"}     # the baselines, as tables and reports name them
BASELINES = tuple(BASELINE_NAMES)


def baseline_of(header: dict) -> str:
    """The baseline method of a results file (folders written before --baseline existed: hf_greedy)."""
    return (header.get("config") or {}).get("baseline", BASELINE)


class BenchConfigError(MultidraftError, ValueError):
    """A bench output folder that holds results of another configuration, or a file that is not bench results."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _parse_lines(data: bytes, path: Path) -> list[dict]:
    """Complete JSON lines of a results file; a truncated last line (no newline) is dropped."""
    lines = data.split(b"\n")[:-1]        # the piece after the last newline is empty or a partial line
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise BenchConfigError(f"{path} line {number} is not valid JSON; the file was edited or corrupted "
                                   f"(delete that line to resume)") from None
    return records


def read_results(path) -> tuple[dict, list[dict]]:
    """(header, rows) of a results.jsonl. Raises BenchConfigError when it is not a bench results file."""
    path = Path(path)
    if path.is_dir() or (not path.exists() and path.suffix != ".jsonl"):     # a bench folder, made or not yet
        path = path / RESULTS_NAME
    if not path.exists():
        raise BenchConfigError(f"no bench results at {path}; run `multidraft bench --out {path.parent}` first")
    records = _parse_lines(path.read_bytes(), path)
    if not records or records[0].get("kind") != "header":
        raise BenchConfigError(f"{path} is not a multidraft bench results file (no header line)")
    return records[0], [r for r in records[1:] if r.get("kind") == "row"]


class ResultsFile:
    """results.jsonl: a header line, then rows appended one complete line at a time (write + flush + fsync)."""

    def __init__(self, path):
        self.path = Path(path)

    def start(self, header: dict, retry: Callable[[dict], bool] = lambda row: False) -> list[dict]:
        """Check an existing file is compatible, then rewrite it as the new header plus its complete rows.

        The rewrite (temporary file + rename) also drops a line cut short by an interruption, and the rows for which
        `retry(row)` is true (they will be run again). Returns the rows kept.
        """
        rows: list[dict] = []
        if self.path.exists() and self.path.stat().st_size:
            old, rows = read_results(self.path)
            if old.get("identity") != header["identity"]:
                diff = {k: (old.get("identity", {}).get(k), v) for k, v in header["identity"].items()
                        if old.get("identity", {}).get(k) != v}
                described = "; ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in diff.items())
                raise BenchConfigError(f"{self.path.parent} holds results of another configuration ({described}); "
                                       f"use another --out folder, or the same settings to resume")
            header = {**header, "created": old.get("created", header["created"]),
                      "runs": old.get("runs", []) + header["runs"],
                      "methods": _merge_by(old.get("methods", []), header["methods"], "label"),
                      "tasks": list(dict.fromkeys(old.get("tasks", []) + header["tasks"]))}
            rows = [row for row in rows if not retry(row)]
        self.header = header
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as tmp:          # a crash leaves the old file or the new one, whole
            tmp.write_text("".join(json.dumps(record, default=str) + "\n" for record in [header] + rows))
        return rows

    def append(self, row: dict) -> None:
        line = (json.dumps(row, default=str) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)          # one write of a whole line; a crash leaves at most a partial last line
            os.fsync(fd)
        finally:
            os.close(fd)


def _merge_by(old: list[dict], new: list[dict], key: str) -> list[dict]:
    merged = {item[key]: item for item in old}
    merged.update({item[key]: item for item in new})
    return list(merged.values())
