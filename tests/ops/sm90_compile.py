"""Compiles every regmem Triton kernel for an NVIDIA Hopper GPU (sm_90) on a machine without one: Triton's CUDA
backend and its bundled ptxas need no device. Run as a script (tests/ops/test_triton_kernels.py does, in a process
without TRITON_INTERPRET, under which the kernels would be interpreter objects). Prints one line per kernel and
variant: "OK <kernel> <dtype> <shared bytes>" or "FAIL <kernel> <dtype>: <error>"."""

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from regmem.ops.deltaformer import triton_kernels as erase
from regmem.ops.nonparametric import triton_moments as moments
from regmem.ops.regression import triton_cg

INTS = {"T", "S", "L", "K", "V", "G", "H", "D", "F", "N", "offset", "steps"}


def build(fn, dtype: str, constexprs: dict) -> None:
    stages = constexprs.pop("num_stages", 3)  # launch options, not kernel arguments
    warps = constexprs.pop("num_warps", 4)
    signature = {n: "constexpr" if n in constexprs else "i32" if n in INTS else "*i32" if n == "mask_ptr"
                 else f"*{dtype}" for n in fn.arg_names}
    try:
        kernel = triton.compile(ASTSource(fn, signature, constexprs=constexprs), target=GPUTarget("cuda", 90, 32),
                                options={"num_warps": warps, "num_stages": stages})
        print(f"OK {fn.__name__} {dtype} {kernel.metadata.shared}", flush=True)
    except Exception as err:  # the line is the result
        print(f"FAIL {fn.__name__} {dtype}: {type(err).__name__}: {str(err)[:300]}", flush=True)


def main() -> None:
    """Each kernel with the compile-time arguments its launch passes (the modules' own `_options`), float32 and
    float64: DeltaFormer at K = V = 128 (the GPU bench's shape), the moments at their widest key tile (D 129-256), the
    least-squares CG solve at its widest feature dim (F 128)."""
    for dtype, torch_dtype in (("fp32", torch.float32), ("fp64", torch.float64)):
        like = torch.empty(0, dtype=torch_dtype)
        options = erase._options(like, True, 128, 128)
        for fn in (erase._erase_fwd, erase._erase_adjoint, erase._cache_adjoint):
            build(fn, dtype, erase._sequential(options))
        for fn in (erase._erase_dw, erase._erase_dk):
            build(fn, dtype, {k: v for k, v in options.items() if k != "BVT"})
        options = moments._options(like, torch.ones(1, 1, dtype=torch.bool), 129)
        for fn in (moments._moments_fwd, moments._moments_bwd_x, moments._moments_bwd_k, moments._moments_bwd_q):
            build(fn, dtype, dict(options))
        build(triton_cg._cg_solve, dtype, triton_cg._options(like, 64, triton_cg.MAX_F))


if __name__ == "__main__":
    main()
