"""Vocabularies, the token trie, per-state token masks and their cache, the GrammarMatcher,
bitmask helpers, and the infilling queries (can_complete, allowed_tokens)."""
