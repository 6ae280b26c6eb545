"""Triton's fused kernels for the catalog's memory-bound operators, written as Triton's own
tutorials write them (one program per row, the row held in registers, fp32 math): the
compiler-made baselines a hand-tuned CUDA kernel has to beat. Imported only in the trusted
baseline cell (app.gpu.cuda.worker.make_baseline_handler): Triton compiles by running ptxas and
a C compiler, which the sealed candidate cell may not start."""

from __future__ import annotations

import triton
import triton.language as tl

MAX_ROW = 32768  # a row held in one program's registers; longer rows are not covered


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_rows(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row + cols, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_rows(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    r = tl.rsqrt(tl.sum(d * d, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row + cols, (d * r * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def bias_gelu_flat(x_ptr, b_ptr, y_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    z = (tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
         + tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0).to(tl.float32))
    y = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def row_block(n_cols: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for a whole row in one program, as Triton's softmax tutorial picks
    them; ValueError past MAX_ROW."""
    if n_cols > MAX_ROW:
        raise ValueError(f"rows of {n_cols} values are longer than one Triton program holds "
                         f"({MAX_ROW})")
    block = triton.next_power_of_2(n_cols)
    return block, 16 if block >= 8192 else 8 if block >= 2048 else 4


ELEMENTWISE_BLOCK = 1024

# name -> (kernel, the argument names in order, the constexpr names): what the compile check
# (tests, gpu-check --dry-run) builds for a GPU target without a device
KERNELS = {
    "softmax": (softmax_rows, ("x_ptr", "y_ptr", "n_cols"), ("BLOCK",)),
    "rmsnorm": (rms_norm_rows, ("x_ptr", "w_ptr", "y_ptr", "n_cols", "eps"), ("BLOCK",)),
    "layernorm": (layer_norm_rows, ("x_ptr", "w_ptr", "b_ptr", "y_ptr", "n_cols", "eps"), ("BLOCK",)),
    "bias_gelu": (bias_gelu_flat, ("x_ptr", "b_ptr", "y_ptr", "n", "n_cols"), ("BLOCK",)),
}


def launch(op_name: str, tensors: list, out, n_cols: int, eps: float | None = None) -> None:
    """One launch of `op_name`'s kernel on torch tensors (inputs in catalog order, then out)."""
    kernel = KERNELS[op_name][0]
    if op_name == "bias_gelu":
        n = out.numel()
        kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](*tensors, out, n, n_cols, BLOCK=ELEMENTWISE_BLOCK)
        return
    block, warps = row_block(n_cols)
    rows = out.numel() // n_cols
    extra = () if eps is None else (eps,)
    kernel[(rows,)](*tensors, out, n_cols, *extra, BLOCK=block, num_warps=warps)


TRITON_TYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def compile_all(cc: int, block: int = 1024, names: tuple[str, ...] | None = None,
                dtypes: tuple[str, ...] | None = None) -> dict[str, dict[str, int]]:
    """The kernels above (all, or `names` in `dtypes`) compiled for compute capability `cc`
    without a device (what the tests and the preflight check): {op: {dtype: cubin bytes}};
    raises on a failure."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sizes: dict[str, dict[str, int]] = {}
    for name, (fn, args, constexprs) in KERNELS.items():
        if names is not None and name not in names:
            continue
        for dtype, ttype in TRITON_TYPES.items():
            if dtypes is not None and dtype not in dtypes:
                continue
            signature = {a: f"*{ttype}" if a.endswith("_ptr") else "fp32" if a == "eps" else "i32"
                         for a in args}
            signature.update({c: "constexpr" for c in constexprs})
            try:
                source = ASTSource(fn=fn, signature=signature, constexprs={"BLOCK": block})
            except TypeError as exc:  # older Triton: index-keyed signatures, `constants=`
                raise RuntimeError(f"Triton {triton.__version__}'s compile API is not the one this "
                                   f"check is written for (3.2 or later): {exc}") from None
            built = triton.compile(source, target=GPUTarget("cuda", cc, 32), options={"num_warps": 4})
            sizes.setdefault(name, {})[dtype] = len(built.asm["cubin"])
    return sizes
