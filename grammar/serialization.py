"""The serialized form of a grammar IR (Grammar.serialize_json / Grammar.deserialize_json, which
grammar_api.py sets on the IR's class), in the format core/serialization.py frames."""

from __future__ import annotations

import math

import numpy as np

from ..core.errors import GrammarError, InvalidArgumentError, LimitExceededError
from ..core.serialization import DeserializeFormatError, from_json, header, to_json
from .ir import (
    MAX_CODE_POINT,
    SURROGATES,
    Alt,
    ByteClass,
    Bytes,
    CharClass,
    CharFsm,
    Expr,
    Grammar,
    Ref,
    Repeat,
    Seq,
    char_fsm_of_columns,
    char_fsm_table,
)
from .passes import nullable_rules

_GRAMMAR_KIND = "Grammar"
# pushmask's node codes in `grammar_expr_data` (each node is [code, payload length, payload...],
# XGrammar's shape, with pushmask's own nodes; a reference is code 4 with the rule's id, as there)
_BYTES, _CHARS, _BYTE_CLASS, _REF, _SEQ, _ALT, _REPEAT, _FSM = 0, 1, 2, 4, 5, 6, 7, 8
_REFUSALS = ("GrammarError", "LimitExceededError")


def grammar_payload(grammar) -> dict:
    """The payload of a grammar IR (Grammar.serialize_json), keyed as XGrammar keys its own:
    `rules` ([name, body node id]), `root_rule_id`, `allow_empty_rule_ids` (the rules that match
    the empty string), and the nodes as one flat int list `grammar_expr_data` whose node k starts
    at `grammar_expr_indptr[k]`: [code, payload length, payload...], a node naming its children
    by their (smaller) ids, so shared subtrees are written once and no reader or writer recurses
    on deep trees.  The node codes are pushmask's (its IR is not XGrammar's), and so is the rest:
    `format` and `version`, `positions`, `token_limits`, `token_classes`, `temperatures`, `refusal`."""
    if grammar.checks:
        raise InvalidArgumentError(
            "Grammar.serialize_json: this grammar has value checks (uniqueItems or an overlapping oneOf, "
            "checked with jsonschema validators in this process), which have no JSON form; build the grammar "
            "again in the process that uses it"
        )
    rule_ids = {name: i for i, name in enumerate(grammar.rules)}
    undefined: list[str] = []  # referenced names no rule defines (a refused Regex's place holder)
    data: list[int] = []
    indptr: list[int] = []
    index: dict[int, int] = {}  # id(node) -> its node id
    for body in grammar.rules.values():
        stack = [(body, False)]
        while stack:
            node, children_done = stack.pop()
            if id(node) in index:
                continue
            kind = type(node)
            children = node.items if kind in (Seq, Alt) else (node.item,) if kind is Repeat else ()
            if not children_done:
                stack.append((node, True))
                stack.extend((child, False) for child in reversed(children) if id(child) not in index)
                continue
            if kind is Bytes:
                entry = [_BYTES, *node.value]
            elif kind is CharClass or kind is ByteClass:
                entry = [_CHARS if kind is CharClass else _BYTE_CLASS, *(bound for r in node.ranges for bound in r)]
            elif kind is Seq or kind is Alt:
                entry = [_SEQ if kind is Seq else _ALT, *(index[id(child)] for child in children)]
            elif kind is Repeat:
                entry = [_REPEAT, index[id(node.item)], node.min, -1 if node.max is None else node.max]
            elif kind is Ref:
                if node.name not in rule_ids:
                    rule_ids[node.name] = len(grammar.rules) + len(undefined)
                    undefined.append(node.name)
                entry = [_REF, rule_ids[node.name]]
            elif kind is CharFsm:
                table = char_fsm_table(node)
                rows = np.asarray(node.transitions if table is None else table, dtype=np.int64).reshape(-1, 4)
                entry = [_FSM, node.initial, len(node.finals), *sorted(node.finals), *rows.ravel().tolist()]
            else:  # pragma: no cover - every IR node kind is listed above
                raise TypeError(f"cannot serialize the grammar node {kind.__name__}")
            index[id(node)] = len(indptr)
            indptr.append(len(data))
            data.append(entry[0])
            data.append(len(entry) - 1)
            data.extend(entry[1:])
    refusal = grammar.refusal
    return {
        **header(_GRAMMAR_KIND),
        "rules": [[name, index[id(body)]] for name, body in grammar.rules.items()],
        "undefined_rules": undefined,
        "grammar_expr_data": data,
        "grammar_expr_indptr": indptr,
        "root_rule_id": rule_ids[grammar.root] if grammar.root in grammar.rules else -1,
        "allow_empty_rule_ids": sorted(rule_ids[name] for name in nullable_rules(grammar)),
        "allow_empty": grammar.allow_empty,
        "positions": [[name, line, column] for name, (line, column) in grammar.positions.items()],
        "token_limits": [[name, limit] for name, limit in grammar.token_limits.items()],
        "token_classes": [[terminal, sorted(ids)] for terminal, ids in grammar.token_classes.items()],
        "temperatures": [[name, t] for name, t in grammar.temperatures.items()],
        "refusal": (
            None
            if refusal is None
            else [type(refusal).__name__, getattr(refusal, "message", str(refusal)), *_line_column(refusal)]
        ),
    }


