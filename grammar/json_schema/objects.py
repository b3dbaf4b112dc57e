"""Object schemas: named members in definition or any order, additional / pattern members, the
witness members of negated member keywords, and min/maxProperties counts (with a value check
keeping names distinct where minProperties needs several undeclared members)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.errors import LimitExceededError, UnsupportedSchemaError
from ..ir import NOTHING, Alt, Expr, Ref, Seq, alt, opt, seq, star
from ..json_checks import DistinctNames
from ..passes import expr_nodes
from .documents import escape_pointer
from .forms import ObjectForm, RefMarker, Term, Witness
from .keywords import is_true
from .leaves import any_string_dfa, budgeted_dfa_op, format_dfa, literal_dfa, pattern_search

if TYPE_CHECKING:
    from ..fsm.codepoint_dfa import Dfa
    from .emit import Emitter

ANY_ORDER_MAX_MEMBERS = 6
"""With property_order="any", objects with at most this many named members accept them in any
order exactly (2^n states); larger ones only track their required members."""
INTERLEAVE_ANY_ORDER_REQUIRED = 8
"""Larger objects track which required members were written (2^r states) up to this many of
them; past it the required ones keep the order of `properties` or of `required` among themselves."""
ANY_ORDER_MAX_STATES = 1024
"""With minProperties/maxProperties and additional members, any order tracks (members left,
members written) pairs up to this many; past it the members keep their declared order."""
ORDERED_CHUNK = 8
"""ordered_members makes every this many members a rule (see its checkpoints)."""
MAX_PATTERN_GROUPS = 5
MAX_WITNESSES = 3


@dataclass
class _ObjectTerm:
    """One term's `ObjectForm` with JSON Schema's defaults filled in (absent additionalProperties
    and propertyNames: true; counts as ints; `required` without repeats)."""

    pointer: str
    props: dict
    required: list
    patterns: dict
    addl: object
    names_schema: object
    min_p: int
    max_p: int | None

    @classmethod
    def read(cls, f: ObjectForm, pointer: str) -> _ObjectTerm:
        return cls(
            pointer,
            dict(f.properties),
            list(dict.fromkeys(f.required)),
            dict(f.pattern_properties),
            f.additional if f.additional is not None else True,
            f.names if f.names is not None else True,
            int(f.min_properties or 0),
            int(f.max_properties) if f.max_properties is not None else None,
        )

    @property
    def names_true(self) -> bool:
        return is_true(self.names_schema)


def object_expr(em: Emitter, f: ObjectForm, pointer: str, depth) -> Expr:
    """The IR of the objects one flat term's object form allows."""
    t = _ObjectTerm.read(f, pointer)
    if t.max_p is not None and t.min_p > t.max_p:
        em.ctx.note_empty(pointer, "minProperties > maxProperties")
        return NOTHING
    child = em.layout.child(depth)
    o, first, nxt, colon, end, close_e, close_ne = em.layout.parts(depth, "{", "}")
    names_terms = _property_names_terms(em, t)
    finite_names = None
    if names_terms is not None and all(isinstance(term, Term) and term.enum is not None for term in names_terms):
        finite_names = [v for term in names_terms for v in term.enum if isinstance(v, str)]
    order = list(t.props) + [r for r in t.required if r not in t.props]
    if finite_names is not None:
        order += [n for n in dict.fromkeys(finite_names) if n not in order]
    named = _named_members(em, t, order, colon, end, child)
    if named is None:
        return NOTHING
    members, required_rank = named
    extra = None
    if finite_names is None:
        extra = extra_members(em, order, t.patterns, t.addl, t.names_schema, names_terms, pointer, colon, end, child)
    min_p, max_p = t.min_p, t.max_p
    if f.witnesses:
        closing = _witness_closing(em, list(f.witnesses), t, order, (first, nxt, colon, end, close_ne), child)
        if closing is None:
            return NOTHING
        min_p, max_p, close_e, close_ne = closing
    distinct = extra is not None and _distinct_names_needed(em, t, order, members, min_p, child)
    body = object_body(
        em, members, extra, min_p, max_p, (o, first, nxt, close_e, close_ne), pointer, required_rank, distinct
    )
    return _distinct_names_rule(em, body, pointer) if distinct else body


