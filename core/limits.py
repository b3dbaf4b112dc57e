"""Every compile and match budget in one object, `Limits`, passed through every `compile_*`.

A budget bounds work or memory that an input could otherwise make unbounded; exceeding one raises
LimitExceededError (GrammarError for nesting, which is a property of the text) with a message
that names the budget, its value and how to change the input or raise it.  Thresholds that only
choose between an exact and a cheaper construction (e.g. how many members an any-order object
tracks exactly) are not budgets: they stay documented constants beside the code they tune.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgumentError


@dataclass(frozen=True)
class Limits:
    """Compile and match budgets (defaults in brackets; what exceeding one costs).

    Automaton size
        max_rule_states [100,000]: NFA / DFA states of one rule's automaton; also bounds a
            regex's unrolled repetitions before anything is built.  Each state costs a few
            dozen bytes and a slice of the compile.
        max_total_states [1,000,000]: states of all rule automata together (the PDA's tables,
            and the per-state masks computed on first visit).
    Matching
        max_stack_tops [4,096]: live parses at once (ambiguous grammars multiply them; each top
            is walked for every mask).
        max_stack_frames [16,777,216]: stack frames held by all parses of one matcher.
    Grammar text
        max_nesting [50,000]: how deeply groups may nest in EBNF and regex text, and in the Lark
            grammars lark_reader reads (lark's own loader stops near 400 levels).  The
            parsers and passes walk nesting with explicit stacks, not Python recursion, so depth
            costs only memory: a list entry and an IR node per level (about 2 MB and 0.6 s for
            50,000 levels); the budget bounds that memory.
        max_repeat [10,000]: the largest bound of a counted repetition `x{m,n}` in EBNF.
    JSON Schema
        max_schema_depth [128]: how deeply objects and arrays may nest in a schema document.
        max_schema_rules [20,000]: grammar rules one schema may compile to.
        max_schema_branches [512]: alternatives one subschema may expand to (anyOf / oneOf /
            type lists multiplied out).
        max_object_expr [40,000]: expression nodes of one object's member automaton (optional
            members combined with minProperties / maxProperties grow it quadratically).
        max_dynamic_copies [2,000]: copies of reference targets (one per target and dynamic
            scope) that `$dynamicRef` / `$recursiveRef` resolution may make.
        max_string_states [20,000]: states of one string / number automaton built from
            `pattern`, `format`, length and numeric bounds (products and complements included).
        max_encoded_string_states [100,000]: states of one string automaton once encoded as JSON
            text (every escape spelt out; patterns, formats, "any key but these names").
    Whole compile
        compile_time_limit_s [None]: wall-clock limit of one compile call, checked between steps
            (passes, rules, subschemas); the last resort, since the size budgets fire sooner.
    """

    max_rule_states: int = 100_000
    max_total_states: int = 1_000_000
    max_stack_tops: int = 4096
    max_stack_frames: int = 1 << 24
    max_nesting: int = 50_000
    max_repeat: int = 10_000
    max_schema_depth: int = 128
    max_schema_rules: int = 20_000
    max_schema_branches: int = 512
    max_object_expr: int = 40_000
    max_dynamic_copies: int = 2_000
    max_string_states: int = 20_000
    max_encoded_string_states: int = 100_000
    compile_time_limit_s: float | None = None

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if name == "compile_time_limit_s":
                if value is not None and not (isinstance(value, (int, float)) and value >= 0):
                    raise InvalidArgumentError(f"Limits.{name} must be a number of seconds >= 0 or None, got {value!r}")
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgumentError(f"Limits.{name} must be a positive int, got {value!r}")


DEFAULT_LIMITS = Limits()
"""The defaults, for functions called without a `limits` argument."""
