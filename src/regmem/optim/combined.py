"""Several optimisers stepping disjoint parts of one model as one: the Muon recipe of orthogonalised updates for 2-D
hidden weights and AdamW for the rest (embeddings, head, norms, biases), which `torch.optim.Muon` itself leaves to
the caller. Muon's hidden-weight rule is Nested Learning's (arXiv:2512.24695) Sec. 4.2, eqs. 42-44.

`Combined(optimizers)` behaves like one `torch.optim` optimiser for a training loop: `param_groups` lists every
child's groups (the same dicts, so a schedule that sets `group["lr"]` reaches the children), `step(closure)`,
`zero_grad`, and a `state_dict` in torch's layout (parameters numbered across the children in order), so
checkpoints written from it resume exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .stepping import closure_loss


class Combined:
    """One optimiser over disjoint parameter sets, each stepped by its own child (module docstring)."""

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer]):
        if not optimizers:
            raise ValueError("optimizers must hold at least one optimizer")
        seen: set[int] = set()
        for opt in optimizers:
            if not isinstance(opt, torch.optim.Optimizer):
                raise ValueError(f"optimizers must be torch.optim.Optimizer instances, got {type(opt).__name__}")
            for group in opt.param_groups:
                for p in group["params"]:
                    if id(p) in seen:
                        raise ValueError("optimizers must hold disjoint parameters: a parameter appears twice")
                    seen.add(id(p))
        self.optimizers = list(optimizers)

    @property
    def param_groups(self) -> list[dict]:
        return [group for opt in self.optimizers for group in opt.param_groups]

    @property
    def state(self) -> dict:
        return {p: s for opt in self.optimizers for p, s in opt.state.items()}

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = closure_loss(closure)
        for opt in self.optimizers:
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        """torch's layout: {"state": {index: ...}, "param_groups": [...]} with indices numbered across children."""
        state, groups, offset = {}, [], 0
        for opt in self.optimizers:
            child = opt.state_dict()
            state.update({offset + index: entries for index, entries in child["state"].items()})
            groups += [{**g, "params": [offset + i for i in g["params"]]} for g in child["param_groups"]]
            offset += sum(len(g["params"]) for g in child["param_groups"])
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = list(state_dict["param_groups"])
        state = {int(k): v for k, v in state_dict["state"].items()}
        if len(groups) != len(self.param_groups):
            raise ValueError(f"state_dict has {len(groups)} param groups, this optimizer {len(self.param_groups)}")
        offset = 0
        for opt in self.optimizers:
            mine, groups = groups[:len(opt.param_groups)], groups[len(opt.param_groups):]
            count = sum(len(g["params"]) for g in mine)
            opt.load_state_dict({
                "state": {i - offset: s for i, s in state.items() if offset <= i < offset + count},
                "param_groups": [{**g, "params": [i - offset for i in g["params"]]} for g in mine],
            })
            offset += count

    def __repr__(self) -> str:
        return f"Combined({', '.join(type(o).__name__ for o in self.optimizers)})"
