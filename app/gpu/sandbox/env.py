"""The environment a worker or compiler process starts with: an allow-list, never the user's.

Candidate code can read its own environment (getenv, /proc/self/environ, the initial stack), so
the process is started with a fresh one rather than scrubbed after the fact: API keys, tokens and
the user's HOME never reach it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# Names passed through as they are (locale, search path, time zone).
ALLOWED_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "CC", "SOURCE_DATE_EPOCH",
                           "LD_LIBRARY_PATH"})  # where many CUDA installs keep libcuda/libnvrtc
# Prefixes of the runtime knobs the kernels' libraries read (threads, BLAS, CUDA, CuPy).
ALLOWED_PREFIXES = ("LC_", "OMP_", "GOMP_", "OPENBLAS_", "MKL_", "CUDA_", "CUPY_", "NVIDIA_",
                    "NV_", "__GL_")
# Never passed, whatever the prefix: anything that looks like a credential.
SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION)", re.IGNORECASE)
NEVER_PREFIXES = ("KERNELSWARM_LLM_",)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def allowed(name: str) -> bool:
    if SECRET.search(name) or name.startswith(NEVER_PREFIXES):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def cell_environment(scratch: str, extra: Mapping[str, str] | None = None,
                     source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `source` (default os.environ), HOME and TMPDIR in `scratch`,
    plus `extra` (set by the application itself, e.g. the cache directory)."""
    source = os.environ if source is None else source
    env = {k: v for k, v in source.items() if allowed(k)}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update({"HOME": scratch, "TMPDIR": scratch, "TMP": scratch, "TEMP": scratch,
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"})
    env.update({k: v for k, v in (extra or {}).items() if not SECRET.search(k)})
    return env