def _distinct_names_needed(em: Emitter, t: _ObjectTerm, order: list, members: list, min_p: int, child) -> bool:
    """Does minProperties need two or more undeclared members, and can a value check keep their
    names distinct without a dead end?  The grammar counts members; json.loads counts two
    members of one name once, so the object's rule gets a DistinctNames check.

    The check refuses a name when it closes, so every name the grammar lets a model start must
    have endlessly many completions among the undeclared names: the names additionalProperties
    or a pattern gives a value (patterns pairwise disjoint, each value satisfiable), within
    propertyNames, less the declared ones (`order`)."""
    if min_p - sum(1 for _, is_req in members if is_req) < 2 or not em.ctx.value_checks_allowed():
        return False
    where = f"{t.pointer}/patternProperties"
    dfas = [em.pattern_dfa(p, where) for p in t.patterns]
    if any(em.dfa_op(a.intersects, b, "patternProperties", t.pointer) for a, b in itertools.combinations(dfas, 2)):
        return False
    # a name matching a pattern whose value is satisfiable, or (additionalProperties satisfiable) none
    valued = [em.value(schema, f"{where}/{escape_pointer(p)}", child) != NOTHING for p, schema in t.patterns.items()]
    open_rest = em.value(t.addl, f"{t.pointer}/additionalProperties", child) != NOTHING
    names = any_string_dfa() if open_rest else literal_dfa([])
    for dfa, has_value in zip(dfas, valued):
        if has_value != open_rest:
            names = em.dfa_op(names.union if has_value else names.difference, dfa, "minProperties", t.pointer)
    if not t.names_true:  # as extra_members reads it: one string term
        terms = _property_names_terms(em, t) or []
        if len(terms) != 1 or not _names_term(terms[0], enum=False):
            return False
        allowed = _names_string_dfa(em, terms[0], f"{t.pointer}/propertyNames")
        if allowed is not None:
            names = em.dfa_op(names.intersect, allowed, "minProperties", t.pointer)
    names = em.dfa_op(names.difference, literal_dfa(order), "minProperties", t.pointer)
    return not names.is_empty() and _every_prefix_endless(names)


def _every_prefix_endless(dfa) -> bool:
    """Does every prefix of a string the (trimmed) automaton accepts have endlessly many
    completions?  Peels off the states whose every path ends (those with no successor left,
    repeatedly); in a trimmed automaton a state with an endless path has endless completions."""
    successors = [{target for _, _, target in edges} for edges in dfa.trans]
    left = set(range(len(successors)))
    ended = [s for s in left if not successors[s]]
    while ended:
        left.difference_update(ended)
        ended = [s for s in left if not successors[s] & left]
    return len(left) == len(successors)


def _distinct_names_rule(em: Emitter, body: Expr, pointer: str) -> Ref:
    """The object `body` as a rule whose member names the matcher keeps pairwise distinct."""
    name = em.new_rule("distinct_names")
    em.rules[name] = body
    em.checks[name] = DistinctNames(f"{pointer}/minProperties")
    return Ref(name)


def _property_names_terms(em: Emitter, t: _ObjectTerm) -> list | None:
    """The flat terms of propertyNames (references inlined), or None when it allows every name."""
    if t.names_true:
        return None
    names_terms = []
    for term in em.algebra.exact_dnf(t.names_schema, f"{t.pointer}/propertyNames"):
        names_terms.extend(em.algebra.inline_ref(term.uri, t.pointer) if isinstance(term, RefMarker) else [term])
    return names_terms


def _member_schema(em: Emitter, t: _ObjectTerm, name: str, in_props: bool):
    """The schema a member called `name` must satisfy (False: no such member)."""
    parts = [t.props[name]] if in_props else []
    matching = [p for p in t.patterns if pattern_search(p, name, t.pointer)]
    parts += [t.patterns[p] for p in matching]
    if not in_props and not matching:
        parts.append(t.addl)
    if not t.names_true and not em.ctx.validates(t.names_schema, name):
        return False
    parts = [p for p in parts if not is_true(p)]
    if any(p is False for p in parts):
        return False
    if not parts:
        return True
    return parts[0] if len(parts) == 1 else {"allOf": parts}


