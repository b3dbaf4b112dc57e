"""Free text with dispatched branches: text that holds none of the trigger strings, each trigger
going on with its own branch.  The structural tags' dispatch formats (structural_tag.py) and
EBNF's TagDispatch macros (ebnf.py) build on it."""

from __future__ import annotations

from .fsm.codepoint_dfa import without_strings
from .ir import MAX_CODE_POINT, CharFsm, Expr, alt, char_class, seq, star

__all__ = ["dispatch_loop", "text_without", "texts_before_triggers"]


def dispatch_loop(text: Expr, led_branch: Expr, loop: bool) -> Expr:
    """Free `text` (which holds no trigger) with dispatched branches, each `led_branch` holding
    the free text before it: `led_branch* text` when `loop`, else `text | led_branch`.  The
    dispatch formats and EBNF's TagDispatch macros share it."""
    return seq(star(led_branch), text) if loop else alt(text, led_branch)


def text_without(strings: list[str]) -> Expr:
    """Any text (code points) that contains none of `strings` (`codepoint_dfa.without_strings`,
    an Aho-Corasick automaton), as one CharFsm whose state 0 is initial."""
    strings = [s for s in dict.fromkeys(strings) if s]
    if not strings:
        return star(char_class([(0, MAX_CODE_POINT)]))
    dfa = without_strings(strings)
    transitions = tuple((state, lo, hi, target) for state, row in enumerate(dfa.trans) for lo, hi, target in row)
    return CharFsm(0, dfa.finals, transitions)


def texts_before_triggers(triggers: list[str], excludes: list[str]) -> dict[str, Expr]:
    """For each trigger, the free text that may come right before it: text holding no trigger
    and no excluded string, after which reading the trigger completes none of them before its
    last character, and no excluded string with it.  So excluded strings bind the text through
    the trigger (a trigger holding one never fires), and the first trigger in the text is the
    one that dispatches.  Triggers no text may precede are left out."""
    avoid = [s for s in dict.fromkeys(triggers + excludes) if s]
    text = text_without(avoid)
    if not isinstance(text, CharFsm):  # no strings at all
        return {trigger: text for trigger in triggers}
    # The text read so far matters only through its longest suffix that begins one of the
    # strings (the Aho-Corasick state): a state's shortest word spells that suffix.
    edges: dict[int, list[tuple[int, int]]] = {}
    for source, lo, _, target in text.transitions:
        edges.setdefault(source, []).append((lo, target))
    words = {0: ""}
    queue = [0]
    for state in queue:
        for lo, target in edges.get(state, ()):
            if target not in words:
                words[target] = words[state] + chr(lo)
                queue.append(target)
    led: dict[str, Expr] = {}
    for trigger in dict.fromkeys(triggers):
        finals = frozenset(
            state
            for state in text.finals
            if state in words and _reads_cleanly(words[state], trigger, avoid, set(triggers))
        )
        if finals:
            led[trigger] = CharFsm(0, finals, text.transitions)
    return led


def _reads_cleanly(before: str, trigger: str, avoid: list[str], triggers: set[str]) -> bool:
    """Whether `trigger` read after `before` (which holds none of `avoid`) completes no string of
    `avoid` before its last character, and none but triggers with it."""
    text = before + trigger
    for string in avoid:
        at = text.find(string)
        while at != -1:
            end = at + len(string)
            if end > len(before) and (end < len(text) or string not in triggers):
                return False
            at = text.find(string, at + 1)
    return True
