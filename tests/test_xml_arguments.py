"""XML argument styles of structural tags (json_schema ``style`` qwen_xml / minimax_xml / glm_xml,
grammar/xml_arguments.py), as vLLM sends them for Qwen3-Coder, MiniMax-M2 and GLM-4.7.

Oracle: PARSE reads the elements back as the servers' parsers do (qwen_xml strips one newline
each side of a value; the others keep values verbatim) and COERCE turns each value into JSON by
the property's types (strings raw, other values parsed), then jsonschema validates the
arguments.  Rendered calls with valid arguments are accepted token by token on a real
tokenizer, calls that jsonschema rejects are refused, and random walks through the masks end
only in calls the oracle reads and jsonschema accepts."""

from __future__ import annotations

import itertools
import json
import re

import jsonschema
import numpy as np
import pytest
from support import grammar_compiler, hf_tokenizer, mask_walk, short_structural_tokens

import pushmask as pm
from pushmask.grammar.structural_tag import UnsupportedFormatError

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["c", "f"]},
        "code": {"type": "string", "pattern": "^[A-Z]{2}$"},
        "days": {"type": "integer", "minimum": 1, "maximum": 30},
        "utc": {"type": "boolean"},
        "note": {"type": "string"},
    },
    "required": ["city", "days"],
}