def _named_members(em: Emitter, t: _ObjectTerm, order: list, colon, end, child) -> tuple[list, list] | None:
    """([(member IR, required?)], the index in `required` of each required one), for the names
    in `order`; None (noted as empty) when a required member can have no value."""
    members = []
    required_rank = []
    for name in order:
        schema = _member_schema(em, t, name, name in t.props)
        vexpr = (
            em.value(schema, f"{t.pointer}/properties/{escape_pointer(name)}", child)
            if schema is not False
            else NOTHING
        )
        is_req = name in t.required
        key = em.string_literal(name)  # NOTHING when JsonOptions.string_excludes rule out the name
        if vexpr == NOTHING or key == NOTHING:
            if is_req:
                why = "cannot have any value" if key != NOTHING else "holds an excluded string"
                em.ctx.note_empty(f"{t.pointer}/required", f"required property {name!r} {why}")
                return None
            continue
        members.append((seq(key, colon, vexpr, end), is_req))
        if is_req:
            required_rank.append(t.required.index(name))
    return members, required_rank


def _witness_closing(em: Emitter, conditions: list, t: _ObjectTerm, order: list, tokens, child):
    """(min_p, max_p, close_e, close_ne) for an object whose last members are the WITNESS
    members meeting `conditions`; None when no object can hold them."""
    first, nxt, colon, end, close_ne = tokens
    min_p, max_p = t.min_p, t.max_p
    if min_p > 1 or len(conditions) > MAX_WITNESSES or (max_p is not None and len(conditions) > 1):
        # a witness may repeat an earlier name, so it cannot count towards minProperties
        em.ctx.unsupported(
            "not",
            t.pointer,
            "member conditions next to minProperties > 1, several of them "
            f"next to maxProperties, or more than {MAX_WITNESSES} of them",
        )
    min_p = 0  # the witness is a member
    if max_p is not None:
        max_p -= 1  # ...and counts at most once
        if max_p < 0:
            return None
    names = None if t.names_true else names_dfa(em, t.names_schema, t.pointer)

    def member(conds, later=()):
        return witness_member(
            em,
            conds,
            later,
            order,
            lambda n: _member_schema(em, t, n, n in t.props),
            t.patterns,
            t.addl,
            names,
            t.pointer,
            colon,
            end,
            child,
        )

    # one member meeting every condition, or one member per condition (in some order)
    options = [member(conditions)]
    if len(conditions) > 1:
        for perm in itertools.permutations(conditions):
            parts = [member([c], perm[j + 1 :]) for j, c in enumerate(perm)]
            options.append(seq(*[x for j, part in enumerate(parts) for x in ((nxt, part) if j else (part,))]))
    witnesses = alt(*options)
    if witnesses == NOTHING:
        return None
    # the witnesses close every object: they are the last members
    return min_p, max_p, seq(first, witnesses, close_ne), seq(nxt, witnesses, close_ne)


def witness_fits(em: Emitter, condition: Witness, pointer: str):
    """The keys a witness condition allows."""
    where = f"{pointer}/not/patternProperties"
    fits = em.pattern_dfa(condition.pattern, where) if condition.pattern is not None else any_string_dfa()
    for p in condition.patterns:
        fits = em.dfa_op(fits.difference, em.pattern_dfa(p, where), "not", pointer)
    if condition.names:
        fits = em.dfa_op(fits.difference, literal_dfa(list(condition.names)), "not", pointer)
    if condition.key_not is not None:  # not propertyNames: a name outside the names schema
        fits = em.dfa_op(fits.difference, names_dfa(em, condition.key_not, pointer), "not", pointer)
    return fits


def names_dfa(em: Emitter, schema, pointer: str):
    """The member names a propertyNames schema allows, as a Dfa (string constraints or an enum)."""
    if schema is False:
        return literal_dfa([])
    allowed = None
    for term in em.algebra.exact_dnf(schema, f"{pointer}/propertyNames"):
        if not _names_term(term, enum=True):
            raise UnsupportedSchemaError(
                "not",
                f"{pointer}/not/propertyNames",
                "only string length/pattern/format or enum name constraints negate",
            )
        if term.enum is not None:
            dfa = literal_dfa([v for v in em.ctx.enum_values(term) if isinstance(v, str)])
        else:
            dfa = _names_string_dfa(em, term, pointer)
            dfa = dfa if dfa is not None else any_string_dfa()
        allowed = dfa if allowed is None else em.dfa_op(allowed.union, dfa, "not", pointer)
    return allowed if allowed is not None else literal_dfa([])


