"""A worker cell enters its walls before it unpickles its handler's arguments. A goal's
operator (your own kernel's, say) imports numpy when unpickled, numpy starts OpenBLAS's
threads, and a process with threads cannot enter a user namespace: for a user who is not root
the cell of your own kernel had no network, PID, IPC or mount namespace (as nobody:
"network off: unshare refused (Invalid argument)"), while a catalog goal's cell had them.
Root enters the namespaces either way, so here the cell's own log is the witness."""

from __future__ import annotations

import numpy as np

from app.gpu.worker import Deadlines, WorkerPool


class Echo:
    """Handler built from an argument whose unpickling imports numpy."""

    def __init__(self, array: np.ndarray) -> None:
        self.total = float(array.sum())

    def __call__(self, request, progress):
        return self.total


def test_a_cell_with_numpy_arguments_enters_its_walls_with_one_thread():
    pool = WorkerPool("test_cell_enters_single_threaded:Echo", [(np.arange(4.0),)],
                      name="numpy-args-")
    try:
        reply = pool.call("sum", Deadlines(compile_s=30.0, run_s=30.0))
        assert reply.fault is None and reply.result == 6.0
        worker = pool.workers[0]
        log = worker._read_log(0)
        assert "threads before entering its sandbox" not in log, log
        refused = {w: line for w, line in worker.protections.items() if "unshare refused" in line}
        assert not refused, refused  # as nobody, before: network, pid, ipc and file view
    finally:
        pool.close()