# style: (structural tag begin, end, element renderer (key, text, raw), element parser -> (key, text, raw))
STYLES = {
    "qwen_xml": (
        "<tool_call>\n<function=f>\n",
        "\n</function>\n</tool_call>",
        lambda k, v, raw: f"<parameter={k}>\n{v}\n</parameter>",
        lambda body: [
            (k, v[1:] if v.startswith("\n") else v, None)
            for k, v in (
                (k, v[:-1] if v.endswith("\n") else v)
                for k, v in re.findall(
                    r"<\s*parameter\s*=\s*([^>]*)>(.*?)(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s*=))", body, re.S
                )
            )
        ],
    ),
    "minimax_xml": (
        '<invoke name="f">\n',
        "</invoke>\n",
        lambda k, v, raw: f'<parameter name="{k}">{v}</parameter>\n',
        lambda body: [
            (k, v, None)
            for k, v in re.findall(
                r'<\s*parameter\s+name\s*=\s*"([^"]*)"\s*>(.*?)'
                r"(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s+name\s*=))",
                body,
                re.S,
            )
        ],
    ),
    "glm_xml": (
        "<tool_call>f",
        "</tool_call>",
        lambda k, v, raw: f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>",
        lambda body: [
            (k, v, None) for k, v in re.findall(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", body, re.S)
        ],
    ),
    # DeepSeek V3.2 / V4: string="true" marks raw text, "false" a JSON value (its parser reads both)
    "deepseek_xml": (
        '<｜DSML｜invoke name="f">\n',
        "</｜DSML｜invoke>\n",
        lambda k, v, raw: f'<｜DSML｜parameter name="{k}" string="{str(raw).lower()}">{v}</｜DSML｜parameter>\n',
        lambda body: re.findall(
            r'<｜DSML｜parameter\s+name="([^"]+)"(?:\s+string="([^"]*)")?\s*>(.*?)'
            r"(?:</｜DSML｜parameter>|(?=<｜DSML｜parameter\s+name=))",
            body,
            re.S,
        ),
    ),
    "deepseek_v4_1_xml": (
        '<｜DSML｜ invoke name="f">\n',
        "</｜DSML｜ invoke>\n",
        lambda k, v, raw: f'<｜DSML｜ parameter name="{k}" string="{str(raw).lower()}">{v}</｜DSML｜ parameter>\n',
        lambda body: re.findall(
            r'<｜DSML｜ parameter\s+name="([^"]+)"(?:\s+string="([^"]*)")?\s*>'
            r"(.*?)(?:</｜DSML｜ parameter>|(?=<｜DSML｜ parameter\s+name=))",
            body,
            re.S,
        ),
    ),
    # Kimi-K3: type="string" keeps the raw text, any other type JSON-decodes it; keys escape & and "
    "kimi_k3_xml": (
        '<|open|>call tool="f" index="1"<|sep|>',
        "<|close|>call<|sep|>",
        lambda k, v, raw: (
            f'<|open|>argument key="{k.replace("&", "&amp;").replace(chr(34), "&quot;")}" '
            f'type="{"string" if raw else json_type(json.loads(v))}"<|sep|>{v}<|close|>argument<|sep|>'
        ),
        lambda body: [
            (k.replace("&quot;", '"').replace("&amp;", "&"), v, flag)
            for k, flag, v in re.findall(
                r'<\|open\|>argument key="([^"]*)" type="([^"]*)"<\|sep\|>(.*?)<\|close\|>argument<\|sep\|>', body, re.S
            )
        ],
    ),
}
for _style in ("deepseek_xml", "deepseek_v4_1_xml"):  # the parser's fields (key, string flag, value) in order
    _begin, _end, _render, _parse = STYLES[_style]
    STYLES[_style] = (_begin, _end, _render, lambda body, parse=_parse: [(k, v, flag) for k, flag, v in parse(body)])

GOOD = [
    {"city": "Paris", "days": 3},
    {"city": "", "days": 30, "unit": "f", "utc": True},
    {"city": "a < b & c", "days": 1, "code": "FR", "note": "line 1\nline 2 x < y"},
    {"city": "\nx\n", "days": 2, "note": "<3 << 4"},
]
BAD = [
    {"city": "Paris"},
    {"city": "Paris", "days": 0},
    {"city": "Paris, France!", "days": 1},
    {"city": "P", "days": 1, "unit": "k"},
    {"city": "P", "days": 1, "code": "fr"},
    {"city": "P", "days": 1, "utc": "yes"},
    {"city": "P", "days": "x"},
]
# Values that spell the style's own markup: the parser reads other arguments than were meant.
SPOOFS = {
    "qwen_xml": ["a</parameter>b", "x\n</parameter>\n<parameter=days>\n0", "x< /parameter >", "x</function>"],
    "minimax_xml": ["a</parameter>b", 'x<parameter name="days">0', "x</invoke>"],
    "glm_xml": ["a</arg_value>b", "x</arg_value><arg_key>days</arg_key><arg_value>0", "x</tool_call>"],
    "deepseek_xml": ["a</｜DSML｜parameter>b", 'x<｜DSML｜parameter name="days" string="false">0'],
    "deepseek_v4_1_xml": ["a</｜DSML｜ parameter>b", "x</｜DSML｜ invoke>"],
    "kimi_k3_xml": [
        "a<|close|>argument<|sep|>b",
        'x<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>0',
        "x<|close|>call<|sep|>",
    ],
}


def finished_walks(compiled, seed: int, max_tokens: int = 200) -> list[str]:
    """The texts of the random mask walks (support.mask_walk: an empty mask fails the test) of 12
    that finished within max_tokens; at least 4 must."""
    rng = np.random.default_rng(seed)
    short = short_structural_tokens(compiled.tokenizer_info)
    outs = [mask_walk(compiled, rng, short, max_tokens=max_tokens) for _ in range(12)]
    texts = [out.decode("utf-8") for out in outs if out is not None]
    assert len(texts) >= 4
    return texts


def json_type(value) -> str:
    """A JSON value's type as Kimi-K3's renderer names it (integers are numbers)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", type(None): "null", list: "array", dict: "object"}[type(value)]


def coerce(value: str, schema: dict, flag: str | None):
    """A value as the parsers type it: raw for string schemas (DeepSeek: where string="true",
    Kimi-K3: type="string"), else the JSON it spells, or the text where it spells none."""
    if (
        flag in ("true", "string")
        or flag is None
        and (schema.get("type") == "string" or "enum" in schema and all(isinstance(v, str) for v in schema["enum"]))
    ):
        return value
    try:
        return json.loads(value.lower() if schema.get("type") == "boolean" else value)
    except json.JSONDecodeError:
        return value


def parse(style: str, text: str) -> dict | None:
    """None unless the text is one call; the call's body ends at its first closing tag (as the
    tool-call parsers cut it)."""
    begin, end, _, elements = STYLES[style]
    if not (text.startswith(begin) and text.endswith(end)):
        return None
    close = end[end.index("</") : end.index(">", end.index("</")) + 1] if "</" in end else end
    triples = elements(text[len(begin) : text.index(close, len(begin))])
    return {k: coerce(v, SCHEMA["properties"].get(k, {}), flag) for k, v, flag in triples}


def render(style: str, args: dict) -> str:
    """The elements in the schema's order (the order the style holds them to, as XGrammar's)."""
    begin, end, element, _ = STYLES[style]
    sep = "\n" if style == "qwen_xml" else ""
    order = sorted(args, key=lambda k: list(SCHEMA["properties"]).index(k) if k in SCHEMA["properties"] else 99)
    return (
        begin
        + sep.join(
            element(k, args[k] if isinstance(args[k], str) else json.dumps(args[k]), isinstance(args[k], str))
            for k in order
        )
        + end
    )


def tag(style: str, schema=SCHEMA) -> dict:
    begin, end, _, _ = STYLES[style]
    return {
        "type": "structural_tag",
        "format": {
            "type": "tag",
            "begin": begin,
            "end": end,
            "content": {"type": "json_schema", "json_schema": schema, "style": style},
        },
    }


def valid(args) -> bool:
    return args is not None and jsonschema.Draft202012Validator({**SCHEMA, "additionalProperties": False}).is_valid(
        args
    )


def accepts(compiled, tokens) -> bool:
    """Feed tokens; at each step the mask's bit for the token must agree with accept_token."""
    matcher = pm.GrammarMatcher(compiled)
    bitmask = pm.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    for token in tokens:
        matcher.fill_next_token_bitmask(bitmask)
        allowed = bool((int(np.asarray(bitmask)[0, token // 32]) >> (token % 32)) & 1)
        assert allowed == matcher.accept_token(token)
        if not allowed:
            return False
    return matcher.can_end()


@pytest.mark.parametrize("style", list(STYLES))
def test_rendered_calls_are_accepted_and_bad_ones_refused(style):
    compiled = grammar_compiler("qwen").compile_structural_tag(tag(style))
    tokenizer = hf_tokenizer("qwen")
    for args in GOOD:
        text = render(style, args)
        assert parse(style, text) == args and valid(args), text  # the renderer and the oracle agree
        assert accepts(compiled, tokenizer.encode(text, add_special_tokens=False)), text
    for args in BAD + [{"city": "P", "days": 1, "note": spoof} for spoof in SPOOFS[style]]:
        text = render(style, args)
        assert parse(style, text) != args or not valid(args), text  # the oracle reads no valid call from it
        assert not accepts(compiled, tokenizer.encode(text, add_special_tokens=False)), text


@pytest.mark.parametrize("style", list(STYLES))
def test_random_walks_end_in_arguments_the_parser_reads_and_jsonschema_accepts(style):
    """Without the unbounded "note" (walks wander in free text)."""
    bounded = {**SCHEMA, "properties": {k: v for k, v in SCHEMA["properties"].items() if k != "note"}}
    compiled = grammar_compiler("smollm2").compile_structural_tag(tag(style, bounded))
    for text in finished_walks(compiled, seed=7):
        assert valid(parse(style, text)), text


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"type": "object", "properties": {"x": {"type": ["string", "integer"]}}}, r"properties/x: a value of types"),
        ({"type": "object", "properties": {"x": {"type": "array", "items": {"type": "string"}}}}, r"types \['array'\]"),
        (
            {"type": "object", "patternProperties": {"^x": {}}, "properties": {"x": {"type": "string"}}},
            r"additionalProperties and \$defs only; \['patternProperties'\]",
        ),
        ({"type": "object", "additionalProperties": {"type": "array"}}, r"additionalProperties: a value of types"),
        (
            {"type": "object", "$defs": {"V": {"$ref": "#/$defs/V"}}, "properties": {"x": {"$ref": "#/$defs/V"}}},
            r"properties/x: \$ref '#/\$defs/V' \(beside other keywords, in a cycle",
        ),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/W"}}}, "names no definition"),
        ({"type": "object", "properties": {"a b>": {"type": "string"}}}, "cannot be written as an XML element name"),
        ({"type": "array"}, "need an object schema"),
    ],
)
def test_what_xml_cannot_write_exactly_is_refused_with_its_place(schema, message):
    with pytest.raises(UnsupportedFormatError, match=message):
        grammar_compiler("smollm2").compile_structural_tag(tag("qwen_xml", schema))