_NAME_KEYWORDS = frozenset({"type", "minLength", "maxLength", "pattern", "format"})


def _names_term(term, enum: bool) -> bool:
    """Is a propertyNames term one the name automata express: string type, length, one pattern,
    format (and `enum`, when allowed)?"""
    if not isinstance(term, Term) or "string" not in term.types():
        return False
    return not set(term.as_schema()) - (_NAME_KEYWORDS | {"enum"} if enum else _NAME_KEYWORDS)


def _names_string_dfa(em: Emitter, term: Term, pointer: str):
    """The names a string-only propertyNames term allows (None: every name)."""
    s = term.string
    return em.string_dfa(
        min_length=s.min_length,
        max_length=s.max_length,
        pattern=s.patterns[0] if s.patterns else None,
        format=s.format,
        pointer=pointer,
    )


def witness_member(
    em: Emitter, conditions, later, defined, schema_for, patterns, addl, names, pointer, colon, end, child
):
    """The IR of one member meeting all `conditions` (see WITNESS), with a key no `later`
    condition allows and a value valid for whatever else applies to its key here: its own
    schema for a named member, else the schemas of the patterns it matches, else
    additionalProperties."""
    where = f"{pointer}/not"
    fits = witness_fits(em, conditions[0], pointer)
    for condition in conditions[1:]:
        fits = em.dfa_op(fits.intersect, witness_fits(em, condition, pointer), "not", pointer)
    for condition in later:
        fits = em.dfa_op(fits.difference, witness_fits(em, condition, pointer), "not", pointer)
    if names is not None:  # propertyNames of this object
        fits = em.dfa_op(fits.intersect, names, "not", pointer)
    wanted = [c.value for c in conditions if not is_true(c.value)]
    wanted_value = True if not wanted else wanted[0] if len(wanted) == 1 else {"allOf": wanted}
    alternatives = []
    for name in defined:
        own = schema_for(name)
        if own is False or not fits.accepts(name):
            continue
        value = em.value(wanted_value if is_true(own) else {"allOf": [own, wanted_value]}, where, child)
        if value != NOTHING:
            alternatives.append(seq(em.string_literal(name), colon, value, end))
    key_dfa = fits
    if defined:
        key_dfa = em.dfa_op(key_dfa.difference, literal_dfa(defined), "not", pointer)
    alternatives += unnamed_members(
        em, key_dfa, patterns, addl, wanted_value, pointer, colon, end, child, filtered=names is None
    )
    return alt(*alternatives)


def extra_members(em: Emitter, defined, patterns, addl, names_schema, names_terms, pointer, colon, end, child):
    """The IR of one member not named in `properties`, or None when there can be none."""
    if addl is False and not patterns:
        return None
    key_dfa = any_string_dfa()
    filtered = True  # names held to a propertyNames pattern or format are not (as in XGrammar)
    if names_terms is not None:
        if not names_terms:
            return None
        if len(names_terms) != 1 or not _names_term(names_terms[0], enum=False):
            em.ctx.unsupported(
                "propertyNames",
                f"{pointer}/propertyNames",
                "only string length/pattern/format or enum constraints on names are supported",
            )
        else:
            d = _names_string_dfa(em, names_terms[0], f"{pointer}/propertyNames")
            if d is not None:
                key_dfa = d
            strings = names_terms[0].string
            filtered = not strings.patterns and (strings.format is None or format_dfa(strings.format) is None)
    if defined:
        key_dfa = em.dfa_op(key_dfa.difference, literal_dfa(defined), "additionalProperties", pointer)
    alternatives = unnamed_members(em, key_dfa, patterns, addl, True, pointer, colon, end, child, filtered)
    if not alternatives:
        return None
    expr = alt(*alternatives)
    return em.rule_ref("extra_member", expr) if expr_nodes(expr, fsm_edges=True) > 200 else expr


