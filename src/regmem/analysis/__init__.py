"""Analysis of associative memories (*Understanding Transformer from the Perspective of Associative Memory*,
Zhong, Xu, Ao, Shi, arXiv:2505.19488): retrieval signal-to-noise and capacity, the update framework
S_t = A_t S_{t-1} B_t + C_t of its Table 2, and the constructions behind its expressivity results.

It sits beside `recipe/` and builds on `ops/` only (the capacity curves run any op as a black box)."""
