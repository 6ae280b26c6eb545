"""Theoretical occupancy of a CUDA kernel: how many blocks (and warps) of it one SM holds at
once, and which resource stops there being more.

The rules are those of NVIDIA's CUDA Occupancy Calculator as the CUDA toolkit ships them in
`cuda_occupancy.h` (`cudaOccMaxActiveBlocksPerMultiprocessor` and its helpers
`cudaOccMaxBlocksPerSMRegsLimit`, `...SmemLimit`, `...WarpsLimit`,
`cudaOccMaxBlocksPerMultiprocessor`, `cudaOccRegAllocationGranularity`,
`cudaOccSMemAllocationGranularity`, `cudaOccSMemPerBlock`), with the per-SM limits of the CUDA
C++ Programming Guide's "Technical Specifications per Compute Capability" table:

- warps: a block takes ceil(threads / warp size) warp slots; an SM has max threads / warp size.
- registers: allocated per warp, registers x warp size rounded up to 256 (the allocation unit);
  the register file is split evenly over 4 sub-partitions (schedulers), each holding
  floor((registers per SM / 4) / registers per warp) warps; a block whose warps, rounded up to a
  multiple of 4, need more than the registers a block may use cannot launch at all.
- shared memory: static + dynamic + the driver's per-block reservation (1 KiB from sm_80 on),
  rounded up to the allocation unit (256 bytes on sm_7x, 128 from sm_80 on), against the shared
  memory per SM; a block above the per-block limit (opt-in maximum + reservation) cannot launch.
- blocks: a fixed number of resident blocks per SM.

Active blocks = the least of the four; occupancy = active warps / max warps per SM. The figure
assumes the largest shared-memory carveout (the calculator's default) and no thread-block
clusters. Pure arithmetic: nothing here touches a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

WARPS = "warps/threads"
BLOCKS = "blocks"
REGISTERS = "registers"
SHARED = "shared memory"
# When several resources stop the count at the same number of blocks, the one named is the first
# here: the hardware ceilings (warp slots, block slots) before what the kernel chose to use.
FACTOR_ORDER = (WARPS, BLOCKS, REGISTERS, SHARED)


@dataclass(frozen=True)
class SmLimits:
    """One SM's limits (cudaDeviceProp names in comments)."""

    max_threads_per_sm: int  # maxThreadsPerMultiProcessor
    max_blocks_per_sm: int  # maxBlocksPerMultiProcessor
    shared_per_sm: int  # sharedMemPerMultiprocessor, bytes
    shared_per_block_optin: int  # sharedMemPerBlockOptin, bytes
    reserved_shared_per_block: int  # reservedSharedMemPerBlock, bytes
    shared_alloc_unit: int  # bytes (cudaOccSMemAllocationGranularity)
    regs_per_sm: int = 65536  # regsPerMultiprocessor
    regs_per_block: int = 65536  # regsPerBlock
    shared_per_block: int = 48 * 1024  # sharedMemPerBlock (without opting in)
    warp_size: int = 32  # warpSize
    max_threads_per_block: int = 1024  # maxThreadsPerBlock
    reg_alloc_unit: int = 256  # registers, per warp (cudaOccRegAllocationGranularity)
    max_regs_per_thread: int = 255  # what ptxas may give a thread
    sub_partitions: int = 4  # cudaOccSubPartitionsPerMultiprocessor

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


KIB = 1024
# The Programming Guide's table for the architectures this app targets (fallback when the device
# does not report a limit itself).
TABLE: dict[str, SmLimits] = {
    "70": SmLimits(2048, 32, 96 * KIB, 96 * KIB, 0, 256),  # V100
    "75": SmLimits(1024, 16, 64 * KIB, 64 * KIB, 0, 256),  # T4, RTX 20xx
    "80": SmLimits(2048, 32, 164 * KIB, 163 * KIB, KIB, 128),  # A100
    "86": SmLimits(1536, 16, 100 * KIB, 99 * KIB, KIB, 128),  # RTX 30xx, A40
    "89": SmLimits(1536, 24, 100 * KIB, 99 * KIB, KIB, 128),  # RTX 40xx, L4, L40
    "90": SmLimits(2048, 32, 228 * KIB, 227 * KIB, KIB, 128),  # H100, H200
}

# what the worker's device info (app.gpu.cuda.worker.CudaWorker.info) may report, by field name
INFO_KEYS = ("max_threads_per_sm", "max_blocks_per_sm", "shared_per_sm", "shared_per_block_optin",
             "reserved_shared_per_block", "regs_per_sm", "regs_per_block", "shared_per_block",
             "warp_size", "max_threads_per_block")


def table_limits(compute_capability: str | int) -> SmLimits:
    """The table's row for a compute capability ("86", 86 or "8.6"); an architecture the table
    does not know takes the newest row at or below it (the oldest row below sm_70)."""
    cc = int(str(compute_capability).replace(".", "").replace("sm_", "") or 0)
    known = sorted(int(k) for k in TABLE)
    below = [k for k in known if k <= cc]
    return TABLE[str(below[-1] if below else known[0])]