def unnamed_members(em: Emitter, key_dfa, patterns, addl, also, pointer, colon, end, child, filtered: bool) -> list:
    """Member alternatives for keys in `key_dfa` (none of them a named property), one per set
    of patterns a key can match: the value must satisfy those patterns' schemas (or
    additionalProperties when it matches none), and the schema `also`.  The keys matching no
    pattern are `filtered` by JsonOptions.string_excludes (when False, or past a pattern, they
    are held to that pattern alone, as in XGrammar)."""
    pats = list(patterns)
    if len(pats) > 24:
        raise UnsupportedSchemaError("patternProperties", f"{pointer}/patternProperties", "more than 24 patterns")
    pdfas = [em.pattern_dfa(p, f"{pointer}/patternProperties") for p in pats]
    overlapping = any(
        em.dfa_op(pdfas[i].intersects, pdfas[j], "patternProperties", pointer)
        for i in range(len(pats))
        for j in range(i + 1, len(pats))
    )
    if overlapping and len(pats) > MAX_PATTERN_GROUPS:
        raise UnsupportedSchemaError(
            "patternProperties", f"{pointer}/patternProperties", f"more than {MAX_PATTERN_GROUPS} overlapping patterns"
        )

    def value_schema(mask: int):
        """The value schema of a key matching exactly the patterns in `mask` (bit i: pattern i)."""
        parts = [*([patterns[p] for i, p in enumerate(pats) if mask >> i & 1] if mask else [addl]), also]
        parts = [p for p in parts if not is_true(p)]
        if any(p is False for p in parts):
            return False
        return True if not parts else parts[0] if len(parts) == 1 else {"allOf": parts}

    # a key matches one subset of the patterns; with pairwise disjoint patterns, at most one
    masks = range(1 << len(pats)) if overlapping else [0] + [1 << i for i in range(len(pats))]
    wanted = {mask for mask in masks if value_schema(mask) is not False}
    alternatives = []
    for mask, dfa in _keys_by_patterns(key_dfa, pdfas, overlapping, wanted, pointer, em.ctx.limits.max_string_states):
        vexpr = em.value(value_schema(mask), f"{pointer}/additionalProperties", child)
        if vexpr == NOTHING:
            continue
        key = em.string_token(dfa, pointer, "additionalProperties", filtered and mask == 0)
        alternatives.append(seq(key, colon, vexpr, end))
    return alternatives