# Undeclared members (additionalProperties): XGrammar writes them after the declared ones, named
# by its [a-zA-Z_][a-zA-Z0-9_]*; pushmask keeps declared names out of them (an undeclared value
# would stand in for the declared one).
OPEN_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"],
    "additionalProperties": {"type": "integer", "minimum": 1},
}


def elements_of(style: str, text: str) -> list[str] | None:
    """The names of the call's elements in order, as the style's parser reads them."""
    begin, end, _, elements = STYLES[style]
    if not (text.startswith(begin) and text.endswith(end)):
        return None
    return [k for k, _, _ in elements(text[len(begin) : len(text) - len(end)])]


@pytest.mark.parametrize("style", list(STYLES))
def test_undeclared_members_take_additional_properties_and_never_a_declared_name(style):
    compiled = grammar_compiler("qwen").compile_structural_tag(tag(style, OPEN_SCHEMA))
    tokenizer = hf_tokenizer("qwen")
    validator = jsonschema.Draft202012Validator(OPEN_SCHEMA)
    for args, accepted in [
        ({"city": "Paris"}, True),
        ({"city": "Paris", "days": 3, "n_2": 1}, True),
        ({"city": "Paris", "days": 0}, False),
        ({"city": "Paris", "days": "x"}, False),
        ({"city": "Paris", "x-y": 1}, False),  # jsonschema allows it; XGrammar's names do not
    ]:
        text = render(style, args)
        if accepted:
            assert parse(style, text) == args and validator.is_valid(args), text  # the oracle agrees
        assert accepts(compiled, tokenizer.encode(text, add_special_tokens=False)) == accepted, text
    begin, end, element, _ = STYLES[style]
    sep = "\n" if style == "qwen_xml" else ""
    twice = begin + element("city", "Paris", True) + sep + element("city", "7", False) + end
    assert elements_of(style, twice) == ["city", "city"]  # the parser would read city = 7
    assert not accepts(compiled, tokenizer.encode(twice, add_special_tokens=False)), twice


@pytest.mark.parametrize("style", list(STYLES))
def test_random_walks_with_undeclared_members_end_in_valid_arguments(style):
    compiled = grammar_compiler("smollm2").compile_structural_tag(tag(style, OPEN_SCHEMA))
    validator = jsonschema.Draft202012Validator(OPEN_SCHEMA)
    for text in finished_walks(compiled, seed=11):
        assert validator.is_valid(parse(style, text)), text
        assert elements_of(style, text).count("city") == 1, text


@pytest.mark.parametrize("schema", [{}, {"type": "object"}])
@pytest.mark.parametrize("style", ["deepseek_xml", "deepseek_v4_1_xml"])
def test_an_unconstrained_schema_is_any_parameter_list(schema, style):
    """XGrammar's instances (test_deepseek_unconstrained_parameter_list): any names, raw values."""
    compiled = grammar_compiler("smollm2").compile_structural_tag(tag(style, schema))
    tokenizer = hf_tokenizer("smollm2")
    begin, end, element, _ = STYLES[style]
    for text, accepted in [
        (begin + end, True),
        (begin + element("first", "hello", True) + element("second", "hi there", True) + end, True),
        (begin + "hello" + end, False),
        (begin + element("first", "hello", False) + end, False),
    ]:
        assert accepts(compiled, tokenizer.encode(text, add_special_tokens=False)) == accepted, text


UNION_SCHEMA = {
    "type": "object",
    "properties": {"v": {"type": ["string", "integer"], "maxLength": 4, "minimum": 0}, "e": {"enum": ["a", 2, None]}},
    "required": ["v"],
}


@pytest.mark.parametrize("style", ["deepseek_xml", "deepseek_v4_1_xml"])
def test_deepseek_unions_of_strings_and_scalars_follow_the_string_mark(style):
    """string="true": the raw text is the string; "false": the JSON of a non-string value."""
    compiled = grammar_compiler("qwen").compile_structural_tag(tag(style, UNION_SCHEMA))
    tokenizer = hf_tokenizer("qwen")
    begin, end, element, elements = STYLES[style]
    validator = jsonschema.Draft202012Validator(UNION_SCHEMA)
    cases = [("v", text, raw) for text in ("abc", "42", "abcdef", "-1", '"ab"', "1.5", "x") for raw in (True, False)]
    cases += [("e", text, raw) for text in ("a", "2", "null", "b", '"a"') for raw in (True, False)]
    for key, text, raw in cases:
        call = begin + (element("v", "1", False) if key == "e" else "") + element(key, text, raw) + end
        read = {}
        for name, value, flag in elements(call[len(begin) : len(call) - len(end)]):
            try:
                read[name] = value if flag == "true" else json.loads(value)
            except json.JSONDecodeError:
                read = None
                break
        oracle = read is not None and validator.is_valid(read) and (flag == "true") == isinstance(read[key], str)
        assert accepts(compiled, tokenizer.encode(call, add_special_tokens=False)) == oracle, call


