"""regmem's own GPU kernel for the least-squares memory: the chunk form with solver="cg" (MesaNet's conjugate
gradient), both of its solves (the forward's and the implicit backward's adjoint, cg.py) run by the Triton kernel of
triton_cg.py; the chunk statistics R_n, the surrogate gradient and the read-out o_t = S_t^T z_t (gated linear
attention) stay torch.

Run by `backend="triton"`, or by `backend="auto"` (the default) on CUDA tensors when triton is installed (`pip install
'regmem[cuda]'`), solver="cg" and the feature dim F <= 128; the exact solver (solver="cholesky", the op's default)
has no kernel and runs the torch form. fla's Mesa kernel (`fla.ops.mesa_net`) is not used: it starts CG from
x_0 = 0 and adds 1e-5 to the ridge, so its iterates are not this form's. Under TRITON_INTERPRET=1 the kernel also runs
on CPU tensors (slowly): that is how tests/ops/test_triton_kernels.py checks it against the torch form without a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping

from regmem.ops.common.backends import Backend, Tokens, check_triton_device, triton_module, triton_usable
from regmem.ops.regression.chunk import cg_chunk, check_solver

SOLVE_CHUNK = 64  # the kernel's chunk of tokens sharing one R_n, whatever chunk_size (which blocks the read-out)
MAX_F = 128  # as triton_cg.MAX_F (not imported: this module loads without triton)


def least_squares_triton_core(q, k, v, g, *, ridge, initial_state, chunk_size, solver="cholesky", cg_steps=None):
    """Same contract as `ls_chunk_core` with solver="cg" (the op's frame has asked `refuses` about the options)."""
    del solver  # "cg": `refuses` turns every other solver away
    check_triton_device(q)
    if q.shape[-1] > MAX_F:
        raise ValueError(f"backend='triton' takes a feature dim F <= {MAX_F} (it holds R_t's [F, F] block whole), "
                         f"got F = {q.shape[-1]}; use backend='torch'")
    solve = triton_module("regmem.ops.regression.triton_cg").solve
    return cg_chunk(q, k, v, g, ridge=ridge, initial_state=initial_state, chunk_size=chunk_size, steps=cg_steps,
                    solve=solve, solve_chunk=SOLVE_CHUNK)


def refuses(options: Mapping) -> str | None:
    """Why the kernel cannot run a call with these form options (None when it can); options the torch form rejects
    too raise its ValueError here, whichever backend was asked."""
    solver = options.get("solver", "cholesky")
    check_solver(solver, options.get("cg_steps"))
    if solver != "cg":
        return f"backend='triton' solves by conjugate gradient only (solver='cg'), got solver={solver!r}; use " \
               "backend='torch'"
    return None


def usable(tokens: Tokens) -> tuple[bool, str | None]:
    ok, warning = triton_usable(tokens)
    return ok and tokens["q"].shape[-1] <= MAX_F, warning


TRITON = Backend({"chunk": least_squares_triton_core}, usable, refuses)
