"""XGrammar's `xgrammar.builtin_structural_tag`: the structural tag of a model's reasoning and
tool-call output, from OpenAI-style `tools` and `tool_choice`.

    tag = get_model_structural_tag("qwen_3", tools=[...], tool_choice="auto", reasoning="enabled")
    compiled = compiler.compile_structural_tag(tag)

Most models differ only in strings, so one table (`MODELS`) describes them: how one call is written
(`_Call`), whether the calls of a turn sit in a section (`_Section`), the model's thinking block
(`_Thinking`) and the special tokens free text may not contain.  Kimi-K3 and Harmony lay out a
whole turn their own way and have their own builders.  The tags' text, the reasoning modes and the
errors are XGrammar 0.2.8's; pushmask's family formats for its own `tool_call_structural_tag` are in
grammar/tool_formats.py (docs/tool-calling.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import TypeAdapter

from .openai_tool_call_schema import (
    AllowedToolChoiceParam,
    BuiltinToolChoiceParam,
    BuiltinToolParam,
    FunctionDefinition,
    FunctionToolParam,
    NamedToolChoiceParam,
    ToolChoiceOptionParam,
    ToolParam,
)
from .structural_tag import (
    AnyTextFormat,
    ConstStringFormat,
    Format,
    JSONSchemaFormat,
    OptionalFormat,
    OrFormat,
    RegexFormat,
    SequenceFormat,
    StructuralTag,
    TagFormat,
    TagsWithSeparatorFormat,
    TriggeredTagsFormat,
)

__all__ = [
    "get_builtin_structural_tag",
    "get_model_structural_tag",
    "normalize_tool_choice",
    "register_model_structural_tag",
]

SimplifiedToolChoice = Literal["auto", "required", "forced"]
ReasoningMode = Literal["enabled", "disabled", "auto"]
_REASONING_MODES = ("enabled", "disabled", "auto")
_FORCED_NEEDS_ONE = "Forced tool choice must resolve to exactly one tool."

_TOOL = TypeAdapter(ToolParam)
_TOOL_CHOICE = TypeAdapter(ToolChoiceOptionParam)
_registry: dict[str, Callable[..., StructuralTag]] = {}


def get_model_structural_tag(
    model: str,
    tools: list[ToolParam | dict] | None = None,
    tool_choice: ToolChoiceOptionParam | dict | None = "auto",
    reasoning: bool | ReasoningMode = "enabled",
    force_reasoning: bool = False,
    any_order: bool = False,
    exclude_special_tokens: bool = True,
    max_whitespace_cnt: int | None = None,
    parallel_tool_calls: bool = True,
) -> StructuralTag:
    """The structural tag of `model`'s output (a key of the registry: `MODELS` and the models with
    their own builders) with these tools.

    `tool_choice`: "auto" (text or calls; None too), "none" (text only), "required" (at least one
    call), a named function or builtin type (exactly that call), or allowed tools (a subset, then
    its mode).  `reasoning`: "enabled" (the prompt opened the thinking block: the output continues
    it), "auto" (a whole block or none), "disabled" (no block); True / False mean enabled /
    disabled.  `force_reasoning` is accepted and ignored, as in XGrammar.  `any_order` and
    `max_whitespace_cnt` go to every argument schema; `exclude_special_tokens=False` lets free text
    hold the model's special tokens; `parallel_tool_calls=False` allows one call at most.
    Raises ValueError (pydantic's ValidationError for a malformed tool or choice)."""
    builder = _registry.get(model)
    if builder is None:
        raise ValueError(f"Unknown format type: {model}, supported types: {list(_registry)}")
    function_tools, builtin_tools, choice = normalize_tool_choice(tools, tool_choice)
    if isinstance(reasoning, bool):
        reasoning = "enabled" if reasoning else "disabled"
    elif reasoning not in _REASONING_MODES:
        raise ValueError("The 'reasoning' argument must be a bool or one of: 'enabled', 'disabled', 'auto'.")
    if not isinstance(parallel_tool_calls, bool):
        raise ValueError("The 'parallel_tool_calls' argument must be a bool.")
    return builder(
        function_tools,
        builtin_tools,
        choice,
        reasoning,
        any_order=any_order,
        exclude_special_tokens=exclude_special_tokens,
        max_whitespace_cnt=max_whitespace_cnt,
        parallel_tool_calls=parallel_tool_calls,
    )


get_builtin_structural_tag = get_model_structural_tag  # XGrammar's older name


def normalize_tool_choice(
    tools: list[ToolParam | dict] | None = None,
    tool_choice: ToolChoiceOptionParam | dict | None = "auto",
) -> tuple[list[FunctionToolParam], list[BuiltinToolParam], SimplifiedToolChoice]:
    """(function tools, builtin tools, "auto" / "required" / "forced"): the tools `tool_choice`
    leaves, and what it asks of them; the model-independent half of `get_model_structural_tag`.
    "none" leaves no tools under "auto" (text only)."""
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise ValueError("The 'tools' argument must be a list.")
    parsed = [t if isinstance(t, (FunctionToolParam, BuiltinToolParam)) else _TOOL.validate_python(t) for t in tools]
    functions = [t for t in parsed if isinstance(t, FunctionToolParam)]
    builtins = [t for t in parsed if isinstance(t, BuiltinToolParam)]
    choice = _TOOL_CHOICE.validate_python("auto" if tool_choice is None else tool_choice)
    simplified: SimplifiedToolChoice
    if isinstance(choice, AllowedToolChoiceParam):
        functions, builtins = _allowed(functions, builtins, choice)
        simplified = choice.allowed_tools.mode
    elif isinstance(choice, NamedToolChoiceParam):
        name = choice.function.name
        functions = [t for t in functions if t.function.name == name]
        if not functions:
            raise ValueError(f"The tool with name '{name}' is not found in the tools list.")
        builtins, simplified = [], "forced"
    elif isinstance(choice, BuiltinToolChoiceParam):
        builtins = [t for t in builtins if t.type == choice.type]
        if len(builtins) != 1:
            raise ValueError(f"Builtin tool choice must match exactly one builtin tool, got {len(builtins)} matches.")
        functions, simplified = [], "forced"
    elif choice == "none":
        functions, builtins, simplified = [], [], "auto"
    else:
        simplified = choice
    if simplified == "required" and not functions and not builtins:
        raise ValueError("The 'tools' list is empty, which is not allowed when 'tool_choice' is 'required'.")
    if simplified == "forced" and len(functions) + len(builtins) != 1:
        raise ValueError(_FORCED_NEEDS_ONE)
    return functions, builtins, simplified


def _allowed(
    functions: list[FunctionToolParam], builtins: list[BuiltinToolParam], choice: AllowedToolChoiceParam
) -> tuple[list[FunctionToolParam], list[BuiltinToolParam]]:
    """The tools an allowed-tools choice names (functions by name, builtin tools by type); each
    reference must name a tool of the list."""
    names, types = set(), set()
    for ref in choice.allowed_tools.tools:
        if ref.type != "function":
            types.add(ref.type)
        elif ref.function is None:
            raise ValueError("Allowed function tool references must include 'function'.")
        else:
            names.add(ref.function.name)
    missing = names - {t.function.name for t in functions}
    if missing:
        raise ValueError(f"Allowed function tools are not found in the tools list: {missing}.")
    kept_builtins = [t for t in builtins if t.type in types]
    missing = types - {t.type for t in kept_builtins}
    if missing:
        raise ValueError(f"Allowed builtin tools are not found in the tools list: {missing}.")
    return [t for t in functions if t.function.name in names], kept_builtins


def register_model_structural_tag(name: str) -> Callable:
    """Decorator: `get_model_structural_tag(name, ...)` calls the decorated builder with
    (function tools, builtin tools, simplified tool choice, reasoning mode, **options)."""

    def register(builder: Callable[..., StructuralTag]) -> Callable[..., StructuralTag]:
        _registry[name] = builder
        return builder

    return register


# -- pieces every builder shares ---------------------------------------------------------------


def _parameters(tool: FunctionDefinition | BuiltinToolParam) -> dict[str, Any] | bool:
    """The arguments' schema: True (any JSON value) when absent or when the function is not strict."""
    if isinstance(tool, FunctionDefinition) and tool.strict is False:
        return True
    return True if tool.parameters is None else tool.parameters


@dataclass(frozen=True)
class _Options:
    """The options every tool call and free-text span of one structural tag takes."""

    any_order: bool
    exclude_special_tokens: bool
    max_whitespace_cnt: int | None
    parallel_tool_calls: bool

    def excludes(self, tokens: tuple[str, ...]) -> list[str]:
        """The special tokens free text may not hold (none when `exclude_special_tokens` is off)."""
        return list(tokens) if self.exclude_special_tokens else []

    def arguments(self, parameters: dict | bool, style: str = "json", excludes: tuple[str, ...] = ()) -> Format:
        """A tool's arguments: a JSON value of `parameters`, or its properties in an XML `style`."""
        return JSONSchemaFormat.model_validate(
            {
                "json_schema": parameters,
                "style": style,
                "any_order": self.any_order,
                "max_whitespace_cnt": self.max_whitespace_cnt,
                "excludes": self.excludes(excludes),
            }
        )


@dataclass(frozen=True)
class _Thinking:
    """The leading thinking block `begin` text `end`.  With reasoning "enabled" the prompt has
    already written `begin` (unless `prompt_opens` is False); "auto" makes the whole block
    optional.  `excludes` are kept out of its text (in "enabled" mode only if `excludes_when_open`);
    `suffix` follows the block; `disabled_prefix` is written where reasoning is disabled;
    `auto_may_close_only`: under "auto" the output may also start with `end` alone."""

    begin: str = "<think>"
    end: str = "</think>"
    excludes: tuple[str, ...] = ("<think>", "</think>")
    excludes_when_open: bool = True
    prompt_opens: bool = True
    suffix: str = ""
    disabled_prefix: str | None = None
    auto_may_close_only: bool = False

    def prefix(self, mode: ReasoningMode, options: _Options) -> Format | None:
        if mode not in _REASONING_MODES:
            raise ValueError("The 'reasoning_mode' argument must be one of: 'enabled', 'disabled', 'auto'.")
        if mode == "disabled":
            return None if self.disabled_prefix is None else ConstStringFormat(value=self.disabled_prefix)
        excluded = self.excludes if mode == "auto" or self.excludes_when_open else ()
        block: Format = TagFormat(
            begin="" if mode == "enabled" and self.prompt_opens else self.begin,
            content=AnyTextFormat(excludes=options.excludes(excluded)),
            end=self.end,
        )
        if self.suffix:
            block = SequenceFormat(elements=[block, ConstStringFormat(value=self.suffix)])
        if mode != "auto":
            return block
        if self.auto_may_close_only:
            block = OrFormat(elements=[block, ConstStringFormat(value=self.end)])
        return OptionalFormat(content=block)


@dataclass(frozen=True)
class _Call:
    """One call: `begin` (with `{name}`), the arguments, `end`.  With `index_then` set, a call
    number (digits) comes first, then that text (with `{name}`), then the arguments."""

    begin: str
    end: str
    style: str = "json"
    index_then: str | None = None
    argument_excludes: tuple[str, ...] = ()

    def tag(self, name: str, parameters: dict | bool, options: _Options) -> TagFormat:
        arguments = options.arguments(parameters, self.style, self.argument_excludes)
        if self.index_then is not None:
            index = RegexFormat(pattern=r"\d+")
            arguments = SequenceFormat(
                elements=[index, ConstStringFormat(value=self.index_then.format(name=name)), arguments]
            )
        return TagFormat(begin=self.begin.format(name=name), content=arguments, end=self.end)


@dataclass(frozen=True)
class _Section:
    """The calls of a turn written inside `begin` ... `end`, joined by `separator`.  Free text
    triggers the section with `trigger`; where calls are needed the output starts with `lead` and
    `begin` (unless `free_text_when_required`: then text may come first, as under "auto")."""

    begin: str
    end: str
    trigger: str
    separator: str = ""
    lead: str = ""
    free_text_when_required: bool = False


@dataclass(frozen=True)
class ModelFormat:
    """How one model writes its output: its calls (`call`, started by `trigger` in free text, or
    inside a `section`), its thinking block (None: none), the tokens kept out of free text after
    the thinking (`text_excludes`; `no_tool_excludes` when there are no tools), and whether it
    refuses builtin tools."""

    call: _Call
    trigger: str = ""
    section: _Section | None = None
    thinking: _Thinking | None = field(default_factory=_Thinking)
    text_excludes: tuple[str, ...] = ("<think>", "</think>")
    no_tool_excludes: tuple[str, ...] | None = None
    no_tool_forbidden: tuple[str, ...] = ()  # kept out of tool-less text even with exclude_special_tokens off
    refuses_builtin_tools: str | None = None  # the model's name in the error
    default_reasoning: ReasoningMode = "enabled"  # of the model's own get_*_structural_tag

    def build(
        self,
        tools: list[FunctionToolParam],
        builtin_tools: list[BuiltinToolParam],
        tool_choice: SimplifiedToolChoice,
        reasoning: ReasoningMode,
        options: _Options,
    ) -> StructuralTag:
        if builtin_tools and self.refuses_builtin_tools:
            raise ValueError(f"{self.refuses_builtin_tools} does not support builtin tools.")
        calls = [self.call.tag(t.function.name, _parameters(t.function), options) for t in tools]
        body = self._calls(calls, tool_choice, options)
        prefix = None if self.thinking is None else self.thinking.prefix(reasoning, options)
        return StructuralTag(format=body if prefix is None else SequenceFormat(elements=[prefix, body]))

    def _calls(self, calls: list[TagFormat], choice: SimplifiedToolChoice, options: _Options) -> Format:
        """Free text and calls ("auto"), calls (with text around them where the model allows it:
        "required"), or the one call ("forced")."""
        if not calls:
            if choice == "auto":
                excludes = self.text_excludes if self.no_tool_excludes is None else self.no_tool_excludes
                return AnyTextFormat(excludes=[*options.excludes(excludes), *self.no_tool_forbidden])
            raise ValueError(
                _FORCED_NEEDS_ONE if choice == "forced" else "Required tool choice needs at least one function tool."
            )
        one = not options.parallel_tool_calls
        section = self.section
        if choice == "forced":
            if section is None:
                return calls[0]
            return _between(section.lead + section.begin, calls[0], section.end)
        if section is None:
            units, trigger = calls, self.trigger
        else:
            joined = TagsWithSeparatorFormat(
                tags=calls, separator=section.separator, at_least_one=True, stop_after_first=one
            )
            if choice == "required" and not section.free_text_when_required:
                return _between(section.lead + section.begin, joined, section.end)
            units, trigger = [TagFormat(begin=section.begin, content=joined, end=section.end)], section.trigger
        return TriggeredTagsFormat(
            triggers=[trigger],
            tags=units,
            excludes=options.excludes(self.text_excludes),
            at_least_one=choice == "required",
            stop_after_first=one,
        )


def _between(begin: str, content: Format, end: str) -> Format:
    return SequenceFormat(elements=[ConstStringFormat(value=begin), content, ConstStringFormat(value=end)])


# -- the table -----------------------------------------------------------------------------------

_DEEPSEEK_CALLS = _Section("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", trigger="<｜tool▁calls▁begin｜>")
_GLM_ARGUMENT_TOKENS = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
_MINIMAX_M3 = "]<]minimax[>["  # the namespace of MiniMax-M3's tool-call markers
_MINIMAX_M3_STRAY = (f"{_MINIMAX_M3}</tool_call>", f"{_MINIMAX_M3}<invoke", f"{_MINIMAX_M3}</invoke>")
_MIMO_TEXT_EXCLUDES = ("<think>", "</think>", "</tool_call>", "<function=")


def _dsml(invoke: str, calls: str, style: str) -> dict:
    """DeepSeek's DSML markup (V3.2, V4, V4.1 differ in two words and the XML style)."""
    return {
        "call": _Call(f'<｜DSML｜{invoke} name="{{name}}">\n', f"</｜DSML｜{invoke}>\n", style=style),
        "section": _Section(f"<｜DSML｜{calls}>\n", f"</｜DSML｜{calls}>", trigger=f"<｜DSML｜{calls}>", lead="\n\n"),
    }


MODELS: dict[str, ModelFormat] = {
    "llama": ModelFormat(_Call('{{"name": "{name}", "parameters": ', "}"), trigger='{"name": ', thinking=None),
    "qwen_3": ModelFormat(
        _Call('<tool_call>\n{{"name": "{name}", "arguments": ', "}\n</tool_call>"),
        trigger="<tool_call>",
        thinking=_Thinking(suffix="\n\n"),
    ),
    "qwen_3_5": ModelFormat(
        _Call("<tool_call>\n<function={name}>\n", "\n</function>\n</tool_call>", style="qwen_xml"),
        trigger="<tool_call>\n<function=",
        thinking=_Thinking(suffix="\n\n"),
    ),
    "mimo": ModelFormat(
        _Call("<tool_call><function={name}>", "</function></tool_call>", style="qwen_xml"),
        trigger="<tool_call>",
        thinking=_Thinking(excludes=("<tool_call>", *_MIMO_TEXT_EXCLUDES), prompt_opens=False),
        text_excludes=_MIMO_TEXT_EXCLUDES,
        no_tool_excludes=("<tool_call>", *_MIMO_TEXT_EXCLUDES),
        refuses_builtin_tools="MiMo",
    ),
    "exaone": ModelFormat(
        _Call('<tool_call>{{"name": "{name}", "arguments": ', "}</tool_call>"),
        trigger="<tool_call>",
        thinking=_Thinking(excludes_when_open=False, suffix="\n\n"),
    ),
    "glm_4_7": ModelFormat(
        _Call("<tool_call>{name}", "</tool_call>", style="glm_xml"),
        trigger="<tool_call>",
        thinking=_Thinking(excludes=("<think>", "</think>", "<tool_call>", "</tool_call>", *_GLM_ARGUMENT_TOKENS)),
        text_excludes=("<think>", "</think>", "</tool_call>", *_GLM_ARGUMENT_TOKENS),
        no_tool_excludes=("<think>", "</think>", "<tool_call>", "</tool_call>", *_GLM_ARGUMENT_TOKENS),
    ),
    "kimi": ModelFormat(
        _Call("<|tool_call_begin|>functions.{name}:", "<|tool_call_end|>", index_then="<|tool_call_argument_begin|>"),
        section=_Section(
            "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", trigger="<|tool_calls_section_begin|>"
        ),
        thinking=_Thinking(excludes_when_open=False),
        text_excludes=("<think>", "</think>", "<|tool_call_begin|>"),
        no_tool_excludes=("<think>", "</think>"),
    ),
    "deepseek_r1": ModelFormat(
        _Call(
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n",
            "\n```<｜tool▁call▁end｜>",
        ),
        section=replace(_DEEPSEEK_CALLS, separator="\n"),
    ),
    "deepseek_v3_1": ModelFormat(
        _Call("<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>", "<｜tool▁call▁end｜>"), section=_DEEPSEEK_CALLS
    ),
    "deepseek_v3_2": ModelFormat(**_dsml("invoke", "function_calls", "deepseek_xml")),
    "deepseek_v4": ModelFormat(**_dsml("invoke", "tool_calls", "deepseek_xml")),
    "deepseek_v4_1": ModelFormat(
        **_dsml(" invoke", " calls", "deepseek_v4_1_xml"), no_tool_forbidden=("<｜DSML｜ calls>",)
    ),
    "minimax": ModelFormat(
        _Call('<invoke name="{name}">\n', "</invoke>\n", style="minimax_xml"),
        section=_Section("<minimax:tool_call>\n", "</minimax:tool_call>", trigger="<minimax:tool_call>", lead="\n"),
        thinking=_Thinking(excludes_when_open=False, suffix="\n\n", disabled_prefix="\n</think>\n\n\n\n"),
    ),
    "minimax_m3": ModelFormat(
        _Call(f'{_MINIMAX_M3}<invoke name="{{name}}">', f"{_MINIMAX_M3}</invoke>\n", style="minimax_m3_xml"),
        section=_Section(
            f"{_MINIMAX_M3}<tool_call>\n",
            f"{_MINIMAX_M3}</tool_call>",
            trigger=f"{_MINIMAX_M3}<tool_call>",
            free_text_when_required=True,
        ),
        thinking=_Thinking(
            "<mm:think>",
            "</mm:think>",
            excludes=(f"{_MINIMAX_M3}<tool_call>", "<mm:think>", "</mm:think>", *_MINIMAX_M3_STRAY),
            auto_may_close_only=True,
        ),
        text_excludes=("<mm:think>", "</mm:think>", *_MINIMAX_M3_STRAY),
        no_tool_excludes=(f"{_MINIMAX_M3}<tool_call>", "<mm:think>", "</mm:think>", *_MINIMAX_M3_STRAY),
        refuses_builtin_tools="MiniMax M3",
        default_reasoning="auto",
    ),
    "cohere": ModelFormat(
        _Call('<cofl:tool_call id="', "</cofl:tool_call>", style="cohere_xml", index_then='" name="{name}">'),
        section=_Section("<cofl:tool_calls>", "</cofl:tool_calls>", trigger="<cofl:tool_calls>"),
        thinking=_Thinking(
            "<|START_THINKING|>",
            "<|END_THINKING|>",
            excludes=("<|START_THINKING|>", "<|END_THINKING|>"),
            excludes_when_open=False,
        ),
        text_excludes=("<|START_THINKING|>", "<|END_THINKING|>"),
    ),
}


def _table_builder(name: str, model: ModelFormat) -> Callable[..., StructuralTag]:
    """XGrammar's `get_NAME_structural_tag(tools, builtin_tools, tool_choice, reasoning, **options)`
    for one row of the table."""

    def build(
        tools: list[FunctionToolParam] | None = None,
        builtin_tools: list[BuiltinToolParam] | None = None,
        tool_choice: SimplifiedToolChoice = "auto",
        reasoning: ReasoningMode | None = None,
        any_order: bool = False,
        exclude_special_tokens: bool = True,
        max_whitespace_cnt: int | None = None,
        parallel_tool_calls: bool = True,
        **_: Any,
    ) -> StructuralTag:
        options = _Options(any_order, exclude_special_tokens, max_whitespace_cnt, parallel_tool_calls)
        mode = model.default_reasoning if reasoning is None else reasoning
        return model.build(tools or [], builtin_tools or [], tool_choice, mode, options)

    build.__name__ = build.__qualname__ = f"get_{name}_structural_tag"
    return build


for _name, _model in MODELS.items():
    register_model_structural_tag(_name)(_table_builder(_name, _model))
register_model_structural_tag("qwen_3_coder")(_registry["qwen_3_5"])  # one format, as in XGrammar

get_llama_structural_tag = _registry["llama"]
get_qwen_3_structural_tag = _registry["qwen_3"]
get_qwen_3_5_structural_tag = _registry["qwen_3_5"]
get_qwen_3_coder_structural_tag = _registry["qwen_3_coder"]
get_mimo_structural_tag = _registry["mimo"]
get_exaone_structural_tag = _registry["exaone"]
get_glm_4_7_structural_tag = _registry["glm_4_7"]
get_kimi_structural_tag = _registry["kimi"]
get_deepseek_r1_structural_tag = _registry["deepseek_r1"]
get_deepseek_v3_1_structural_tag = _registry["deepseek_v3_1"]
get_deepseek_v3_2_structural_tag = _registry["deepseek_v3_2"]
get_deepseek_v4_structural_tag = _registry["deepseek_v4"]
get_deepseek_v4_1_structural_tag = _registry["deepseek_v4_1"]
get_minimax_structural_tag = _registry["minimax"]
get_minimax_m3_structural_tag = _registry["minimax_m3"]
get_cohere_structural_tag = _registry["cohere"]


# -- models with their own layout ----------------------------------------------------------------

_K3_OPEN, _K3_CLOSE, _K3_SEP = "<|open|>", "<|close|>", "<|sep|>"


def _k3(marker: str, closing: bool = False) -> str:
    """A Kimi-K3 block marker: `<|open|>NAME<|sep|>` or `<|close|>NAME<|sep|>`."""
    return f"{_K3_CLOSE if closing else _K3_OPEN}{marker}{_K3_SEP}"


_K3_CALL = _Call(
    f'{_K3_OPEN}call tool="{{name}}" index="',
    _k3("call", closing=True),
    style="kimi_k3_xml",
    index_then=f'"{_K3_SEP}',
    argument_excludes=(_K3_OPEN, _K3_CLOSE, _K3_SEP),
)


@register_model_structural_tag("kimi_k3")
def get_kimi_k3_structural_tag(
    tools: list[FunctionToolParam] | None = None,
    builtin_tools: list[BuiltinToolParam] | None = None,
    tool_choice: SimplifiedToolChoice = "auto",
    reasoning: ReasoningMode = "enabled",
    any_order: bool = False,
    exclude_special_tokens: bool = True,
    max_whitespace_cnt: int | None = None,
    parallel_tool_calls: bool = True,
    **_: Any,
) -> StructuralTag:
    """Kimi-K3: the thinking block, a response block, then (optionally) a tools block, then the end
    of the message; every block opens with `<|open|>NAME<|sep|>` and closes with `<|close|>NAME<|sep|>`."""
    options = _Options(any_order, exclude_special_tokens, max_whitespace_cnt, parallel_tool_calls)
    specials = (_K3_OPEN, _K3_CLOSE)
    calls = [_K3_CALL.tag(t.function.name, _parameters(t.function), options) for t in tools or []]
    if tool_choice != "auto" and not calls:
        raise ValueError(_FORCED_NEEDS_ONE)
    begin, end = _k3("tools"), _k3("tools", closing=True)
    content: Format = (
        calls[0]
        if tool_choice == "forced"
        else TagsWithSeparatorFormat(
            tags=calls, separator="", at_least_one=True, stop_after_first=not parallel_tool_calls
        )
    )
    elements: list[Format] = []
    thinking = _Thinking(_k3("think"), _k3("think", closing=True), excludes=specials).prefix(reasoning, options)
    if thinking is not None:
        elements.append(thinking)
    response_begin = "" if reasoning == "disabled" else _k3("response")
    elements.append(
        TagFormat(
            begin=response_begin,
            content=AnyTextFormat(excludes=options.excludes(specials)),
            end=_k3("response", closing=True),
        )
    )
    if tool_choice == "auto" and calls:
        elements.append(OptionalFormat(content=TagFormat(begin=begin, content=content, end=end)))
    elif tool_choice != "auto":
        elements.append(_between(begin, content, end))
    elements.append(ConstStringFormat(value=_k3("message", closing=True)))
    return StructuralTag(format=SequenceFormat(elements=elements))


_HARMONY_CALL_END = "<|call|>"
_HARMONY_MESSAGE_END = ["<|end|>", "<|return|>"]
_HARMONY_NEXT = "<|start|>assistant"  # between the messages of one turn


@register_model_structural_tag("harmony")
def get_harmony_structural_tag(
    tools: list[FunctionToolParam] | None = None,
    builtin_tools: list[BuiltinToolParam] | None = None,
    tool_choice: SimplifiedToolChoice = "auto",
    reasoning: ReasoningMode = "enabled",
    any_order: bool = False,
    exclude_special_tokens: bool = True,
    max_whitespace_cnt: int | None = None,
    parallel_tool_calls: bool = True,
    **_: Any,
) -> StructuralTag:
    """gpt-oss (OpenAI Harmony): messages joined by `<|start|>assistant`: analysis (the reasoning),
    final (the answer, under "auto") and calls, each ending in `<|call|>`.  A function call names
    `functions.NAME`, a builtin tool its own name, in any of the recipient spellings Harmony uses."""
    options = _Options(any_order, exclude_special_tokens, max_whitespace_cnt, parallel_tool_calls)
    function_calls = [
        TagFormat(begin=begin, content=options.arguments(_parameters(t.function)), end=_HARMONY_CALL_END)
        for t in tools or []
        for begin in (
            f"<|channel|>commentary to=functions.{t.function.name}<|constrain|>json<|message|>",
            f" to=functions.{t.function.name}<|channel|>commentary <|constrain|>json<|message|>",
            f" to=functions.{t.function.name}<|channel|>commentary json<|message|>",
        )
    ]
    builtin_calls = [
        TagFormat(begin=begin, content=options.arguments(_parameters(t)), end=_HARMONY_CALL_END)
        for t in builtin_tools or []
        for begin in (
            f"<|channel|>commentary to={t.name or t.type} code<|message|>",
            f" to={t.name or t.type}<|channel|>commentary code<|message|>",
        )
    ]
    calls = builtin_calls + function_calls  # under "forced", the one tool's spellings
    if tool_choice != "auto" and not calls:
        raise ValueError(_FORCED_NEEDS_ONE)
    messages = []
    if tool_choice == "auto":
        messages.append(
            TagFormat(begin="<|channel|>final<|message|>", content=AnyTextFormat(), end=_HARMONY_MESSAGE_END)
        )
    if reasoning != "disabled":
        messages.append(
            TagFormat(begin="<|channel|>analysis<|message|>", content=AnyTextFormat(), end=_HARMONY_MESSAGE_END)
        )
    if parallel_tool_calls or not calls:
        return StructuralTag(format=TagsWithSeparatorFormat(tags=calls + messages, separator=_HARMONY_NEXT))
    one_call = TagsWithSeparatorFormat(tags=calls, separator=_HARMONY_NEXT, at_least_one=True, stop_after_first=True)
    if not messages:
        return StructuralTag(format=OptionalFormat(content=one_call))
    some_messages = TagsWithSeparatorFormat(tags=messages, separator=_HARMONY_NEXT, at_least_one=True)
    then_call = SequenceFormat(elements=[some_messages, ConstStringFormat(value=_HARMONY_NEXT), one_call])
    return StructuralTag(
        format=OrFormat(elements=[TagsWithSeparatorFormat(tags=messages, separator=_HARMONY_NEXT), one_call, then_call])
    )
