"""pushmask: grammar-constrained decoding with pushdown automata and precomputed token masks."""