def checked_temperatures(pairs: list, rules) -> dict:
    """The rule temperatures of a payload ([rule, temperature] pairs; a Grammar's name its rules,
    a CompiledGrammar's number them): each rule one of `rules` (a name or an int, never a bool),
    each temperature a finite number >= 0; ValueError otherwise."""
    temperatures = {}
    for rule, t in pairs:
        if isinstance(rule, bool) or not isinstance(rule, (str, int)) or rule not in rules:
            raise ValueError(f"temperatures name {rule!r}, which is no rule")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"rule {rule!r} has temperature {t!r}, not a finite number >= 0")
        temperatures[rule] = float(t)
    return temperatures


def _line_column(error) -> list:
    return [getattr(error, "line", None), getattr(error, "column", None)]


def grammar_from_json(text: str | bytes) -> Grammar:
    """The Grammar serialize_json wrote; DeserializeFormatError for damaged text (a node id or
    rule id out of range, a child that is not an earlier node, node offsets that do not tile the
    data, an unknown node code, a range outside its alphabet, `allow_empty_rule_ids` that are not
    the rules matching the empty string)."""
    payload = from_json(text, _GRAMMAR_KIND)
    try:
        return _grammar_of_payload(payload)
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise DeserializeFormatError(f"the serialized Grammar is damaged: {error!r}") from None


def _ints(value, what: str) -> list[int]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise ValueError(f"{what} is not a list of integers")
    return value


