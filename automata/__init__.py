"""Grammar IR -> byte-level pushdown automaton: per-rule minimised DFAs packed into flat arrays,
a persistent stack pool and the numba kernels that advance it."""