def device_limits(info: dict[str, Any]) -> SmLimits:
    """The limits of the device the worker describes: what it reported itself, the table's row
    for its compute capability for anything it did not."""
    base = table_limits(info.get("compute_capability", "90"))
    given = {k: int(info[k]) for k in INFO_KEYS
             if isinstance(info.get(k), (int, float)) and not isinstance(info[k], bool)
             and (info[k] > 0 or k == "reserved_shared_per_block")}
    return replace(base, **given)


@dataclass(frozen=True)
class Occupancy:
    active_blocks_per_sm: int
    active_warps_per_sm: int
    max_warps_per_sm: int
    limit: str  # the resource that stops there being more blocks (FACTOR_ORDER on a tie)
    block_limits: dict[str, int] = field(default_factory=dict)  # blocks per SM each resource allows
    registers_per_block: int = 0  # as allocated (per-warp granularity)
    shared_per_block: int = 0  # as allocated (reservation and granularity included)

    @property
    def occupancy(self) -> float:
        return self.active_warps_per_sm / self.max_warps_per_sm if self.max_warps_per_sm else 0.0


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit if unit > 0 else x


def occupancy(registers: int, threads_per_block: int, static_shared: int = 0,
              dynamic_shared: int = 0, limits: SmLimits | None = None) -> Occupancy:
    """Theoretical occupancy of blocks of `threads_per_block` threads using `registers` per
    thread and `static_shared` + `dynamic_shared` bytes of shared memory (default: sm_90)."""
    lim = limits or TABLE["90"]
    big = 1 << 30  # "no limit": a resource the kernel does not use
    warps_per_block = -(-max(threads_per_block, 0) // lim.warp_size)

    # warp slots (cudaOccMaxBlocksPerSMWarpsLimit)
    by_warps = (0 if threads_per_block <= 0 or threads_per_block > lim.max_threads_per_block
                else lim.max_warps_per_sm // warps_per_block)

    # registers (cudaOccMaxBlocksPerSMRegsLimit)
    regs_per_warp = _round_up(max(registers, 0) * lim.warp_size, lim.reg_alloc_unit)
    regs_per_block = regs_per_warp * warps_per_block
    regs_hw_check = regs_per_warp * _round_up(warps_per_block, lim.sub_partitions)
    if regs_hw_check > lim.regs_per_block or regs_per_block > lim.regs_per_block \
            or registers > lim.max_regs_per_thread:
        by_regs = 0
    elif regs_per_warp == 0:
        by_regs = big
    else:
        warps_per_partition = (lim.regs_per_sm // lim.sub_partitions) // regs_per_warp
        by_regs = (warps_per_partition * lim.sub_partitions) // max(warps_per_block, 1)

    # shared memory (cudaOccMaxBlocksPerSMSmemLimit, cudaOccSMemPerBlock)
    asked = max(static_shared, 0) + max(dynamic_shared, 0)
    shared_alloc = _round_up(asked + lim.reserved_shared_per_block, lim.shared_alloc_unit)
    per_block_cap = (lim.shared_per_block_optin if asked > lim.shared_per_block
                     else lim.shared_per_block) + lim.reserved_shared_per_block
    if shared_alloc > per_block_cap:
        by_shared = 0
    elif shared_alloc == 0:
        by_shared = big
    else:
        by_shared = lim.shared_per_sm // shared_alloc

    by = {WARPS: by_warps, BLOCKS: lim.max_blocks_per_sm, REGISTERS: by_regs, SHARED: by_shared}
    blocks = min(by.values())
    limit = next(f for f in FACTOR_ORDER if by[f] == blocks)
    return Occupancy(active_blocks_per_sm=blocks, active_warps_per_sm=blocks * warps_per_block,
                     max_warps_per_sm=lim.max_warps_per_sm, limit=limit,
                     block_limits={k: v for k, v in by.items() if v != big},
                     registers_per_block=regs_per_block, shared_per_block=shared_alloc)


def occupancy_problem(occ: Occupancy, limits: SmLimits) -> str | None:
    """Why a block cannot be resident at all (the launch would fail), or None."""
    if occ.active_blocks_per_sm > 0:
        return None
    if occ.limit == REGISTERS:
        return (f"registers are allocated per warp in units of {limits.reg_alloc_unit}: the block "
                f"needs {occ.registers_per_block} (its warps rounded up to a multiple of "
                f"{limits.sub_partitions}) of the {limits.regs_per_block} a block may use")
    if occ.limit == SHARED:
        allowed = min(limits.shared_per_block_optin + limits.reserved_shared_per_block,
                      limits.shared_per_sm)
        return (f"the block needs {occ.shared_per_block} bytes of shared memory (including the "
                f"{limits.reserved_shared_per_block} the driver reserves per block); the device "
                f"allows {allowed}")
    return f"no block of this size fits on an SM ({occ.limit})"