@pytest.mark.parametrize("style", list(STYLES))
def test_references_to_the_arguments_definitions_are_followed(style):
    schema = {
        "type": "object",
        "$defs": {
            "City": {"$ref": "#/$defs/Name"},
            "Name": {"type": "string", "maxLength": 5},
            "Small": {"maximum": 3},
        },
        "properties": {
            "city": {"$ref": "#/$defs/City"},
            "days": {"type": "integer", "allOf": [{"$ref": "#/$defs/Small"}]},
        },
        "required": ["city", "days"],
    }
    compiled = grammar_compiler("qwen").compile_structural_tag(tag(style, schema))
    tokenizer = hf_tokenizer("qwen")
    validator = jsonschema.Draft202012Validator(schema)
    for args in [{"city": "Paris", "days": 3}, {"city": "Berlin", "days": 3}, {"city": "Rome", "days": 4}]:
        text = render(style, args)
        assert parse(style, text) == args, text
        assert accepts(compiled, tokenizer.encode(text, add_special_tokens=False)) == validator.is_valid(args), text


def test_an_unknown_style_is_refused():
    from pushmask.grammar.xml_arguments import xml_arguments

    with pytest.raises(UnsupportedFormatError, match="style 'bogus_xml' is not supported"):
        xml_arguments({}, "bogus_xml", lambda _: pm.grammar.ir.lit(""), "#/format/json_schema")
    with pytest.raises(pm.GrammarError, match='style must be "json"'):
        grammar_compiler("smollm2").compile_structural_tag(
            {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": {}, "style": "bogus_xml"}}
        )


def test_kimi_k3_type_attribute_follows_each_value_of_a_union():
    """type="string": the raw text is the string; any other type: the JSON of a value of that
    type (integers are "number"); a type the value does not have is refused."""
    compiled = grammar_compiler("qwen").compile_structural_tag(tag("kimi_k3_xml", UNION_SCHEMA))
    tokenizer = hf_tokenizer("qwen")
    begin, end, _, elements = STYLES["kimi_k3_xml"]
    validator = jsonschema.Draft202012Validator(UNION_SCHEMA)

    def element(key: str, text: str, kind: str) -> str:
        return f'<|open|>argument key="{key}" type="{kind}"<|sep|>{text}<|close|>argument<|sep|>'

    texts = ("abc", "42", "abcdef", "-1", '"ab"', "1.5", "x", "true", "null", "a", "2", "b")
    kinds = ("string", "number", "integer", "boolean", "null")
    cases = [("v", text, kind) for text in texts for kind in kinds] + [
        ("e", text, kind) for text in texts for kind in kinds
    ]
    for key, text, kind in cases:
        call = begin + (element("v", "1", "number") if key == "e" else "") + element(key, text, kind) + end
        read = {}
        for name, value, flag in elements(call[len(begin) : len(call) - len(end)]):
            try:
                read[name] = value if flag == "string" else json.loads(value)
            except json.JSONDecodeError:
                read = None
                break
        oracle = read is not None and validator.is_valid(read) and json_type(read[key]) == kind
        assert accepts(compiled, tokenizer.encode(call, add_special_tokens=False)) == oracle, call


def test_kimi_k3_keys_are_written_escaped():
    schema = {"type": "object", "properties": {'quo"t&d': {"type": "integer"}}, "required": ['quo"t&d']}
    compiled = grammar_compiler("qwen").compile_structural_tag(tag("kimi_k3_xml", schema))
    tokenizer = hf_tokenizer("qwen")
    begin, end, element, _ = STYLES["kimi_k3_xml"]
    for key, accepted in [("quo&quot;t&amp;d", True), ('quo"t&d', False), ("quo&quot;t&d", False)]:
        call = begin + f'<|open|>argument key="{key}" type="number"<|sep|>1<|close|>argument<|sep|>' + end
        assert accepts(compiled, tokenizer.encode(call, add_special_tokens=False)) == accepted, call


ORDER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"}, "utc": {"type": "boolean"}},
    "required": ["city", "days"],
}


@pytest.mark.parametrize("style", ["qwen_xml", "glm_xml", "deepseek_xml", "kimi_k3_xml"])
@pytest.mark.parametrize("undeclared", [False, True])
def test_any_order_takes_each_member_at_most_once_and_the_required_ones(style, undeclared):
    """Every sequence of up to four elements (names repeated or not) against the oracle: the
    parser's reading is valid, and no declared name is written twice (an undeclared one may
    repeat, as in declared order: whichever value the parser keeps is valid)."""
    schema = {**ORDER_SCHEMA, "additionalProperties": {"type": "integer"}} if undeclared else ORDER_SCHEMA
    fmt = {"type": "json_schema", "json_schema": schema, "style": style, "any_order": True}
    begin, end, element, _ = STYLES[style]
    compiled = grammar_compiler("qwen").compile_structural_tag(
        {"type": "structural_tag", "format": {"type": "tag", "begin": begin, "end": end, "content": fmt}}
    )
    tokenizer = hf_tokenizer("qwen")
    validator = jsonschema.Draft202012Validator(
        {**schema, "additionalProperties": schema.get("additionalProperties", False)}
    )
    values = {"city": "Rome", "days": 3, "utc": True, "n": 1}
    sep = "\n" if style == "qwen_xml" else ""
    for size in range(5):
        for names in itertools.product(values, repeat=size):
            args = [(name, values[name]) for name in names]
            call = (
                begin
                + sep.join(element(k, v if isinstance(v, str) else json.dumps(v), isinstance(v, str)) for k, v in args)
                + end
            )
            declared = [name for name in names if name in schema["properties"]]
            oracle = len(set(declared)) == len(declared) and validator.is_valid(dict(args))
            assert accepts(compiled, tokenizer.encode(call, add_special_tokens=False)) == oracle, call


