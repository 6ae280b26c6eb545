"""The CPU candidates' seccomp filters are written where only this user can reach them. In a
cell that is its scratch; outside a cell (an in-process worker) it was a fixed name in the
shared /tmp (/tmp/candidate-load.bpf): another user on the machine could create the file first,
keep it writable by everyone and swap in a filter that allows everything between our write
and the kernel host's read, or simply make it unwritable (then no CPU worker of ours starts:
as nobody after a root run, "PermissionError: /tmp/candidate-load.bpf")."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from app.gpu import sandbox
from app.gpu.cpu import toolchain
from app.gpu.cpu.kernel_host import KernelHost, host_supported
from app.gpu.cpu.worker import _start_host, host_program_for


@pytest.mark.skipif(not host_supported(), reason="needs the kernel host")
def test_filters_outside_a_cell_are_in_a_private_directory():
    assert sandbox.current_plan() is None  # this test process is no cell
    host = _start_host(host_program_for(toolchain()), 0)
    try:
        assert isinstance(host, KernelHost)
        filters = [a for a in host.proc.args if str(a).endswith(".bpf")]  # its command line
        if not filters:
            pytest.skip(f"no seccomp filters on this machine: {host.proc.args}")
        for path in filters:
            where = os.path.dirname(path)
            info = os.stat(where)
            assert os.path.realpath(where) != os.path.realpath(tempfile.gettempdir()), path
            assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700, \
                (where, oct(info.st_mode))
            assert os.stat(path).st_uid == os.getuid()
    finally:
        host.close()
