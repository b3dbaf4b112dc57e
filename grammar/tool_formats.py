"""Built-in tool-call formats: the structural tag (grammar/structural_tag.py) of a model family's
tool-call and reasoning output, from OpenAI-style tools and tool_choice.

    tag = tool_call_structural_tag("hermes", tools, tool_choice="auto", reasoning=True)
    compiled = compiler.compile_structural_tag(tag)

Each family writes its calls as its chat template renders them (FAMILIES lists the models).  The
arguments are a JSON value of the tool's ``parameters`` (JSON families), or one XML element per
declared property (XML families, grammar/xml_arguments.py: string properties raw, the others as JSON, as the templates
write them).  ``tool_choice``: "auto" (free text with calls), "required" (calls only, at least
one), "none" (text only, no call can start), or a named function (exactly that one call).

Special tokens: a family's markers (``[TOOL_CALLS]``, ``<|python_tag|>``, ``<｜tool▁calls▁begin｜>``,
...) are written as text unless `special_tokens` names them; pushmask never lets a special token
stand for its text, so pass the model's special token texts (``TokenizerInfo.special_token_texts``)
and the markers that are special tokens become ``token`` formats (the free text before a call then
needs no exclusion: a token is not text).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..core.errors import GrammarError, InvalidArgumentError
from .xml_arguments import check_xml_arguments

__all__ = ["FAMILIES", "tool_call_structural_tag"]

TEXT = {"type": "any_text"}
SPACE = {"type": "regex", "pattern": r"\s*"}


@dataclass(frozen=True)
class _Tool:
    name: str
    parameters: dict | bool


@dataclass(frozen=True)
class Family:
    """How one model family writes its calls: `call(writer, tool)` is one call; `section` wraps
    all the calls of a turn (the trigger is then its begin, and `section_gap` a regex after it),
    else one of `triggers` starts every call; `separator` goes between calls; `reasoning` is the
    (open, close) pair of its thinking; `calls_end_output`: text may come before the calls only."""

    models: str
    call: Callable | None  # None: the family's calls are written another way (`_harmony`)
    triggers: tuple[str, ...]
    separator: str = ""
    section: tuple[str, str] | None = None
    section_gap: str | None = None
    reasoning: tuple[str, str] | None = ("<think>", "</think>")
    calls_end_output: bool = False  # no text after the calls (the parser reads it as arguments)


class _Writer:
    """Builds formats, writing the markers that are special tokens as `token` formats.  Tags keep
    XGrammar's `tag` / `triggered_tags` / `tags_with_separator` forms while their begins are text;
    with a token inside a begin they become the equivalent sequences."""

    def __init__(self, special_tokens: Iterable[str]):
        self.specials = sorted({s for s in special_tokens if s}, key=len, reverse=True)

    def pieces(self, text: str) -> list[str | dict]:
        """`text` cut into text pieces and token formats (the special tokens in it)."""
        out: list[str | dict] = []
        start = at = 0
        while at < len(text):
            special = next((s for s in self.specials if text.startswith(s, at)), None)
            if special is None:
                at += 1
                continue
            if at > start:
                out.append(text[start:at])
            out.append({"type": "token", "token": special})
            at = start = at + len(special)
        if start < len(text):
            out.append(text[start:])
        return out

    def is_text(self, text: str) -> bool:
        """No special token in `text`."""
        return all(isinstance(p, str) for p in self.pieces(text))

    def const(self, text: str) -> dict:
        parts = [p if isinstance(p, dict) else {"type": "const_string", "value": p} for p in self.pieces(text)]
        return {"type": "const_string", "value": ""} if not parts else parts[0] if len(parts) == 1 else _seq(*parts)

    def tag(self, begin: str, content: dict, end: str) -> dict:
        ends = [self.pieces(e) for e in (begin, end)]
        if all(len(p) <= 1 for p in ends):  # each side one text or one token: a tag
            begin_, end_ = (p[0] if p else "" for p in ends)
            return {"type": "tag", "begin": begin_, "content": content, "end": end_}
        first = ends[1][0] if ends[1] else None
        if content is TEXT and isinstance(first, str):  # free text stops before the end's text, as in a tag
            content = {"type": "any_text", "excludes": [first]}
        return {"type": "sequence", "elements": [self.const(begin), content, self.const(end)]}

    def triggered(self, triggers: list[str], tags: list[dict], at_least_one: bool, stop_after_first: bool) -> dict:
        if all(t["type"] == "tag" and isinstance(t["begin"], str) for t in tags):
            return {
                "type": "triggered_tags",
                "triggers": triggers,
                "tags": tags,
                "at_least_one": at_least_one,
                "stop_after_first": stop_after_first,
            }
        # Token triggers: free text excludes only the text triggers; the rest is triggered_tags'
        # language written out.
        text = {"type": "any_text", "excludes": [t for t in triggers if self.is_text(t)]}
        tag = _or(tags)
        if stop_after_first:
            return tag if at_least_one else _seq(text, {"type": "optional", "content": tag})
        more = {"type": "star", "content": _seq(tag, text)}
        return _seq(tag, text, more) if at_least_one else _seq(text, more)

    def joined(self, tags: list[dict], separator: str, at_least_one: bool, stop_after_first: bool) -> dict:
        if self.is_text(separator) and all(t["type"] == "tag" for t in tags):
            return {
                "type": "tags_with_separator",
                "tags": tags,
                "separator": separator,
                "at_least_one": at_least_one,
                "stop_after_first": stop_after_first,
            }
        tag = _or(tags)
        body = tag if stop_after_first else _seq(tag, {"type": "star", "content": _seq(self.const(separator), tag)})
        return body if at_least_one else {"type": "optional", "content": body}


def _seq(*elements: dict) -> dict:
    return {"type": "sequence", "elements": list(elements)}


def _or(elements: list[dict]) -> dict:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


def _json(tool: _Tool) -> dict:
    return {"type": "json_schema", "json_schema": tool.parameters}


# -- XML parameters ----------------------------------------------------------------------------


def _xml(tool: _Tool, style: str) -> dict:
    """The tool's arguments as XML elements (grammar/xml_arguments.py), checked here so that a
    schema XML cannot hold is refused when the tag is built, naming the tool."""
    check_xml_arguments(tool.parameters, style, f"tool {tool.name!r}")
    return {"type": "json_schema", "json_schema": tool.parameters, "style": style}


# -- the families --------------------------------------------------------------------------------


def _llama(w: _Writer, tool: _Tool) -> list[dict]:
    head = f'{{"name": {json.dumps(tool.name)}, "parameters": '
    return [w.tag(head, _json(tool), "}"), w.tag("<|python_tag|>" + head, _json(tool), "}")]


def _hermes(w: _Writer, tool: _Tool) -> list[dict]:
    return [w.tag(f'<tool_call>\n{{"name": {json.dumps(tool.name)}, "arguments": ', _json(tool), "}\n</tool_call>")]


_MISTRAL_ID = {"type": "optional", "content": {"type": "regex", "pattern": r', "id": "[A-Za-z0-9]{9}"'}}


def _mistral(w: _Writer, tool: _Tool) -> list[dict]:
    return [w.tag(f'{{"name": {json.dumps(tool.name)}, "arguments": ', _seq(_json(tool), _MISTRAL_ID), "}")]


def _mistral_v11(w: _Writer, tool: _Tool) -> list[dict]:
    return [w.tag(f"[TOOL_CALLS]{tool.name}[ARGS]", _json(tool), "")]


def _qwen3_coder(w: _Writer, tool: _Tool) -> list[dict]:
    # each element a line of its own: '<parameter=KEY>\nVALUE\n</parameter>\n'
    return [w.tag(f"<tool_call>\n<function={tool.name}>\n", _xml(tool, "qwen_xml"), "</function>\n</tool_call>")]


def _deepseek_v3(w: _Writer, tool: _Tool) -> list[dict]:
    return [
        w.tag(
            f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{tool.name}\n```json\n",
            _json(tool),
            "\n```<｜tool▁call▁end｜>",
        )
    ]


def _deepseek_v3_1(w: _Writer, tool: _Tool) -> list[dict]:
    return [w.tag(f"<｜tool▁call▁begin｜>{tool.name}<｜tool▁sep｜>", _json(tool), "<｜tool▁call▁end｜>")]


def _kimi_k2(w: _Writer, tool: _Tool) -> list[dict]:
    index = {"type": "regex", "pattern": "[0-9]{1,6}"}  # the call's number in the conversation
    return [
        w.tag(
            f"<|tool_call_begin|>functions.{tool.name}:",
            _seq(index, w.const("<|tool_call_argument_begin|>"), _json(tool)),
            "<|tool_call_end|>",
        )
    ]


def _glm(w: _Writer, tool: _Tool) -> list[dict]:
    # GLM-4.5 / 4.6 put each key and value on a line of their own, GLM-4.7 / 5 no newlines
    return [w.tag(f"<tool_call>{tool.name}", _xml(tool, "glm_xml"), "</tool_call>")]


def _minimax_m2(w: _Writer, tool: _Tool) -> list[dict]:
    return [w.tag(f'<invoke name="{tool.name}">\n', _xml(tool, "minimax_xml"), "</invoke>\n")]


FAMILIES: dict[str, Family] = {
    "llama": Family(
        "Llama 3.1 / 3.2 / 3.3 JSON tool calls (optionally after <|python_tag|>)",
        _llama,
        triggers=('{"name": ', "<|python_tag|>"),
        separator="; ",
        reasoning=None,
    ),
    "hermes": Family(
        "Hermes 2 Pro, Qwen 2.5, Qwen3, QwQ: <tool_call> JSON </tool_call>",
        _hermes,
        triggers=("<tool_call>",),
        separator="\n",
    ),
    "mistral": Family(
        "Mistral 7B v0.3, Nemo, Small (before v11): [TOOL_CALLS] [JSON list]",
        _mistral,
        triggers=("[TOOL_CALLS]",),
        separator=", ",
        section=("[TOOL_CALLS]", "]"),
        section_gap=r" ?\[",
        reasoning=None,
    ),  # "[TOOL_CALLS] [" (v0.3), "[TOOL_CALLS][" (Nemo),
    "mistral_v11": Family(
        "Mistral Small 3.2, Magistral, Devstral (tokenizer v11 and later): [TOOL_CALLS]NAME[ARGS]JSON per call",
        _mistral_v11,
        triggers=("[TOOL_CALLS]",),
        reasoning=None,
        calls_end_output=True,
    ),
    "qwen3_coder": Family(
        "Qwen3-Coder, Qwen3-Coder-Next: <function=NAME> with <parameter=KEY> elements",
        _qwen3_coder,
        triggers=("<tool_call>",),
        separator="\n",
    ),
    "deepseek_v3": Family(
        "DeepSeek V3 / V3-0324, R1 / R1-0528: function<｜tool▁sep｜>NAME and a ```json block",
        _deepseek_v3,
        triggers=("<｜tool▁calls▁begin｜>",),
        separator="\n",
        section=("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
    ),
    "deepseek_v3_1": Family(
        "DeepSeek V3.1, V3.2-Exp: NAME<｜tool▁sep｜>JSON",
        _deepseek_v3_1,
        triggers=("<｜tool▁calls▁begin｜>",),
        section=("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
    ),
    "kimi_k2": Family(
        "Kimi K2: <|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>JSON",
        _kimi_k2,
        triggers=("<|tool_calls_section_begin|>",),
        section=("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
    ),
    "glm45": Family(
        "GLM-4.5 / 4.6: <tool_call>NAME with <arg_key>/<arg_value> pairs, one a line",
        _glm,
        triggers=("<tool_call>",),
        separator="\n",
    ),
    "glm47": Family("GLM-4.7 / 5: as GLM-4.5 without the newlines", _glm, triggers=("<tool_call>",)),
    "minimax_m2": Family(
        'MiniMax-M2: <minimax:tool_call> with <invoke name="NAME"> and <parameter name="KEY">',
        _minimax_m2,
        triggers=("<minimax:tool_call>",),
        section=("<minimax:tool_call>\n", "</minimax:tool_call>"),
    ),
    "harmony": Family(
        "gpt-oss (OpenAI Harmony): <|channel|>commentary to=functions.NAME ... <|message|>JSON",
        None,
        triggers=("<|channel|>",),
        reasoning=("<|channel|>analysis<|message|>", "<|end|><|start|>assistant"),
    ),
}


# -- the entry point -----------------------------------------------------------------------------


def tool_call_structural_tag(
    family: str,
    tools: list,
    tool_choice: Any = "auto",
    *,
    parallel_tool_calls: bool = True,
    reasoning: bool = False,
    reasoning_opened: bool = False,
    special_tokens: Iterable[str] = (),
) -> dict:
    """The structural tag of `family`'s output with these tools.

    Parameters
    ----------
    family : str
        A key of FAMILIES.
    tools : list
        OpenAI tools (``{"type": "function", "function": {"name", "parameters", "strict"}}``) or
        bare ``{"name", "parameters"}``; no ``parameters``: no arguments (as OpenAI reads it);
        ``"strict": False``: any JSON object.
    tool_choice : "auto", "required", "none", or ``{"type": "function", "function": {"name": ...}}``
        Text and calls, calls only, text only, or exactly one call of the named function.
    parallel_tool_calls : bool
        False: at most one call.
    reasoning : bool
        The output starts with the family's reasoning (``<think>`` text ``</think>``; Harmony's
        analysis channel).
    reasoning_opened : bool
        With `reasoning`: the prompt already opened it (templates that end the generation prompt
        with ``<think>``), so the output starts inside the reasoning.
    special_tokens : iterable of str
        Texts that are single special tokens of the model's vocabulary
        (``TokenizerInfo.special_token_texts``): markers among them are matched as tokens.

    Returns
    -------
    dict
        ``{"type": "structural_tag", "format": ...}`` for ``GrammarCompiler.compile_structural_tag``.
    """
    spec = FAMILIES.get(family)
    if spec is None:
        raise InvalidArgumentError(f"unknown tool-call family {family!r}; one of {', '.join(FAMILIES)}")
    if (reasoning or reasoning_opened) and spec.reasoning is None:
        raise InvalidArgumentError(f"the {family} family has no reasoning format")
    if reasoning_opened and not reasoning:
        raise InvalidArgumentError("reasoning_opened=True needs reasoning=True")
    writer = _Writer(special_tokens)
    tools = [_tool(t, i) for i, t in enumerate(tools or [])]
    choice, tools = _choice(tool_choice, tools)
    if family == "harmony":
        body = _harmony(writer, tools, choice)
    else:
        body = _calls(spec, writer, tools, choice, parallel_tool_calls)
    if reasoning:
        assert spec.reasoning is not None  # checked above
        open_, close = spec.reasoning
        if reasoning_opened:
            think = _seq({"type": "any_text", "excludes": [close]}, writer.const(close))
        else:
            think = writer.tag(open_, TEXT, close)
        gap = [] if family == "harmony" or choice == "auto" or choice == "none" else [SPACE]
        body = _seq(think, *gap, body)
    return {"type": "structural_tag", "format": body}


def _tool(tool: Any, index: int) -> _Tool:
    if not isinstance(tool, dict):
        raise GrammarError(f"tools[{index}]: a tool is a JSON object, got {tool!r}")
    function = tool.get("function", tool) if tool.get("type", "function") == "function" else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise GrammarError(f'tools[{index}]: a function tool needs a "name", got {tool!r}')
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if function.get("strict") is False:
        parameters = {"type": "object"}
    if isinstance(parameters, str):
        parameters = json.loads(parameters)
    if not isinstance(parameters, (dict, bool)):
        raise GrammarError(f"tools[{index}] ({function['name']}): parameters must be a JSON Schema, got {parameters!r}")
    return _Tool(function["name"], parameters)


def _choice(tool_choice: Any, tools: list[_Tool]) -> tuple[str, list[_Tool]]:
    if tool_choice in ("auto", "required", "none"):
        if tool_choice != "none" and not tools:
            raise GrammarError(f"tool_choice {tool_choice!r} needs at least one tool")
        return tool_choice, tools
    name = None
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name", tool_choice.get("name"))
    chosen = [t for t in tools if t.name == name]
    if not chosen:
        raise GrammarError(
            f'tool_choice {tool_choice!r} is not "auto", "required", "none" or a function '
            f"among the tools ({', '.join(t.name for t in tools)})"
        )
    return "named", chosen[:1]


def _calls(spec: Family, w: _Writer, tools: list[_Tool], choice: str, parallel: bool) -> dict:
    """Free text and calls (auto), calls only (required, named) or text only (none)."""
    triggers = list(spec.triggers)
    if choice == "none":
        return {"type": "any_text", "excludes": [t for t in triggers if w.is_text(t)]}
    assert spec.call is not None  # only harmony has none, and its calls are not written here
    calls = [tag for tool in tools for tag in spec.call(w, tool)]
    one = choice == "named" or not parallel
    if spec.section is not None:
        begin, end = spec.section
        inner = w.joined(calls, spec.separator, at_least_one=True, stop_after_first=one)
        if spec.section_gap is not None:
            inner = _seq({"type": "regex", "pattern": spec.section_gap}, inner)
        section = w.tag(begin, inner, end)
        if choice != "auto":
            return section
        return w.triggered(triggers, [section], at_least_one=False, stop_after_first=True)
    if choice != "auto":
        return w.joined(calls, spec.separator, at_least_one=True, stop_after_first=one)
    if spec.calls_end_output:
        text = {"type": "any_text", "excludes": [t for t in triggers if w.is_text(t)]}
        joined = w.joined(calls, spec.separator, at_least_one=True, stop_after_first=one)
        return _seq(text, {"type": "optional", "content": joined})
    return w.triggered(triggers, calls, at_least_one=False, stop_after_first=one)


def _harmony(w: _Writer, tools: list[_Tool], choice: str) -> dict:
    """gpt-oss: after the generation prompt ``<|start|>assistant``, a final message or one call
    (a call ends the turn).  A call ends with ``<|call|>`` where special_tokens names it (the
    model's token); else that token, like ``<|return|>`` after a final message, is left to the
    matcher's stop tokens."""
    final = _seq(w.const("<|channel|>final<|message|>"), TEXT)
    space = {"type": "regex", "pattern": " ?"}
    end = [w.const("<|call|>")] if not w.is_text("<|call|>") else []
    # The recipient after the channel (the Harmony guide's examples), or in the header before it.
    calls = [
        _or(
            [
                _seq(w.const(head), space, w.const("<|constrain|>json<|message|>"), _json(t), *end)
                for head in (
                    f"<|channel|>commentary to=functions.{t.name}",
                    f" to=functions.{t.name}<|channel|>commentary",
                )
            ]
        )
        for t in tools
    ]
    if choice == "none":
        return final
    if choice == "auto":
        return _or([final] + calls)
    return _or(calls)