def test_any_order_past_its_member_limit_is_refused():
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(7)}}
    fmt = {"type": "json_schema", "json_schema": schema, "style": "qwen_xml", "any_order": True}
    with pytest.raises(UnsupportedFormatError, match="any_order over 7 declared properties"):
        grammar_compiler("smollm2").compile_structural_tag({"type": "structural_tag", "format": fmt})


@pytest.mark.parametrize(
    "value, texts",
    [
        # strings only: the raw text of any branch
        ({"anyOf": [{"const": "a"}, {"type": "string", "pattern": "^[0-9]{2}$"}]}, {"a": True, "42": True, "4": False}),
        # scalars only: the JSON text of any branch
        ({"anyOf": [{"type": "integer", "maximum": 3}, {"const": None}]}, {"2": True, "null": True, "4": False}),
    ],
)
def test_unions_of_one_reading_are_each_branch(value, texts):
    schema = {"type": "object", "properties": {"v": value}, "required": ["v"]}
    compiled = grammar_compiler("qwen").compile_structural_tag(tag("minimax_xml", schema))
    tokenizer = hf_tokenizer("qwen")
    begin, end, element, _ = STYLES["minimax_xml"]
    for text, accepted in texts.items():
        call = begin + element("v", text, True) + end
        assert accepts(compiled, tokenizer.encode(call, add_special_tokens=False)) == accepted, call
    mixed = {"type": "object", "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}
    with pytest.raises(UnsupportedFormatError, match="properties/v: a value of types any"):
        grammar_compiler("smollm2").compile_structural_tag(tag("minimax_xml", mixed))


@pytest.mark.parametrize("style", ["minimax_xml", "kimi_k3_xml"])
def test_a_root_literal_is_that_fixed_parameter_list(style):
    schema = {"enum": [{"city": "Rome", "days": 3}, {"city": "Oslo"}]}
    compiled = grammar_compiler("qwen").compile_structural_tag(tag(style, schema))
    tokenizer = hf_tokenizer("qwen")
    for args in ({"city": "Rome", "days": 3}, {"city": "Oslo"}, {"city": "Rome"}, {"city": "Oslo", "days": 3}, {}):
        call = render(style, args)
        accepted = args in schema["enum"]
        assert accepts(compiled, tokenizer.encode(call, add_special_tokens=False)) == accepted, call


M3 = "]<]minimax[>["
M3_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 6},
        "days": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 2},
        "spot": {
            "type": "object",
            "properties": {"x": {"type": "integer"}, "tag": {"enum": ["a", "b"]}},
            "required": ["x"],
        },
    },
    "required": ["city", "days"],
}


def m3_elements(text: str) -> list[tuple[str, str]] | None:
    """A MiniMax-M3 element list read back as its parser reads it: whitespace between elements,
    each ``M3<name>`` up to the matching ``M3</name>`` (same-named ones nest); None if it is not one."""
    found, at = [], 0
    while at < len(text):
        if text[at] in " \t\n\r":
            at += 1
            continue
        head = at + len(M3) + 1
        if not text.startswith(M3 + "<", at) or ">" not in text[head:]:
            return None
        name = text[head : text.index(">", head)]
        start = scan = text.index(">", head) + 1
        depth = 1
        while depth:
            opening, closing = text.find(f"{M3}<{name}>", scan), text.find(f"{M3}</{name}>", scan)
            if closing < 0:
                return None
            if 0 <= opening < closing:
                depth, scan = depth + 1, opening + 1
            else:
                depth, scan = depth - 1, closing + 1
        found.append((name, text[start : scan - 1]))
        at = scan - 1 + len(f"{M3}</{name}>")
    return found


def m3_read(text: str, schema: dict):
    """The JSON value the parser reads from `text` by `schema` (strings raw, scalars as JSON,
    objects and arrays as elements); raises ValueError where it reads none."""
    kind = schema.get("type", "string")
    if kind == "string":
        return text
    if kind in ("object", "array"):
        elements = m3_elements(text)
        if elements is None:
            raise ValueError(text)
        if kind == "array":
            return [m3_read(inner, schema["items"]) for name, inner in elements if name == "item" or _bad(name)]
        if len({name for name, _ in elements}) != len(elements):
            raise ValueError("a repeated member")
        return {name: m3_read(inner, schema["properties"].get(name, {})) for name, inner in elements}
    return json.loads(text)


def _bad(name):
    raise ValueError(name)


