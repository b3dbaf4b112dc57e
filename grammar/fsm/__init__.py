"""The code-point automaton library (Dfa and its numba kernels) the front ends and automata/ build on."""
