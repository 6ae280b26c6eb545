"""The replay backend's worker side: the recorded table a configuration's measurement is read
from (a Kernel Tuner cache file measured on a real GPU). Where the cpu and cuda backends measure
a candidate in a sandboxed worker process, replay only looks a record up: nothing untrusted
runs, so there is no process; this module is what stands in for it.

Kernel Tuner's failure markers become failed evaluations (FAILURE_MARKERS); configurations
absent from the file were excluded by the space's restrictions and are never evaluations.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.space import SearchSpace
from app.core.types import COMPILE_FAILED, INVALID, RUNTIME_FAILED

FAILURE_MARKERS = {
    "CompilationFailedConfig": COMPILE_FAILED,
    "RuntimeFailedConfig": RUNTIME_FAILED,
    "InvalidConfig": INVALID,
}


class CacheFileError(ValueError):
    """A Kernel Tuner cache file is missing, unreadable or not in the expected format."""


@dataclass
class RecordedSpace:
    path: Path
    kernel_name: str
    device_name: str
    problem_size: Any
    objective: str
    params: dict[str, list[Any]]
    records: dict[tuple, dict[str, Any]]  # value tuple -> cache record

    @property
    def n_configs(self) -> int:
        return len(self.records)

    def valid_times(self) -> list[float]:
        return [r["time"] for r in self.records.values() if is_number(r.get("time"))]

    def space(self, restrictions: list[str] | None = None) -> SearchSpace:
        return SearchSpace(dict(self.params), restrictions=list(restrictions or []),
                           allowed=frozenset(self.records))


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) and v < 1e30


_CACHE: dict[tuple[str, float], RecordedSpace] = {}


def load_cache_file(path: str | Path) -> RecordedSpace:
    """Load a .json or .json.gz Kernel Tuner cache file (also the unterminated form Kernel Tuner
    writes while a run is in progress)."""
    path = Path(path)
    try:
        stamp = path.stat().st_mtime
    except FileNotFoundError:
        raise CacheFileError(f"cache file {str(path)!r} does not exist") from None
    if (cached := _CACHE.get((str(path), stamp))) is not None:
        return cached
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise CacheFileError(f"cache file {str(path)!r} is corrupt or unreadable: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:  # Kernel Tuner leaves the file open-ended while tuning
            data = json.loads(text.rstrip().rstrip(",") + "}}")
        except json.JSONDecodeError as exc:
            raise CacheFileError(f"cache file {str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "cache" not in data or "tune_params" not in data:
        raise CacheFileError(f"cache file {str(path)!r} is not a Kernel Tuner cache "
                             "(needs 'tune_params' and 'cache')")
    tune_params = data["tune_params"]
    keys = data.get("tune_params_keys") or list(tune_params)
    if not isinstance(tune_params, dict) or not keys or any(k not in tune_params for k in keys):
        raise CacheFileError(f"cache file {str(path)!r}: 'tune_params_keys' and 'tune_params' disagree")
    params = {k: list(tune_params[k]) for k in keys}
    records: dict[tuple, dict[str, Any]] = {}
    for ckey, rec in data["cache"].items():
        if not isinstance(rec, dict) or "time" not in rec:
            raise CacheFileError(f"cache file {str(path)!r}: entry {ckey!r} has no 'time'")
        try:
            values = tuple(rec[k] for k in keys)
        except KeyError as exc:
            raise CacheFileError(f"cache file {str(path)!r}: entry {ckey!r} lacks parameter {exc}") from None
        records[values] = rec
    if not records:
        raise CacheFileError(f"cache file {str(path)!r} holds no configurations")
    space = RecordedSpace(
        path=path, kernel_name=str(data.get("kernel_name", path.stem)),
        device_name=str(data.get("device_name", "unknown GPU")),
        problem_size=data.get("problem_size"), objective=str(data.get("objective") or "time"),
        params=params, records=records,
    )
    _CACHE.clear()  # keep one file in memory at a time per process; they are large
    _CACHE[(str(path), stamp)] = space
    return space