@pytest.mark.parametrize("any_order", [False, True])
def test_minimax_m3_nested_elements_against_its_reading(any_order):
    def element(name, inner):
        return f"{M3}<{name}>{inner}{M3}</{name}>"

    city = [element("city", v) for v in ("Rome", "", "Roma Città", f"a{M3}b", "Pa\nris")]
    days = [element("days", v) for v in ("", element("item", "1"), element("item", "1") + "\n" + element("item", "2"))]
    days += [element("days", element("item", "-1")), element("days", element("item", "1") * 3), element("days", "[1]")]
    spot = ["", element("spot", element("x", "3")), element("spot", element("x", "3") + element("tag", "b"))]
    spot += [
        element("spot", element("tag", "a") + element("x", "3")),
        element("spot", element("tag", "c") + element("x", "1")),
    ]
    spot += [element("spot", '{"x": 3}'), element("spot", element("x", "1") + element("x", "2"))]
    fmt = {"type": "json_schema", "json_schema": M3_SCHEMA, "style": "minimax_m3_xml", "any_order": any_order}
    compiled = grammar_compiler("qwen").compile_structural_tag({"type": "structural_tag", "format": fmt})
    tokenizer = hf_tokenizer("qwen")
    validator = jsonschema.Draft202012Validator({**M3_SCHEMA, "additionalProperties": False})
    for parts in itertools.product(city, days, spot):
        for order in (parts, parts[::-1]):
            text = "".join(order)
            try:
                read = m3_read(text, M3_SCHEMA)
                oracle = validator.is_valid(read)
            except ValueError:
                oracle = False
            in_order = order == parts  # city and days are never empty: reversed is out of order
            # what may differ from the oracle: XGrammar's declared order unless any_order, and
            # object members in declared order (nested objects follow any_order as the root does)
            if oracle and not any_order:
                oracle = in_order and (element("tag", "a") + element("x", "3") not in text)
            assert accepts(compiled, tokenizer.encode(text, add_special_tokens=False)) == oracle, text


def test_minimax_m3_refuses_what_it_cannot_write():
    for schema, message in [
        ({"type": "object", "additionalProperties": True}, "fixed property names"),
        ({"type": "object", "properties": {"v": {}}}, "types any"),
        ({"type": "object", "properties": {"/v": {"type": "string"}}}, "element name"),
    ]:
        fmt = {"type": "json_schema", "json_schema": schema, "style": "minimax_m3_xml"}
        with pytest.raises(UnsupportedFormatError, match=message):
            grammar_compiler("smollm2").compile_structural_tag({"type": "structural_tag", "format": fmt})


@pytest.mark.parametrize("style", ["deepseek_xml", "kimi_k3_xml"])
def test_unions_through_shared_references_are_flattened(style):
    """anyOf nested behind $refs that share each other (Fibonacci-like, 2^n paths) reads as its
    two leaves: the value "fixed" (raw) or an integer >= 1 (JSON)."""
    definitions = {"V0": {"const": "fixed"}, "V1": {"type": "integer", "minimum": 1}}
    for index in range(2, 30):
        definitions[f"V{index}"] = {"anyOf": [{"$ref": f"#/$defs/V{index - 1}"}, {"$ref": f"#/$defs/V{index - 2}"}]}
    schema = {"type": "object", "$defs": definitions, "properties": {"v": {"$ref": "#/$defs/V29"}}, "required": ["v"]}
    compiled = grammar_compiler("qwen").compile_structural_tag(tag(style, schema))
    tokenizer = hf_tokenizer("qwen")
    begin, end, element, _ = STYLES[style]
    for text, raw, accepted in [
        ("fixed", True, True),
        ("2", False, True),
        ("fixed", False, False),
        ('"fixed"', False, False),
        ("0", False, False),
        ("other", True, False),
    ]:
        if style == "kimi_k3_xml" and not raw and not text[0].isdigit():
            continue  # Kimi-K3's type attribute of a text that is no JSON number: not renderable
        call = begin + element("v", text, raw) + end
        assert accepts(compiled, tokenizer.encode(call, add_special_tokens=False)) == accepted, call


# Cohere (cohere_xml): recursive `<cofl:value name="KEY" type="raw|json|dict|list">VALUE</cofl:value>`
# elements, list items without a name.  Oracle: COHERE_READ reads a call back as a nesting XML
# reader would (each element up to its matching close, names with XML's entities decoded, raw
# text verbatim, json by json.loads, dict / list by their elements), then jsonschema validates.
COHERE_SCHEMA = {
    "type": "object",
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "label": {"type": "string", "maxLength": 5},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "maxItems": 2},
            },
            "required": ["label"],
        }
    },
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["c", 7, None]},
        "days": {"type": "integer", "minimum": 1, "maximum": 30},
        "spot": {
            "type": "object",
            "properties": {
                "x": {"type": "number"},
                "tag": {"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "boolean"}]},
            },
            "required": ["x"],
            "additionalProperties": {"type": "integer"},
        },
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "string"}, {"type": "integer"}],
            "items": False,
            "minItems": 1,
        },
        "tree": {"$ref": "#/$defs/Node"},
        "meta": {},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
COHERE_BEGIN, COHERE_END = '<cofl:tool_call id="0" name="f">', "</cofl:tool_call>"
_COHERE_HEAD = re.compile(r'<cofl:value(?: name="([^"]*)")? type="(raw|json|dict|list)">')


def cohere_name(name: str) -> str:
    return name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def cohere_render(value, name: str | None = None) -> str:
    """One value as Cohere's template writes it: strings raw, other scalars as JSON, objects and
    arrays as their elements."""
    head = "<cofl:value" + ("" if name is None else f' name="{cohere_name(name)}"')
    if isinstance(value, str):
        kind, inner = "raw", value
    elif isinstance(value, dict):
        kind, inner = "dict", "".join(cohere_render(v, k) for k, v in value.items())
    elif isinstance(value, list):
        kind, inner = "list", "".join(cohere_render(v) for v in value)
    else:
        kind, inner = "json", json.dumps(value)
    return f'{head} type="{kind}">{inner}</cofl:value>'


