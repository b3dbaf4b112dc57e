"""Vocabularies, the token trie, per-state token masks and their cache, the GrammarMatcher,
bitmask helpers and grammar-aligned sampling."""
