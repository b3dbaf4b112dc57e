"""Shared infrastructure of every layer: errors, limits, the cache registry, the GC pause."""