def cohere_elements(text: str) -> list[tuple[str | None, str, str]]:
    """The elements of `text` (whitespace between them), each up to its matching close."""
    found, at = [], 0
    while at < len(text):
        if text[at] in " \t\n\r":
            at += 1
            continue
        head = _COHERE_HEAD.match(text, at)
        if head is None:
            raise ValueError(text[at:])
        depth, scan = 1, head.end()
        while True:
            opening, closing = text.find("<cofl:value", scan), text.find("</cofl:value>", scan)
            if closing < 0:
                raise ValueError("unclosed")
            if 0 <= opening < closing:
                depth, scan = depth + 1, opening + len("<cofl:value")
                continue
            depth -= 1
            if not depth:
                break
            scan = closing + len("</cofl:value>")
        scan = closing
        name = head[1]
        if name is not None:
            decoded = re.sub(
                r"&(amp|lt|gt|quot);", lambda m: {"amp": "&", "lt": "<", "gt": ">", "quot": '"'}[m[1]], name
            )
            if "&" in re.sub(r"&(amp|lt|gt|quot);", "", name):
                raise ValueError(name)
            name = decoded
        found.append((name, head[2], text[head.end() : scan]))
        at = scan + len("</cofl:value>")
    return found


def cohere_value(kind: str, inner: str):
    if kind == "raw":
        return inner
    if kind == "json":
        return json.loads(inner)
    elements = cohere_elements(inner)
    if kind == "list":
        if any(name is not None for name, _, _ in elements):
            raise ValueError("a named list item")
        return [cohere_value(k, v) for _, k, v in elements]
    return cohere_members(elements)


def cohere_members(elements) -> dict:
    read = {}
    for name, kind, inner in elements:
        if name is None or name in read:
            raise ValueError(f"an unnamed or repeated member {name!r}")
        read[name] = cohere_value(kind, inner)
    return read


def cohere_read(text: str):
    """The arguments a call spells, None where it spells none."""
    if not (text.startswith(COHERE_BEGIN) and text.endswith(COHERE_END)):
        return None
    try:
        return cohere_members(cohere_elements(text[len(COHERE_BEGIN) : -len(COHERE_END)]))
    except (ValueError, json.JSONDecodeError):
        return None


def cohere_tag(schema, **options) -> dict:
    content = {"type": "json_schema", "json_schema": schema, "style": "cohere_xml", **options}
    return {
        "type": "structural_tag",
        "format": {"type": "tag", "begin": COHERE_BEGIN, "end": COHERE_END, "content": content},
    }


def cohere_call(args: dict) -> str:
    """The call's elements in the schema's order (the order the style holds them to, as XGrammar's)."""
    order = list(COHERE_SCHEMA["properties"])
    ordered = sorted(args, key=lambda k: order.index(k) if k in order else len(order))
    return COHERE_BEGIN + "".join(cohere_render(args[k], k) for k in ordered) + COHERE_END


COHERE_GOOD = [
    {"city": "Paris", "days": 3},
    {"city": "a < b & c", "days": 1, "unit": "c"},
    {"city": "x\n y ", "days": 30, "unit": 7, "spot": {"x": 1.5, "tag": "ab", "extra": 3}},
    {
        "city": "",
        "days": 2,
        "unit": None,
        "spot": {"x": -2, "tag": True},
        "pair": ["a", 1],
        "tree": {"label": "r", "kids": [{"label": "k", "kids": []}, {"label": "j"}]},
    },
    {"city": "x", "days": 2, "pair": ["only"], "meta": {"a": [1, "b", {"c": None}], "a&b": "<3"}},
    {"city": "x", "days": 2, "meta": "text"},
]
COHERE_BAD = [
    {"city": "Paris"},
    {"city": "Paris", "days": 0},
    {"city": "Paris, France!", "days": 1},
    {"city": "P", "days": 1, "unit": "f"},
    {"city": "P", "days": 1, "spot": {"tag": "ab"}},
    {"city": "P", "days": 1, "spot": {"x": 1, "tag": "AB"}},
    {"city": "P", "days": 1, "spot": {"x": 1, "extra": "s"}},
    {"city": "P", "days": 1, "pair": ["a", "b"]},
    {"city": "P", "days": 1, "pair": ["a", 1, 2]},
    {"city": "P", "days": 1, "pair": []},
    {"city": "P", "days": 1, "tree": {"label": "toolong"}},
    {"city": "P", "days": 1, "tree": {"label": "r", "kids": [{"label": "a"}, {"label": "b"}, {"label": "c"}]}},
    {"city": "P", "days": 1, "other": 1},
]
COHERE_SPOOFS = [
    'a</cofl:value><cofl:value name="days" type="json">0',
    "x</cofl:tool_call>",
    'x<cofl:value type="raw">y',
    "x< /cofl:value >",
]