def object_body(
    em: Emitter, members, extra, min_p, max_p, parts, pointer, required_rank=(), distinct_names=False
) -> Expr:
    """Members in order (required ones mandatory), then `extra` repeated; counts in [min_p, max_p].
    With property_order="any" (and counts that allow it) members come in any order instead.
    `distinct_names`: the caller checks that names are distinct, so several additional members
    may count towards min_p."""
    o, first, nxt, close_e, close_ne = parts
    n = len(members)
    cap = max_p if max_p is not None else max(min_p, 1)
    memo: dict[tuple[int, int], Expr] = {}
    chunk = 8 if cap == 1 else 4

    required_count = sum(1 for _, is_req in members if is_req)

    def refuse_repeated_extras(k: int) -> None:
        """Refuse (or widen) where, after k named members, additional ones must reach min_p."""
        if extra is not None and min_p - k >= 2 and k >= required_count and not distinct_names:
            # (k < required_count: unreachable) two additional members could share a name, and
            # json.loads would count them once; see _distinct_names_needed for when a check can't help
            lo = min_p - k
            em.ctx.unsupported(
                "minProperties",
                pointer,
                f"{lo} additional members would be needed to reach minProperties, and their names "
                "are kept distinct only with value checks on, patternProperties disjoint and every "
                "started undeclared name completable in endlessly many ways",
            )

    def tail(k: int) -> Expr:
        lo = max(0, min_p - k)
        hi = None if max_p is None else max_p - k
        refuse_repeated_extras(k)
        if hi is not None and hi < lo:
            return NOTHING
        close = close_e if k == 0 else close_ne
        if extra is None:
            return close if lo == 0 else NOTHING
        more = seq(nxt, extra)
        if k == 0:
            options = [close_e] if lo == 0 else []
            if hi is None or hi >= 1:
                rest = em.counted(more, max(lo - 1, 0), None if hi is None else hi - 1, "extra_members")
                options.append(seq(first, extra, rest, close_ne))
            return alt(*options) if options else NOTHING
        return seq(em.counted(more, lo, hi, "extra_members"), close)

    if em.ctx.property_order == "any" and n >= 1:
        counted = max_p is not None or min_p > required_count
        if n <= ANY_ORDER_MAX_MEMBERS and (
            not counted or _any_order_states(n, extra, min_p, max_p) <= ANY_ORDER_MAX_STATES
        ):
            if counted:
                refuse_repeated_extras(required_count)
            count = (min_p, max_p) if counted else (0, None)
            return seq(o, any_order_members(em, members, extra, (first, nxt, close_e, close_ne), *count))
        if not counted:
            # every instance writes its required members, so it has at least min_p members
            return seq(o, interleaved_members(em, members, extra, first, nxt, close_e, close_ne, required_rank))
        # past the limits, counted members keep the declared order (below)

    if max_p is None and min_p <= 1:
        body = ordered_members(em, members, extra, min_p == 0, first, nxt, close_e, close_ne)
        return seq(o, _checked_size(em, body, pointer))

    # F(i, k): members i.. given k members written so far (k capped at `cap` when unbounded);
    # k <= i, as only members before i were written, so a huge count costs no more states
    for i in range(n, -1, -1):
        for k in range(min(cap, i), -1, -1):
            if i == n:
                memo[(i, k)] = tail(k)
                continue
            item, is_req = members[i]
            nk = k + 1 if max_p is not None else min(k + 1, cap)
            if not is_req and nk == k > 0:
                # the count stays capped: "member i or not, then the same rest", written
                # linearly; alt(take, rest) would copy the rest twice per member as a tree
                memo[(i, k)] = seq(opt(seq(nxt, item)), memo[(i + 1, k)])
                continue
            take = NOTHING
            if max_p is None or k + 1 <= max_p:
                take = seq(first if k == 0 else nxt, item, memo[(i + 1, nk)])
            memo[(i, k)] = take if is_req else alt(take, memo[(i + 1, k)])
        if 0 < i < n and i % chunk == 0:
            # Checkpoint: the states at position i become rules, so every rule body stays a
            # small tree (a shared sub-expression would otherwise be copied quadratically or
            # exponentially often by anything that walks expressions as trees).
            for k in range(min(cap, i) + 1):
                if memo[(i, k)] != NOTHING:
                    name = em.new_rule("members")
                    em.rules[name] = memo[(i, k)]
                    memo[(i, k)] = Ref(name)
    return seq(o, _checked_size(em, memo[(0, 0)], pointer))


def _checked_size(em: Emitter, body: Expr, pointer: str) -> Expr:
    budget = em.ctx.limits.max_object_expr
    if expr_nodes(body) > budget:
        raise LimitExceededError(
            f"object schema at {pointer} has too many optional properties combined "
            f"with minProperties/maxProperties (more than {budget} expression nodes, "
            "Limits.max_object_expr); simplify it or raise the limit"
        )
    return body