def _grammar_of_payload(payload: dict) -> Grammar:
    data = _ints(payload["grammar_expr_data"], "grammar_expr_data")
    indptr = _ints(payload["grammar_expr_indptr"], "grammar_expr_indptr")
    rules = payload["rules"]
    if not isinstance(rules, list) or not all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and type(r[1]) is int for r in rules
    ):
        raise ValueError("rules is not a list of [name, node id]")
    names = [name for name, _ in rules] + [str(name) for name in payload["undefined_rules"]]
    if len(set(names)) != len(names):
        raise ValueError("a rule name is given twice")

    def child(i) -> Expr:
        if not 0 <= i < len(built):  # children come before their parent
            raise ValueError(f"node {len(built)} names child {i!r}, not an earlier node")
        return built[i]

    def ranges(pairs, top: int) -> tuple[tuple[int, int], ...]:
        if len(pairs) % 2:
            raise ValueError(f"node {len(built)} has an odd number of range bounds")
        out = tuple(zip(pairs[0::2], pairs[1::2]))
        if any(not 0 <= lo <= hi <= top for lo, hi in out):
            raise ValueError(f"node {len(built)} has a range outside 0..{top}")
        return out

    built: list[Expr] = []
    end = 0
    for start in indptr:
        if start != end or start + 2 > len(data) or data[start + 1] < 0 or start + 2 + data[start + 1] > len(data):
            raise ValueError(f"node {len(built)} starts at {start}, not where node {len(built) - 1} ends ({end})")
        code, body = data[start], data[start + 2 : start + 2 + data[start + 1]]
        end = start + 2 + len(body)
        node: Expr
        if code == _BYTES:
            if any(not 0 <= b <= 255 for b in body):
                raise ValueError(f"node {len(built)} holds a byte outside 0..255")
            node = Bytes(bytes(body))
        elif code == _CHARS:
            node = CharClass(ranges(body, MAX_CODE_POINT))
            if any(lo <= SURROGATES[1] and hi >= SURROGATES[0] for lo, hi in node.ranges):
                raise ValueError(f"node {len(built)} holds surrogate code points")
        elif code == _BYTE_CLASS:
            node = ByteClass(ranges(body, 255))
        elif code in (_SEQ, _ALT):
            node = (Seq if code == _SEQ else Alt)(tuple(child(i) for i in body))
        elif code == _REPEAT and len(body) == 3:
            low, high = body[1], None if body[2] == -1 else body[2]
            if low < 0 or (high is not None and high < low):
                raise ValueError(f"node {len(built)} repeats {low}..{high} times")
            node = Repeat(child(body[0]), low, high)
        elif code == _REF and len(body) == 1:
            if not 0 <= body[0] < len(names):
                raise ValueError(f"node {len(built)} references rule {body[0]}, past the {len(names)} rules")
            node = Ref(names[body[0]])
        elif code == _FSM and len(body) >= 2 and 0 <= body[1] <= len(body) - 2 and (len(body) - 2 - body[1]) % 4 == 0:
            finals = frozenset(body[2 : 2 + body[1]])
            rows = np.asarray(body[2 + body[1] :], dtype=np.int64).reshape(-1, 4)
            if (rows < 0).any() or (rows[:, 2] > MAX_CODE_POINT).any() or (rows[:, 1] > rows[:, 2]).any():
                raise ValueError(f"node {len(built)} has a transition outside the code points")
            node = char_fsm_of_columns(body[0], finals, *rows.T)
        else:
            raise ValueError(f"node {len(built)} has an unknown code {code!r} or a payload of the wrong length")
        built.append(node)
    if end != len(data):
        raise ValueError(f"grammar_expr_data holds {len(data) - end} values past the last node")
    root_id = payload["root_rule_id"]
    if type(root_id) is not int or not 0 <= root_id < len(rules):
        raise ValueError(f"root_rule_id {root_id!r} is not one of the {len(rules)} rules")
    refusal = payload.get("refusal")
    error = None
    if refusal is not None:
        kind, message, line, column = refusal
        if kind not in _REFUSALS:
            raise ValueError(f"unknown refusal {kind!r}")
        error = GrammarError(message, line, column) if kind == "GrammarError" else LimitExceededError(message)
    grammar = Grammar(
        {name: child(i) for name, i in rules},
        rules[root_id][0],
        {str(name): (int(line), int(column)) for name, line, column in payload["positions"]},
        bool(payload["allow_empty"]),
        token_limits={str(name): int(limit) for name, limit in payload["token_limits"]},
        token_classes={int(terminal): frozenset(int(t) for t in ids) for terminal, ids in payload["token_classes"]},
        temperatures=checked_temperatures(payload.get("temperatures", []), set(names)),
        refusal=error,
    )
    allow_empty = _ints(payload["allow_empty_rule_ids"], "allow_empty_rule_ids")
    ids = {name: i for i, name in enumerate(names)}
    if allow_empty != sorted(ids[name] for name in nullable_rules(grammar)):
        raise ValueError("allow_empty_rule_ids are not the rules that match the empty string")
    return grammar


def serialize_json(grammar: Grammar) -> str:
    """This grammar as JSON text (XGrammar's name); Grammar.deserialize_json reads it back."""
    return to_json(grammar_payload(grammar))