def test_cohere_rendered_calls_are_accepted_and_bad_ones_refused():
    compiled = grammar_compiler("qwen").compile_structural_tag(cohere_tag(COHERE_SCHEMA))
    tokenizer = hf_tokenizer("qwen")
    validator = jsonschema.Draft202012Validator(COHERE_SCHEMA)
    for args in COHERE_GOOD:
        text = cohere_call(args)
        assert cohere_read(text) == args and validator.is_valid(args), text  # the renderer and the oracle agree
        assert accepts(compiled, tokenizer.encode(text, add_special_tokens=False)), text
    for args in COHERE_BAD + [{"city": spoof, "days": 1} for spoof in COHERE_SPOOFS]:
        text = cohere_call(args)
        read = cohere_read(text)
        assert read != args or not validator.is_valid(args), text  # the oracle reads no valid call from it
        assert not accepts(compiled, tokenizer.encode(text, add_special_tokens=False)), text
    # a value under another type than its own: refused (a string is raw, never quoted JSON)
    element = '<cofl:value name="city" type="raw">P</cofl:value>'
    for wrong in [
        '<cofl:value name="days" type="raw">3</cofl:value>',
        '<cofl:value name="days" type="dict">3</cofl:value>',
        element
        + '<cofl:value name="days" type="json">3</cofl:value><cofl:value name="unit" type="json">"c"</cofl:value>',
        element
        + '<cofl:value name="days" type="json">3</cofl:value><cofl:value name="pair" type="json">["a"]</cofl:value>',
        element + '<cofl:value name="days" type="json">3</cofl:value><cofl:value name="pair" type="list">'
        '<cofl:value name="0" type="raw">a</cofl:value></cofl:value>',
    ]:
        text = COHERE_BEGIN + wrong + COHERE_END
        assert not accepts(compiled, tokenizer.encode(text, add_special_tokens=False)), text
    spaced = COHERE_BEGIN + "\n" + element + ' \n<cofl:value name="days" type="json"> 3\n</cofl:value>\n' + COHERE_END
    assert cohere_read(spaced) == {"city": "P", "days": 3}
    assert accepts(compiled, tokenizer.encode(spaced, add_special_tokens=False)), spaced


def test_cohere_random_walks_end_in_arguments_the_reader_reads_and_jsonschema_accepts():
    """The nested members required, their strings bounded, without the value of any type
    ("meta") and the long "city" (walks wander in them)."""
    properties = json.loads(
        json.dumps({k: v for k, v in COHERE_SCHEMA["properties"].items() if k not in ("meta", "city")})
    )
    properties["pair"]["prefixItems"][0]["maxLength"] = 3
    properties["spot"]["properties"]["tag"]["anyOf"][0]["maxLength"] = 3
    bounded = {**COHERE_SCHEMA, "properties": properties, "required": ["days", "spot", "pair", "tree"]}
    compiled = grammar_compiler("smollm2").compile_structural_tag(cohere_tag(bounded))
    validator = jsonschema.Draft202012Validator(bounded)
    for text in finished_walks(compiled, seed=5, max_tokens=800):
        read = cohere_read(text)
        assert read is not None and validator.is_valid(read), text


def test_cohere_random_walks_over_values_of_any_type():
    """A tool without parameters (True): any members, any values, recursively."""
    compiled = grammar_compiler("smollm2").compile_structural_tag(cohere_tag(True))
    for text in finished_walks(compiled, seed=3):
        assert isinstance(cohere_read(text), dict), text


def test_cohere_names_are_written_escaped_and_undeclared_ones_never_declared():
    schema = {
        "type": "object",
        "properties": {'a"b': {"type": "integer"}, "x<y": {"type": "string"}},
        "required": ['a"b'],
        "additionalProperties": {"type": "string"},
    }
    compiled = grammar_compiler("qwen").compile_structural_tag(cohere_tag(schema, any_order=True))
    tokenizer = hf_tokenizer("qwen")
    validator = jsonschema.Draft202012Validator(schema)
    head = '<cofl:value name="a&quot;b" type="json">1</cofl:value>'
    for body, accepted in [
        (head, True),
        (head + '<cofl:value name="a&amp;b" type="raw">s</cofl:value>', True),
        ('<cofl:value name="x&lt;y" type="raw">s</cofl:value>' + head, True),
        (head + '<cofl:value name="a&quot;b" type="raw">s</cofl:value>', False),  # a declared name
        (head + '<cofl:value name="x&lt;y" type="json">1</cofl:value>', False),
        (head + '<cofl:value name="a&b" type="raw">s</cofl:value>', False),  # not escaped
        (head + '<cofl:value name="a\nb" type="raw">s</cofl:value>', False),  # XML reads it as "a b"
        (head + '<cofl:value name="" type="raw">s</cofl:value>', False),
        ('<cofl:value name="a&quot;b" type="raw">1</cofl:value>', False),
    ]:
        text = COHERE_BEGIN + body + COHERE_END
        if accepted:
            assert validator.is_valid(cohere_read(text)), text
        assert accepts(compiled, tokenizer.encode(text, add_special_tokens=False)) == accepted, text


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"properties": {"v": {"allOf": [{"type": "string"}, {"maxLength": 2}]}}}, r"properties/v: allOf of several"),
        (
            {"properties": {"v": {"oneOf": [{"type": "string"}, {"maxLength": 2}]}}},
            r"properties/v/oneOf/1: oneOf branches",
        ),
        ({"properties": {"v": {"minimum": 3}}}, r"properties/v: a cohere_xml value of any type"),
        ({"properties": {"v": {"type": "array", "uniqueItems": True}}}, r"properties/v: a cohere_xml list with"),
        ({"properties": {"a\nb": {"type": "string"}}}, "properties/a\nb: property name .* cohere_xml name"),
        ({"properties": {"v": {"type": "object", "minProperties": 1}}}, r"properties/v: cohere_xml arguments take"),
        ({"properties": {"v": {"type": "string", "not": {"const": "x"}}}}, r"properties/v: a raw string value with"),
    ],
)
def test_cohere_what_it_cannot_write_exactly_is_refused_with_its_place(schema, message):
    with pytest.raises(UnsupportedFormatError, match="#/format/content/json_schema/" + message):
        grammar_compiler("smollm2").compile_structural_tag(cohere_tag({"type": "object", **schema}))
    fmt = {"type": "json_schema", "json_schema": {"type": "object"}, "style": "cohere_xml", "excludes": ["x"]}
    with pytest.raises(UnsupportedFormatError, match="excludes is not supported for cohere_xml"):
        grammar_compiler("smollm2").compile_structural_tag({"type": "structural_tag", "format": fmt})