def ordered_members(em: Emitter, members, extra, may_be_empty, first, nxt, close_e, close_ne) -> Expr:
    """Members in definition order (required ones mandatory), then `extra` repeated, with no
    maxProperties and at most one member required by minProperties (`may_be_empty` False).

    Two families of expressions, i running backwards over the members:
    written_from(i) "a first member at position i or later, then the rest" and
    rest(i) "more members from position i on, each after a separator, then the close".
    Member i continues with rest(i + 1) in both, so an automaton holds it once, where
    counting members written (object_body) copies every member into two chains.
    """
    n = len(members)
    required_after = [False] * (n + 1)  # a required member at position >= i
    for i in range(n - 1, -1, -1):
        required_after[i] = members[i][1] or required_after[i + 1]
    if extra is None:
        written_from, rest = NOTHING, close_ne
    else:
        more_extra = star(seq(nxt, extra))
        written_from, rest = seq(extra, more_extra, close_ne), seq(more_extra, close_ne)
    for i in range(n - 1, -1, -1):
        item, is_req = members[i]
        # pairs nest instead of flattening (seq / alt would copy the chain behind them at
        # every member, quadratic in ORDERED_CHUNK); no two alternatives are equal (their
        # member names differ)
        after = _pair(Seq, item, rest)
        written_from = after if is_req else _pair(Alt, after, written_from)
        rest = _pair(Seq, nxt, after) if is_req else _pair(Seq, opt(seq(nxt, item)), rest)
        if 0 < i and i % ORDERED_CHUNK == 0:
            # Checkpoint: written_from(i) becomes a rule, so each rule body stays a small tree
            # (the two families share sub-expressions, which tree walks would copy
            # exponentially often) and rest(i) is "close, or a separator and that rule".
            name = em.new_rule("members")
            em.rules[name] = written_from
            written_from = Ref(name)
            rest = seq(nxt, written_from) if required_after[i] else alt(close_ne, seq(nxt, written_from))
    opened = seq(first, written_from)
    return alt(close_e, opened) if may_be_empty and not required_after[0] else opened


def _any_order_states(n: int, extra, min_p: int, max_p: int | None) -> int:
    """How many (members left, members written) states any_order_members tracks for n members."""
    if extra is None:
        return 1 << n  # the members written are the ones not left
    return (1 << n) * ((max_p if max_p is not None else max(min_p, 1)) + 1)


def any_order_members(em: Emitter, members, extra, parts, min_p: int = 0, max_p: int | None = None) -> Expr:
    """The members in any order, each at most once, required ones present; additional members
    (`extra`, when allowed) anywhere between them; between min_p and max_p members in all.

    Each member becomes a rule, so this object's automaton only tracks which members are
    still to come (2^n states for n members) and, with additional members and a count to
    keep, how many were written (capped at min_p without max_p); the key bytes decide which
    member rule goes on.  Sub-expressions are shared per state; with a count of additional
    members each state is a rule, as the paths to it interleave the members in every way.
    """
    first, nxt, close_e, close_ne = parts
    refs = [em.rule_ref("member", item) for item, _ in members]
    required = [is_req for _, is_req in members]
    n = len(members)
    cap = max_p if max_p is not None else max(min_p, 1)
    counts_extra = extra is not None and (max_p is not None or min_p > 1)
    memo: dict[tuple[frozenset[int], int], Expr] = {}

    def rest(remaining: frozenset[int], written: int) -> Expr:
        """`remaining` members not written yet, `written` members written (at most `cap`)."""
        key = (remaining, written)
        if key not in memo:
            sep = nxt if written else first
            grows = max_p is None or written < max_p  # may one more member come?
            after = written + 1 if max_p is not None else min(written + 1, cap)
            options = []
            if not any(required[i] for i in remaining) and written >= min_p:
                options.append(close_ne if written else close_e)
            if grows:
                for i in sorted(remaining):
                    options.append(seq(sep, refs[i], rest(remaining - {i}, after)))  # noqa: F821 (del below)
            looping = extra is not None and written and after == written  # the capped count stays
            if extra is not None and grows and not looping:
                options.append(seq(sep, extra, rest(remaining, after)))  # noqa: F821
            body = alt(*options)
            if looping:
                body = seq(star(seq(nxt, extra)), body)
            memo[key] = em.rule_ref("members", body) if counts_extra and written and body != NOTHING else body
        return memo[key]

    expr = rest(frozenset(range(n)), 0)
    del rest  # empties the cell `rest` calls itself through: no cycle, the memo goes with the frame
    return expr


