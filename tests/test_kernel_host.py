"""The kernel host (app/gpu/cpu/host/kernel_host.c) on its own: real gcc, a real zygote and child.
Arguments of every kind reach the kernel with their values (the calling convention trick
passes integer-class and float-class arguments in order, whatever their interleaving)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from app.gpu.cpu import find_compiler
from app.gpu.cpu.kernel_host import ArrayArg, HostDied, KernelHost, Scalar, host_binary
from app.gpu.sandbox import seccomp

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

MIXED = r"""
#include <stdint.h>
void mixed(float *out, const float *a, long n, float s, int32_t neg, double t, uint64_t big,
           const float *b, float u) {
    for (long i = 0; i < n; i++) out[i] = a[i] * s + (float)t + b[i] * u;
    out[n] = (float)neg;
    out[n + 1] = (float)(big >> 40);
}
void crash(float *out) { out[-1000000000L] = 1.0f; }
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    d = tmp_path_factory.mktemp("host") / "a path with spaces"  # a user's home may have them
    d.mkdir()
    (d / "k.c").write_text(MIXED)
    subprocess.run([find_compiler(), "-O2", "-shared", "-fPIC", str(d / "k.c"), "-o",
                    str(d / "k.so")], check=True)
    filters = None
    if seccomp.available() == "":
        filters = (str(d / "load.bpf"), str(d / "run.bpf"))
        seccomp.export_candidate_filters(*filters)
    h = KernelHost(str(host_binary(find_compiler(), "test", d)), filters, flush_bytes=1 << 20)
    h.lib = str(d / "k.so")
    yield h
    h.close()


def test_every_argument_kind_reaches_the_kernel(host):
    host.load(host.lib, "mixed")
    n = 100
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 2.0, np.float32)
    out = np.full(n + 2, np.nan, np.float32)
    big = (3 << 40) | 12345 | (1 << 63)  # above LONG_MAX: the bits must survive
    ms = host.call([ArrayArg(out, copy_back=True), ArrayArg(a), Scalar("l", n), Scalar("f", 1.5),
                    Scalar("l", -7), Scalar("d", 0.25), Scalar("l", big), ArrayArg(b),
                    Scalar("f", -0.5)], timed=True, flush=True)
    assert ms >= 0
    np.testing.assert_allclose(out[:n], a * 1.5 + 0.25 - 1.0)
    assert out[n] == -7.0 and out[n + 1] == float(big >> 40)
    host.check_reports()  # an honest kernel's reports agree with the worker's clock


def test_a_crash_ends_only_the_candidates_process(host):
    host.load(host.lib, "crash")
    with pytest.raises(HostDied) as info:
        host.call([ArrayArg(np.zeros(4, np.float32), copy_back=True)])
    assert info.value.signal_name == "SIGSEGV"
    host.load(host.lib, "mixed")  # the zygote lives on: a fresh child for the next candidate
    out = np.zeros(3, np.float32)
    host.call([ArrayArg(out, copy_back=True), ArrayArg(np.ones(1, np.float32)), Scalar("l", 1),
               Scalar("f", 2.0), Scalar("l", 0), Scalar("d", 0.0), Scalar("l", 0),
               ArrayArg(np.zeros(1, np.float32)), Scalar("f", 0.0)])
    assert out[0] == 2.0


def test_the_arena_grows_for_a_larger_call(host):
    host.load(host.lib, "mixed")
    before = host.arena.size
    n = 3 * before // 8  # two arrays of n floats do not fit
    a = np.ones(n, np.float32)
    out = np.zeros(n + 2, np.float32)
    host.call([ArrayArg(out, copy_back=True), ArrayArg(a), Scalar("l", n), Scalar("f", 3.0),
               Scalar("l", 0), Scalar("d", 0.0), Scalar("l", 0), ArrayArg(np.zeros(n, np.float32)),
               Scalar("f", 0.0)])
    assert host.arena.size > before and out[0] == out[n - 1] == 3.0


def _judged(timed: list[tuple[int, int, int]]) -> bool:
    """check_reports on calls as the zygote saw them (window, report, CPU time; ns), with a
    channel that costs 10 us. No process is needed for the judgement itself."""
    from app.gpu.cpu.kernel_host import KernelHost

    host = KernelHost.__new__(KernelHost)
    host.null_ns, host.timed = [10_000] * 25, list(timed)
    return host.check_reports()


def test_waiting_for_a_core_is_clamped_never_refused_as_forged():
    """An honest 0.1 ms call on a loaded machine: the zygote continued it, but it waited 1 ms
    for a core. Its CPU time is its report, so it is no forgery (its figure was already the
    clamped window): the check says 'disagrees', it does not refuse."""
    assert _judged([(1_100_000, 100_000, 100_000)] * 20) is False


def test_working_far_longer_than_reported_is_refused_as_forged():
    """The forger's signature: it computed for 3 ms (the kernel counts its CPU time) and
    reported 0.5 us."""
    from app.gpu.cpu.kernel_host import ForgedTiming

    with pytest.raises(ForgedTiming):
        _judged([(3_100_000, 500, 3_000_000)] * 20)
