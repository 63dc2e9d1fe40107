"""Optimisers read as associative memories (*Nested Learning*, arXiv:2512.24695, Sec. 4 and App. B): momentum
compresses past gradients, a preconditioner maps gradients to better coordinates, Newton-Schulz is an inner
gradient descent. Every optimiser here is a `torch.optim.Optimizer` (param groups, state_dict round trip, closures).

It sits beside `nested/` and imports nothing from regmem."""
