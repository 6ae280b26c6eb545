"""The replay backend: recorded tuning spaces (Kernel Tuner cache files) measured on real GPUs.

worker.py: the recorded table a measurement is read from (it stands in for the worker process
the cpu and cuda backends measure in); evaluator.py: the engine side (ReplayEvaluator). The
package's public names are re-exported here for their users.
"""

from app.gpu.replay.evaluator import (
    ReplayEvaluator,
    check_replay_goal,
    make_replay_evaluator,
    probe_recorded_spaces,
)
from app.gpu.replay.worker import (
    FAILURE_MARKERS,
    CacheFileError,
    RecordedSpace,
    is_number,
    load_cache_file,
)

__all__ = ["FAILURE_MARKERS", "CacheFileError", "RecordedSpace", "ReplayEvaluator", "check_replay_goal",
           "is_number", "load_cache_file", "make_replay_evaluator", "probe_recorded_spaces"]