def interleaved_members(em: Emitter, members, extra, first, nxt, close_e, close_ne, required_rank=()) -> Expr:
    """The members in any order: required ones exactly once, optional and additional ones freely.

    For objects too large to track which members were written (2^n states), only the
    required members are tracked: in any order when there are at most
    INTERLEAVE_ANY_ORDER_REQUIRED of them, else in definition order or in the order of the
    `required` array (`required_rank`) among themselves.  An optional name may then repeat;
    json.loads keeps the last value, which is valid too, so the parsed instance still
    validates (the caller ensures min_p <= required and no max_p).
    """
    required = [item for item, is_req in members if is_req]
    optional = [item for item, is_req in members if not is_req] + ([extra] if extra is not None else [])
    free = em.rule_ref("optional_member", alt(*optional)) if optional else NOTHING
    any_order = len(required) <= INTERLEAVE_ANY_ORDER_REQUIRED
    if any_order and len(required) > 1:
        required = [em.rule_ref("member", item) for item in required]
    state_rules: dict[int, str] = {}
    chains = [list(range(len(required)))]
    if len(required_rank) == len(required):
        by_rank = sorted(range(len(required)), key=lambda i: required_rank[i])
        if by_rank != chains[0]:
            chains.append(by_rank)

    def pending(written: int) -> list[int]:
        todo = [i for i in range(len(required)) if not written >> i & 1]
        if any_order:
            return todo
        # the next member of each order whose prefix is exactly what was written
        count = len(required) - len(todo)
        nexts = {
            chain[count] for chain in chains if count < len(chain) and all(written >> i & 1 for i in chain[:count])
        }
        return sorted(nexts)

    def after(written: int) -> Expr:
        """At least one member written; `written` is the bit set of required ones written."""
        if written not in state_rules:
            name = state_rules[written] = em.new_rule("members")
            todo = pending(written)
            options = [] if todo else [close_ne]
            options += [seq(nxt, required[i], after(written | 1 << i)) for i in todo]  # noqa: F821 (del below)
            em.rules[name] = seq(star(seq(nxt, free)), alt(*options))
        return Ref(state_rules[written])

    options = [] if required else [close_e]
    if optional:
        options.append(seq(first, free, after(0)))
    options += [seq(first, required[i], after(1 << i)) for i in pending(0)]
    del after  # empties the cell `after` calls itself through: no reference cycle left to collect
    return alt(*options)


def _pair(kind, first: Expr, second: Expr) -> Expr:
    """Seq or Alt of two expressions, as seq / alt simplify NOTHING, without flattening."""
    if kind is Seq:
        return NOTHING if NOTHING in (first, second) else Seq((first, second))
    return second if first == NOTHING else first if second == NOTHING else Alt((first, second))


def _keys_by_patterns(key_dfa, pdfas: list, overlapping: bool, wanted: set[int], pointer: str, budget: int) -> list:
    """(mask, keys) in mask order for each mask in `wanted` (bit i: pattern i) whose keys -- those
    of `key_dfa` matching exactly the patterns in it -- are not empty, as minimal Dfas.

    Minimal automata are canonical (equal languages, equal Dfas), so the keys matching disjoint
    pattern i are key_dfa & pdfas[i], with nothing to subtract.  Overlapping patterns are taken
    depth first, pattern by pattern, so masks share the automata of their common choices.
    """

    def op(fn, pdfa):
        return budgeted_dfa_op(fn, pdfa, "patternProperties", pointer, budget)

    found: dict[int, Dfa] = {}
    if not overlapping:
        if 0 in wanted:
            dfa = key_dfa
            for pdfa in pdfas:
                dfa = op(dfa.difference, pdfa)
                if dfa.is_empty():
                    break
            found[0] = dfa
        for i, pdfa in enumerate(pdfas):
            if 1 << i in wanted:
                found[1 << i] = op(key_dfa.intersect, pdfa)
    else:

        def walk(i: int, mask: int, dfa) -> None:
            """Choices made for patterns 0..i-1 (in `mask`); `dfa` the keys that match them."""
            if i == len(pdfas):
                found[mask] = dfa
                return
            low = (1 << (i + 1)) - 1
            for choice, fn in ((mask | 1 << i, dfa.intersect), (mask, dfa.difference)):
                if any(m & low == choice for m in wanted):  # some wanted mask makes this choice
                    keys = op(fn, pdfas[i])
                    if not keys.is_empty():
                        walk(i + 1, choice, keys)

        if wanted and not key_dfa.is_empty():
            walk(0, 0, key_dfa)
        del walk  # empties the cell `walk` calls itself through: no reference cycle left to collect
    return [(mask, found[mask]) for mask in sorted(found) if not found[mask].is_empty()]
