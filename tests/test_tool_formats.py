"""Built-in tool-call formats (grammar/tool_formats.py) against the models' own formats.

Ground truth: RENDER writes calls the way each family's chat template renders an assistant
message with tool calls (the template lines are quoted above each), and PARSE reads them back as
the serving parsers do.  On a real tokenizer, every rendered call with valid arguments is allowed
token by token by the masks and accepted; every call whose parsed arguments jsonschema rejects is
refused, and the mask already leaves out the token where it is refused.  Random walks through the
masks end only in outputs whose calls PARSE reads and jsonschema accepts."""

from __future__ import annotations

import importlib.util
import json
import re

import jsonschema
import numpy as np
import pytest
from support import grammar_compiler, hf_tokenizer, mask_walk, short_structural_tokens, tokenizer_info

import pushmask as pm
from pushmask.core.errors import GrammarError
from pushmask.grammar.structural_tag import UnsupportedFormatError
from pushmask.grammar.tool_formats import FAMILIES, tool_call_structural_tag

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1},
    },
    "required": ["city"],
}
CLOCK = {"type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": CLOCK}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": CLOCK}

GOOD = [
    [("get_weather", {"city": "Paris"})],
    [("get_weather", {"city": "New York, NY", "unit": "fahrenheit", "days": 3})],
    [("get_time", {"utc": True})],
    [("get_weather", {"city": "Lyon"}), ("get_time", {"utc": False})],
]
BAD = [
    [("get_weather", {})],
    [("get_weather", {"city": 5})],
    [("get_weather", {"city": "Paris", "days": 0})],
    [("get_weather", {"city": "Paris", "unit": "kelvin"})],
    [("get_weather", {"city": "Paris", "country": "FR"})],
    [("get_weather", {"city": "Paris", "days": "3"})],
    [("get_time", {"utc": "yes"})],
    [("get_time", {"utc": True, "zone": "CET"})],
    [("get_weather", {"city": "Paris", "days": 2.5})],
    [("get_time", {"utc": 1})],
    [("get_weather", {"city": "Paris", "unit": "Celsius"})],
]

# Which real tokenizer each family is checked with: the family's own where shared/ has it, else
# SmolLM2's byte-level BPE (every marker is then text spelled by ordinary tokens).
TOKENIZER = {"llama": "llama3", "hermes": "qwen", "mistral": "mistral", "qwen3_coder": "qwen"}


