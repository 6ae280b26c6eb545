"""Build caches no other cell can plant into: compiled candidates and references live in the
cell's own scratch directory (removed with the cell), never in the shared cache every cell may
write. A library found there was built by this cell's compile helper from the source its key
names; a reference found in the shared cache could have been planted by any earlier cell (a
goal's Python reference, a candidate renaming its own library) and would be loaded into the
worker itself and trusted for correctness. Cost: each new worker builds what it needs again.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _process_dir() -> str:
    """Outside a cell (tests, the sandbox switched off without a plan): this process's own."""
    path = tempfile.mkdtemp(prefix="kernelswarm-builds-")
    atexit.register(shutil.rmtree, path, True)
    return path


def private_dir(name: str) -> Path:
    """`name` under this cell's scratch directory (created), or under this process's own."""
    from app.gpu.sandbox import current_plan

    plan = current_plan()
    path = Path(plan.scratch if plan is not None else _process_dir()) / name
    path.mkdir(parents=True, exist_ok=True)
    return path
