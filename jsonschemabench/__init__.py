"""Corpus validation and benchmarking of JSON Schema engines (`pushmask validate-corpus`)."""