def raw(value) -> str:
    """{{ v if v is string else v | tojson }}: the XML templates' value rendering."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def args_json(args) -> str:
    return json.dumps(args, ensure_ascii=False)


RENDER = {
    # Llama 3.1: '{"name": "' + tool_call.name + '", "parameters": ' + tool_call.arguments | tojson + "}"
    # (several calls: "; " between them, as vLLM's llama3_json parser splits them)
    "llama": lambda calls: "; ".join(f'{{"name": "{n}", "parameters": {args_json(a)}}}' for n, a in calls),
    # Qwen2.5 / Hermes: '<tool_call>\n{"name": "' + name + '", "arguments": ' + arguments | tojson + '}\n</tool_call>'
    "hermes": lambda calls: "\n".join(
        f'<tool_call>\n{{"name": "{n}", "arguments": {args_json(a)}}}\n</tool_call>' for n, a in calls
    ),
    # Mistral 7B v0.3: "[TOOL_CALLS] [" + (tool_call.function | tojson)[:-1] + ', "id": "' + id + '"}' joined by ", " + "]"
    "mistral": lambda calls: (
        "[TOOL_CALLS] ["
        + ", ".join(
            f'{{"name": "{n}", "arguments": {args_json(a)}, "id": "a1B2c3D4{i}"}}' for i, (n, a) in enumerate(calls)
        )
        + "]"
    ),
    # Mistral tokenizer v11+ (vLLM's mistral parser): each call '[TOOL_CALLS]' + name + '[ARGS]' + arguments JSON,
    # nothing after the last one
    "mistral_v11": lambda calls: "".join(f"[TOOL_CALLS]{n}[ARGS]{args_json(a)}" for n, a in calls),
    # Qwen3-Coder: '<tool_call>\n<function=' + name + '>\n' then per argument '<parameter=' + k + '>\n' + value +
    # '\n</parameter>\n' (mappings and sequences | tojson, other values | string), then '</function>\n</tool_call>'
    "qwen3_coder": lambda calls: "\n".join(
        f"<tool_call>\n<function={n}>\n"
        + "".join(
            f"<parameter={k}>\n{raw(v) if not isinstance(v, bool) else str(v)}\n</parameter>\n" for k, v in a.items()
        )
        + "</function>\n</tool_call>"
        for n, a in calls
    ),
    # DeepSeek V3 / R1: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + type + '<｜tool▁sep｜>' + name + '\n```json\n' +
    # arguments + '\n```<｜tool▁call▁end｜>', later calls after '\n', then '<｜tool▁calls▁end｜>'
    "deepseek_v3": lambda calls: (
        "<｜tool▁calls▁begin｜>"
        + "\n".join(
            f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{args_json(a)}\n```<｜tool▁call▁end｜>"
            for n, a in calls
        )
        + "<｜tool▁calls▁end｜>"
    ),
    # DeepSeek V3.1: '<｜tool▁call▁begin｜>' + name + '<｜tool▁sep｜>' + arguments + '<｜tool▁call▁end｜>'
    "deepseek_v3_1": lambda calls: (
        "<｜tool▁calls▁begin｜>"
        + "".join(f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{args_json(a)}<｜tool▁call▁end｜>" for n, a in calls)
        + "<｜tool▁calls▁end｜>"
    ),
    # Kimi K2: '<|tool_calls_section_begin|>' then '<|tool_call_begin|>' + id ('functions.NAME:INDEX') +
    # '<|tool_call_argument_begin|>' + arguments + '<|tool_call_end|>' per call, '<|tool_calls_section_end|>'
    "kimi_k2": lambda calls: (
        "<|tool_calls_section_begin|>"
        + "".join(
            f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{args_json(a)}<|tool_call_end|>"
            for i, (n, a) in enumerate(calls)
        )
        + "<|tool_calls_section_end|>"
    ),
    # GLM-4.5: '\n<tool_call>' + name + '\n', per argument '<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n',
    # '</tool_call>'
    "glm45": lambda calls: "".join(
        f"\n<tool_call>{n}\n"
        + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{raw(v)}</arg_value>\n" for k, v in a.items())
        + "</tool_call>"
        for n, a in calls
    ),
    # GLM-4.7: '<tool_call>' + name, per argument '<arg_key>k</arg_key><arg_value>v</arg_value>', '</tool_call>'
    "glm47": lambda calls: "".join(
        f"<tool_call>{n}"
        + "".join(f"<arg_key>{k}</arg_key><arg_value>{raw(v)}</arg_value>" for k, v in a.items())
        + "</tool_call>"
        for n, a in calls
    ),
    # MiniMax-M2: '\n<minimax:tool_call>\n', per call '<invoke name="' + name + '">\n' then per argument
    # '<parameter name="k">v</parameter>\n', '</invoke>\n'; '</minimax:tool_call>'
    "minimax_m2": lambda calls: (
        "\n<minimax:tool_call>\n"
        + "".join(
            f'<invoke name="{n}">\n'
            + "".join(f'<parameter name="{k}">{raw(v)}</parameter>\n' for k, v in a.items())
            + "</invoke>\n"
            for n, a in calls
        )
        + "</minimax:tool_call>"
    ),
    # Harmony (gpt-oss): '<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>' + arguments, then the
    # stop token <|call|> (one call ends the turn)
    "harmony": lambda calls: "".join(
        f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>{args_json(a)}" for n, a in calls
    ),
}


def _xml_args(pairs, name):
    """Argument values as the parsers read them: raw for string properties, JSON otherwise
    (Python's True/False too, which Qwen3-Coder's template writes)."""
    out = {}
    for key, value in pairs:
        schema = SCHEMAS.get(name, {}).get("properties", {}).get(key, {})
        try:
            out[key] = (
                value
                if schema.get("type") == "string"
                else json.loads({"True": "true", "False": "false"}.get(value, value))
            )
        except json.JSONDecodeError:
            out[key] = value  # not JSON: the parsers keep the text
    return out


def _json_objects(text: str) -> list[dict]:
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text.startswith("<|python_tag|>", at):
            at += len("<|python_tag|>")
        obj, at = decoder.raw_decode(text, at)
        out.append(obj)
        if text.startswith("; ", at):
            at += 2
    return out


PARSE = {
    "llama": lambda t: [
        (o["name"], o["parameters"])
        for o in _json_objects(t[t.index('{"name"') if "<|python_tag|>" not in t else t.index("<|python_tag|>") :])
    ],
    "hermes": lambda t: [
        (o["name"], o["arguments"]) for o in map(json.loads, re.findall(r"<tool_call>\n(.*?)\n</tool_call>", t, re.S))
    ],
    "mistral": lambda t: [(o["name"], o["arguments"]) for o in json.loads(t.split("[TOOL_CALLS]", 1)[1])],
    # the arguments run to the next [TOOL_CALLS] or the end of the output
    "mistral_v11": lambda t: [
        (n, json.loads(a)) for n, a in (p.split("[ARGS]", 1) for p in t.split("[TOOL_CALLS]")[1:])
    ],
    "qwen3_coder": lambda t: [
        (n, _xml_args(re.findall(r"<parameter=(.*?)>\n(.*?)\n</parameter>", body, re.S), n))
        for n, body in re.findall(r"<function=(.*?)>\n(.*?)</function>", t, re.S)
    ],
    "deepseek_v3": lambda t: [
        (n, json.loads(a))
        for n, a in re.findall(
            r"<｜tool▁call▁begin｜>function<｜tool▁sep｜>(.*?)\n```json\n(.*?)\n```<｜tool▁call▁end｜>", t, re.S
        )
    ],
    "deepseek_v3_1": lambda t: [
        (n, json.loads(a))
        for n, a in re.findall(r"<｜tool▁call▁begin｜>(.*?)<｜tool▁sep｜>(.*?)<｜tool▁call▁end｜>", t, re.S)
    ],
    "kimi_k2": lambda t: [
        (n, json.loads(a))
        for n, a in re.findall(
            r"<\|tool_call_begin\|>functions\.(.*?):\d+<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", t, re.S
        )
    ],
    "glm45": lambda t: [
        (n, _xml_args(re.findall(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", b, re.S), n))
        for n, b in re.findall(r"<tool_call>([^\n<]*)(.*?)</tool_call>", t, re.S)
    ],
    "minimax_m2": lambda t: [
        (n, _xml_args(re.findall(r'<parameter name="(.*?)">(.*?)</parameter>', b, re.S), n))
        for n, b in re.findall(r'<invoke name="(.*?)">\n(.*?)</invoke>', t, re.S)
    ],
    # the recipient after the channel or in the header before it, a space before <|constrain|> or not
    "harmony": lambda t: [
        (n or m, json.loads(a))
        for n, m, a in re.findall(
            r"(?:<\|channel\|>commentary to=functions\.([^\s<]+)| to=functions\.([^\s<]+)<\|channel\|>commentary)"
            r" ?<\|constrain\|>json<\|message\|>(.*)",
            t,
            re.S,
        )
    ],
}
PARSE["glm47"] = PARSE["glm45"]


def valid(calls) -> bool:
    return bool(calls) and all(
        name in SCHEMAS and jsonschema.Draft202012Validator(SCHEMAS[name]).is_valid(args) for name, args in calls
    )


def compiled_for(family, name=None, **options):
    compiler = grammar_compiler(name or TOKENIZER.get(family, "smollm2"))
    return compiler.compile_structural_tag(tool_call_structural_tag(family, TOOLS, **options))


def encode(name, text) -> list[int]:
    """Tokens that spell exactly `text` (a SentencePiece tokenizer puts a space before the first
    piece: then the tokens of "\\n" + text, less the leading ones)."""
    tokenizer, info = hf_tokenizer(name), tokenizer_info(name)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if info.decode_tokens(ids) != text.encode():
        ids = tokenizer.encode("\n" + text, add_special_tokens=False)
        ids = next(ids[i:] for i in range(len(ids)) if info.decode_tokens(ids[i:]) == text.encode())
    return ids


def run_tokens(compiled, tokens) -> tuple[bool, int]:
    """Feed tokens one by one; at each step the mask's bit for the token must say what
    accept_token does.  (accepted and can end, number of tokens accepted)."""
    matcher = pm.GrammarMatcher(compiled)
    bitmask = pm.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    for i, token in enumerate(tokens):
        matcher.fill_next_token_bitmask(bitmask)
        allowed = bool((int(np.asarray(bitmask)[0, token // 32]) >> (token % 32)) & 1)
        accepted = matcher.accept_token(token)
        assert allowed == accepted, f"token {i} ({token}): mask says {allowed}, accept_token says {accepted}"
        if not accepted:
            return False, i
    return matcher.can_end(), len(tokens)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_models_own_calls_are_accepted_and_bad_arguments_refused(family):
    name = TOKENIZER.get(family, "smollm2")
    required = compiled_for(family, tool_choice="required")
    auto = compiled_for(family)
    for calls in GOOD:
        if family == "harmony" and len(calls) > 1:
            continue  # a Harmony call ends the turn
        text = RENDER[family](calls)
        assert PARSE[family](text) == calls  # the renderer and the parser agree
        said = encode(name, text if family == "harmony" else "I'll check. " + text)  # Harmony: a message or a call
        assert run_tokens(auto, said) == (True, len(said))
        assert run_tokens(required, encode(name, text.strip()))[0], text
    refused = 0
    for calls in BAD:
        text = RENDER[family](calls)
        if valid(PARSE[family](text)):
            continue  # e.g. {"city": 5} written raw in XML reads back as the string "5"
        refused += 1
        for compiled in (auto, required):
            assert not run_tokens(compiled, encode(name, text.strip()))[0], text
    assert refused >= 6


@pytest.mark.parametrize("family", list(FAMILIES))
def test_random_walks_end_in_calls_the_parser_reads_and_jsonschema_accepts(family):
    """Walks through the "required" grammar of one call to get_time (a boolean: values end soon
    in every family) on SmolLM2's vocabulary, JSON without free whitespace (else walks wander in it)."""
    tag = tool_call_structural_tag(family, TOOLS[1:], tool_choice="required", parallel_tool_calls=False)
    compiled = grammar_compiler("smollm2").compile_structural_tag(tag, any_whitespace=False)
    rng = np.random.default_rng(1)
    short = short_structural_tokens(compiled.tokenizer_info)
    finished = 0
    for _ in range(6):
        out = mask_walk(compiled, rng, short, max_tokens=250)
        if out is None:
            continue
        finished += 1
        calls = PARSE[family](out.decode("utf-8"))
        assert valid(calls), out
    assert finished >= 2


