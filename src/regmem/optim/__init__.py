"""Optimisers read as associative memories (*Nested Learning*, arXiv:2512.24695, Sec. 4 and App. B): momentum
compresses past gradients, a preconditioner maps gradients to better coordinates, Newton-Schulz is an inner
gradient descent. Every optimiser here is a `torch.optim.Optimizer` (param groups, state_dict round trip, closures).

It sits beside `nested/` and imports only `regmem.ops` (DGD's step, `regmem.ops.dgd_step`)."""

from regmem.optim.adamuon import AdaMuon
from regmem.optim.combined import Combined
from regmem.optim.deep_momentum import DeepMomentum
from regmem.optim.dgd import DGD, dgd_minimiser
from regmem.optim.generalized import (
    GeneralizedGD,
    delta_gradient_descent,
    ggd_step,
    gradient_descent,
    heavy_ball,
)
from regmem.optim.groups import param_groups
from regmem.optim.input_moments import InputMomentsOptimizer
from regmem.optim.m3 import M3
from regmem.optim.memory_view import (
    adagrad_momentum_memory,
    adam_as_optimal_memory,
    elementwise_optimal_memory,
    ema_moments,
    ftrl_memory,
    mlp2_memory_writes,
    momentum_memory,
    outer_product_optimal_memory,
    proximal_dot_product_memory,
)
from regmem.optim.momentum import DeltaMomentum, ValueMomentum, ema_horizon
from regmem.optim.muon import MuonMemory
from regmem.optim.newton_schulz import (
    CUBIC,
    QUINTIC,
    newton_schulz,
    newton_schulz_step,
    orthogonality_gd_step,
    orthogonality_grad,
    orthogonality_loss,
)
from regmem.optim.preconditioner import LearnedPreconditioner, preconditioner_target, preconditioner_write

__all__ = ["AdaMuon", "Combined", "CUBIC", "M3", "MuonMemory", "QUINTIC", "newton_schulz", "newton_schulz_step",
           "orthogonality_gd_step", "orthogonality_grad", "orthogonality_loss", "param_groups"]
__all__ += ["DeepMomentum", "adagrad_momentum_memory", "adam_as_optimal_memory", "elementwise_optimal_memory",
            "ema_moments", "ftrl_memory", "mlp2_memory_writes", "momentum_memory", "outer_product_optimal_memory",
            "proximal_dot_product_memory"]
__all__ += ["DGD", "DeltaMomentum", "ValueMomentum", "dgd_minimiser", "ema_horizon"]
__all__ += ["GeneralizedGD", "InputMomentsOptimizer", "delta_gradient_descent", "ggd_step", "gradient_descent",
            "heavy_ball"]
__all__ += ["LearnedPreconditioner", "preconditioner_target", "preconditioner_write"]