@pytest.mark.parametrize("family", ["hermes", "deepseek_v3", "glm45", "minimax_m2", "kimi_k2", "harmony"])
def test_reasoning_comes_first(family):
    open_, close = FAMILIES[family].reasoning
    call = RENDER[family]([("get_weather", {"city": "Paris"})]).strip()
    thought = "The user wants the weather; call get_weather.\n"
    name = TOKENIZER.get(family, "smollm2")
    spaced = "\n\n" if family != "harmony" else ""
    compiled = compiled_for(family, tool_choice="required", reasoning=True)
    assert run_tokens(compiled, encode(name, f"{open_}\n{thought}{close}{spaced}{call}"))[0]
    assert not run_tokens(compiled, encode(name, call))[0]  # the reasoning is not skipped
    opened = compiled_for(family, tool_choice="required", reasoning=True, reasoning_opened=True)
    assert run_tokens(opened, encode(name, f"{thought}{close}{spaced}{call}"))[0]
    assert not run_tokens(opened, encode(name, f"{thought}{close}{spaced}{call}{close}"))[0]


@pytest.mark.parametrize("family", ["hermes", "qwen3_coder", "mistral", "mistral_v11", "kimi_k2", "glm47", "harmony"])
def test_tool_choice(family):
    name = TOKENIZER.get(family, "smollm2")
    weather = RENDER[family]([("get_weather", {"city": "Paris"})]).strip()
    clock = RENDER[family]([("get_time", {"utc": True})]).strip()
    named = compiled_for(family, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert run_tokens(named, encode(name, clock))[0]
    assert not run_tokens(named, encode(name, weather))[0]
    assert not run_tokens(compiled_for(family, tool_choice="required"), encode(name, "Hello there."))[0]
    none = compiled_for(family, tool_choice="none")
    if family != "harmony":
        assert run_tokens(none, encode(name, "Hello there."))[0]
    assert not run_tokens(none, encode(name, weather))[0]
    if family != "harmony":
        two = RENDER[family]([("get_weather", {"city": "Paris"}), ("get_time", {"utc": True})]).strip()
        assert run_tokens(compiled_for(family, tool_choice="required"), encode(name, two))[0]
        assert not run_tokens(
            compiled_for(family, tool_choice="required", parallel_tool_calls=False), encode(name, two)
        )[0]


# ---------------------------------------------------------------- markers that are special tokens


def test_llama_python_tag_is_the_special_token():
    """On Llama 3's vocabulary <|python_tag|> is a special token: with special_tokens the call
    after it is allowed by the token's id; its text spelled by ordinary tokens is not."""
    info = tokenizer_info("llama3")
    tag = tool_call_structural_tag("llama", TOOLS, special_tokens=info.special_token_texts)
    compiled = grammar_compiler("llama3").compile_structural_tag(tag)
    call = RENDER["llama"]([("get_weather", {"city": "Paris"})])
    python_tag = info.special_token_texts["<|python_tag|>"]
    tokens = [python_tag] + encode("llama3", call)
    assert hf_tokenizer("llama3").encode("<|python_tag|>" + call, add_special_tokens=False)[0] == python_tag
    assert run_tokens(compiled, tokens)[0] and run_tokens(compiled, encode("llama3", "Sure: " + call))[0]
    assert not run_tokens(compiled, [python_tag] + encode("llama3", RENDER["llama"]([("get_weather", {})])))[0]
    spelled = hf_tokenizer("llama3").encode("<|python_tag|>", add_special_tokens=False, split_special_tokens=True)
    required = grammar_compiler("llama3").compile_structural_tag(
        tool_call_structural_tag("llama", TOOLS, "required", special_tokens=info.special_token_texts)
    )
    assert run_tokens(required, tokens)[0]
    assert python_tag not in spelled and not run_tokens(required, spelled + encode("llama3", call))[0]
    text_form = grammar_compiler("llama3").compile_structural_tag(tool_call_structural_tag("llama", TOOLS))
    assert not run_tokens(text_form, tokens)[0]  # without special_tokens the marker is text


def with_special_tokens(base: str, markers: list[str]) -> tuple[pm.TokenizerInfo, dict[str, int]]:
    """A real vocabulary plus the family's markers as special tokens (the models' own
    tokenizers are not in shared/)."""
    info = tokenizer_info(base)
    ids = {m: info.vocab_size + i for i, m in enumerate(markers)}
    vocab = [b if i not in info.special_token_ids else None for i, b in enumerate(info.decoded_vocab)]
    return pm.TokenizerInfo(
        vocab + [None] * len(markers),
        vocab_type="raw",
        stop_token_ids=info.stop_token_ids,
        special_token_ids=list(info.special_token_ids) + list(ids.values()),
        special_token_texts={**info.special_token_texts, **ids},
    ), ids


def tokens_with_specials(base: str, text: str, ids: dict[str, int]) -> list[int]:
    pattern = "(" + "|".join(re.escape(m) for m in sorted(ids, key=len, reverse=True)) + ")"
    out = []
    for piece in re.split(pattern, text):
        out.extend([ids[piece]] if piece in ids else encode(base, piece) if piece else [])
    return out


MARKERS = {
    "mistral": ["[TOOL_CALLS]"],
    "mistral_v11": ["[TOOL_CALLS]", "[ARGS]"],
    "deepseek_v3": [
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁sep｜>",
    ],
    "kimi_k2": [
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
    ],
    "harmony": ["<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|start|>"],
    "hermes": ["<tool_call>", "</tool_call>", "<think>", "</think>"],
}


@pytest.mark.parametrize("family", list(MARKERS))
def test_special_token_markers(family):
    """With the markers as special tokens, the model's token sequence (marker ids between text
    tokens) is accepted, bad arguments are refused, and the markers' text is refused."""
    info, ids = with_special_tokens("smollm2", MARKERS[family])
    compiler = pm.GrammarCompiler(info)
    reasoning = family in ("hermes", "harmony")
    compiled, required = (
        compiler.compile_structural_tag(
            tool_call_structural_tag(
                family, TOOLS, choice, special_tokens=info.special_token_texts, reasoning=reasoning
            )
        )
        for choice in ("auto", "required")
    )
    prefix = {
        "hermes": "<think>\nok\n</think>\n\n",
        "harmony": "<|channel|>analysis<|message|>ok<|end|><|start|>assistant",
    }
    for calls in GOOD[:3]:
        text = prefix.get(family, "") + RENDER[family](calls)
        for grammar in (compiled, required):
            assert run_tokens(grammar, tokens_with_specials("smollm2", text, ids))[0], text
        assert not run_tokens(required, encode("smollm2", text))[0]  # the markers' text is not the markers
    bad = prefix.get(family, "") + RENDER[family]([("get_weather", {"city": "Paris", "days": 0})])
    for grammar in (compiled, required):
        assert not run_tokens(grammar, tokens_with_specials("smollm2", bad, ids))[0]


def test_mistral_v11_has_no_text_after_the_calls():
    """vLLM's mistral parser reads everything after [ARGS] up to the next [TOOL_CALLS] as the
    arguments: text may come before the calls, never after them."""
    compiled = compiled_for("mistral_v11")
    call = RENDER["mistral_v11"]([("get_time", {"utc": True})])
    assert run_tokens(compiled, encode("smollm2", "Checking. " + call))[0]
    assert not run_tokens(compiled, encode("smollm2", call + " Done."))[0]
    assert PARSE["mistral_v11"]("Checking. " + call) == [("get_time", {"utc": True})]


def test_harmony_call_ends_with_the_call_token():
    """With <|call|> a special token of the vocabulary, a gpt-oss call ends with it (by id): the
    call without it cannot end, its text spelled by ordinary tokens is refused."""
    markers = MARKERS["harmony"] + ["<|call|>"]
    info, ids = with_special_tokens("smollm2", markers)
    compiled = pm.GrammarCompiler(info).compile_structural_tag(
        tool_call_structural_tag("harmony", TOOLS, "required", special_tokens=info.special_token_texts)
    )
    call = RENDER["harmony"]([("get_weather", {"city": "Paris"})])
    assert run_tokens(compiled, tokens_with_specials("smollm2", call + "<|call|>", ids)) == (
        True,
        len(tokens_with_specials("smollm2", call + "<|call|>", ids)),
    )
    assert not run_tokens(compiled, tokens_with_specials("smollm2", call, ids))[0]
    spelled = tokens_with_specials("smollm2", call, ids) + encode("smollm2", "<|call|>")
    assert not run_tokens(compiled, spelled)[0]


def test_harmony_recipient_in_the_header_and_no_space():
    """gpt-oss may put the recipient in the header (after the generation prompt's role) and
    leave out the space before <|constrain|>."""
    compiled = compiled_for("harmony", tool_choice="required")
    args = '{"city": "Paris"}'
    for text in (
        f" to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{args}",
        f"<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{args}",
    ):
        assert run_tokens(compiled, encode("smollm2", text))[0]
        assert PARSE["harmony"](text) == [("get_weather", {"city": "Paris"})]
    assert not run_tokens(
        compiled, encode("smollm2", f"<|channel|>commentary to=functions.get_weathe <|constrain|>json<|message|>{args}")
    )[0]


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown tool-call family 'llama4'"):
        tool_call_structural_tag("llama4", TOOLS)
    with pytest.raises(ValueError, match="no reasoning format"):
        tool_call_structural_tag("mistral", TOOLS, reasoning=True)
    with pytest.raises(GrammarError, match='not "auto", "required", "none" or a function'):
        tool_call_structural_tag("hermes", TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(GrammarError, match='needs a "name"'):
        tool_call_structural_tag("hermes", [{"type": "function", "function": {}}])
    mixed = [{"name": "f", "parameters": {"type": "object", "properties": {"s": {"type": ["string", "integer"]}}}}]
    with pytest.raises(
        UnsupportedFormatError, match=r"tool 'f'/properties/s: a value of types \['integer', 'string'\]"
    ):
        tool_call_structural_tag("qwen3_coder", mixed)  # raw "5" would read back as either
    assert tool_call_structural_tag("hermes", mixed)  # JSON families quote strings
    patterned = [
        {
            "name": "f",
            "parameters": {
                "type": "object",
                "properties": {"s": {"type": "string", "pattern": "^a+$"}},
                "required": ["s"],
            },
        }
    ]
    compiled = grammar_compiler("smollm2").compile_structural_tag(
        tool_call_structural_tag("qwen3_coder", patterned, tool_choice="required")
    )
    call = "<tool_call>\n<function=f>\n<parameter=s>\n{}\n</parameter>\n</function>\n</tool_call>"
    assert run_tokens(compiled, encode("smollm2", call.format("aaa")))[0]  # raw strings held to their pattern
    assert not run_tokens(compiled, encode("smollm2", call.format("aab")))[0]
    open_object = [
        {"name": "f", "parameters": {"type": "object", "additionalProperties": True, "properties": {"a": {}}}}
    ]
    glm_call = "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>{}</arg_key><arg_value>x</arg_value></tool_call>"
    compiled = grammar_compiler("smollm2").compile_structural_tag(
        tool_call_structural_tag("glm45", open_object, tool_choice="required")
    )
    assert run_tokens(compiled, encode("smollm2", glm_call.format("b")))[0]  # an undeclared member
    assert not run_tokens(compiled, encode("smollm2", glm_call.format("a")))[0]  # never a declared name
    minimax_call = '<minimax:tool_call>\n<invoke name="f">\n<parameter name="any_name">x</parameter></invoke>\n</minimax:tool_call>'
    for loose in (
        {"name": "f", "parameters": {"type": "object"}},
        {"name": "f", "parameters": True},
        {"name": "f", "strict": False, "parameters": WEATHER},
    ):  # any parameter list, as XGrammar reads these
        compiled = grammar_compiler("smollm2").compile_structural_tag(
            tool_call_structural_tag("minimax_m2", [loose], tool_choice="required")
        )
        assert run_tokens(compiled, encode("smollm2", minimax_call))[0]
        assert tool_call_structural_tag("kimi_k2", [loose])  # JSON families take any object there


def test_no_parameters_means_no_arguments():
    compiled = grammar_compiler("smollm2").compile_structural_tag(
        tool_call_structural_tag("hermes", [{"name": "now"}], tool_choice="required")
    )
    ok = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
    assert run_tokens(compiled, encode("smollm2", ok))[0]
    assert not run_tokens(compiled, encode("smollm2", ok.replace("{}", '{"a": 1}')))[0]


# Families whose format xgrammar 0.2.8's get_model_structural_tag also writes (its model name).
XGRAMMAR_MODELS = {
    "llama": "llama",
    "hermes": "qwen_3",
    "qwen3_coder": "qwen_3_coder",
    "kimi_k2": "kimi",
    "deepseek_v3": "deepseek_r1",
    "glm45": "glm_4_7",
    "glm47": "glm_4_7",
}


@pytest.mark.skipif(
    importlib.util.find_spec("xgrammar") is None,
    reason="xgrammar is not installed (pip install xgrammar): the chat-template renderings stand alone",
)
@pytest.mark.parametrize("family", list(XGRAMMAR_MODELS))
def test_xgrammar_reads_the_same_renderings(family):
    """A second reading of the same templates: xgrammar's built-in structural tag for the model
    accepts every rendered call with valid arguments that it can write (Qwen3-Coder's Python
    booleans aside: xgrammar writes JSON ones)."""
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string

    tag = xgr.get_model_structural_tag(XGRAMMAR_MODELS[family], TOOLS, tool_choice="auto", reasoning=False)
    grammar = xgr.Grammar.from_structural_tag(tag)
    for calls in GOOD:
        if family == "qwen3_coder" and any(isinstance(v, bool) for _, args in calls for v in args.values()):
            continue
        assert _is_grammar_accept_string(grammar, RENDER[family](calls)), calls
