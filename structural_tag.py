"""XGrammar's `xgrammar.structural_tag` module: the structural-tag formats as pydantic models.

They validate and carry a structural tag; pushmask compiles one from its plain data
(`model_dump`), so `compile_structural_tag(StructuralTag(format=...))`, the same tag as a dict or
as JSON text all compile to one grammar.  The fields, defaults and `type` names are XGrammar
0.2.8's; what each format means is in docs/tool-calling.md (grammar/structural_tag.py).
Needs pydantic (`pip install pydantic`), as XGrammar does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "AnyTextFormat",
    "AnyTokensFormat",
    "ConstStringFormat",
    "DispatchFormat",
    "ExcludeTokenFormat",
    "Format",
    "GrammarFormat",
    "JSONSchemaFormat",
    "OptionalFormat",
    "OrFormat",
    "PlusFormat",
    "QwenXMLParameterFormat",
    "RegexFormat",
    "RepeatFormat",
    "SequenceFormat",
    "StarFormat",
    "StructuralTag",
    "StructuralTagItem",
    "TagFormat",
    "TagsWithSeparatorFormat",
    "TokenDispatchFormat",
    "TokenFormat",
    "TokenTriggeredTagsFormat",
    "TriggeredTagsFormat",
]

_COUNT = Field(default=None, ge=0, le=2_147_483_647)  # an optional int32 budget
TokenRef = int | str  # a token by id or by its text


class ConstStringFormat(BaseModel):
    """The string `value`."""

    type: Literal["const_string"] = "const_string"
    value: str


class JSONSchemaFormat(BaseModel):
    """A JSON value of `json_schema`, or (an XML `style`) its properties as XML elements."""

    type: Literal["json_schema"] = "json_schema"
    json_schema: bool | dict[str, Any]
    style: Literal[
        "json",
        "qwen_xml",
        "minimax_xml",
        "minimax_m3_xml",
        "deepseek_xml",
        "glm_xml",
        "cohere_xml",
        "kimi_k3_xml",
        "deepseek_v4_1_xml",
    ] = "json"
    any_order: bool = False
    max_whitespace_cnt: int | None = None
    excludes: list[str] = []


class AnyTextFormat(BaseModel):
    """Any text without the `excludes` (at most `max_tokens` tokens / `max_chars` characters)."""

    type: Literal["any_text"] = "any_text"
    excludes: list[str] = []
    max_tokens: int | None = _COUNT
    max_chars: int | None = _COUNT


class TokenFormat(BaseModel):
    """One token, by id or by its text."""

    type: Literal["token"] = "token"
    token: TokenRef


class ExcludeTokenFormat(BaseModel):
    """One token of the vocabulary but the `exclude_tokens`."""

    type: Literal["exclude_token"] = "exclude_token"
    exclude_tokens: list[TokenRef] = []


class AnyTokensFormat(BaseModel):
    """Any tokens but the `exclude_tokens` (at most `max_tokens`)."""

    type: Literal["any_tokens"] = "any_tokens"
    exclude_tokens: list[TokenRef] = []
    max_tokens: int | None = _COUNT


class GrammarFormat(BaseModel):
    """The EBNF `grammar` (rule `root`)."""

    type: Literal["grammar"] = "grammar"
    grammar: str


class RegexFormat(BaseModel):
    """The regex `pattern`."""

    type: Literal["regex"] = "regex"
    pattern: str


class SequenceFormat(BaseModel):
    """The `elements` one after another."""

    type: Literal["sequence"] = "sequence"
    elements: list[Format]


class OrFormat(BaseModel):
    """One of the `elements`."""

    type: Literal["or"] = "or"
    elements: list[Format]


class TagFormat(BaseModel):
    """`begin`, `content`, `end` (`end` may list strings)."""

    type: Literal["tag"] = "tag"
    begin: str | TokenFormat
    content: Format
    end: str | list[str] | TokenFormat


class TriggeredTagsFormat(BaseModel):
    """Text without the `triggers`, then tags each starting with a trigger, each followed by such text."""

    type: Literal["triggered_tags"] = "triggered_tags"
    triggers: list[str]
    tags: list[TagFormat]
    at_least_one: bool = False
    stop_after_first: bool = False
    excludes: list[str] = []


class TokenTriggeredTagsFormat(BaseModel):
    """TriggeredTagsFormat with tokens as the triggers."""

    type: Literal["token_triggered_tags"] = "token_triggered_tags"
    trigger_tokens: list[TokenRef]
    tags: list[TagFormat]
    exclude_tokens: list[TokenRef] = []
    at_least_one: bool = False
    stop_after_first: bool = False


class TagsWithSeparatorFormat(BaseModel):
    """The tags joined by `separator`, nothing else."""

    type: Literal["tags_with_separator"] = "tags_with_separator"
    tags: list[TagFormat]
    separator: str
    at_least_one: bool = False
    stop_after_first: bool = False


class OptionalFormat(BaseModel):
    """`content` or nothing."""

    type: Literal["optional"] = "optional"
    content: Format


class PlusFormat(BaseModel):
    """`content` once or more."""

    type: Literal["plus"] = "plus"
    content: Format


class StarFormat(BaseModel):
    """`content` any number of times."""

    type: Literal["star"] = "star"
    content: Format


class RepeatFormat(BaseModel):
    """`content` `min` to `max` times."""

    type: Literal["repeat"] = "repeat"
    min: int
    max: int
    content: Format


class DispatchFormat(BaseModel):
    """Text without the patterns, then a pattern and its format, then such text again (`loop`)."""

    type: Literal["dispatch"] = "dispatch"
    rules: list[tuple[str, Format]]
    loop: bool = True
    excludes: list[str] = []


class TokenDispatchFormat(BaseModel):
    """DispatchFormat with tokens as the patterns."""

    type: Literal["token_dispatch"] = "token_dispatch"
    rules: list[tuple[TokenRef, Format]]
    loop: bool = True
    exclude_tokens: list[TokenRef] = []


class QwenXMLParameterFormat(BaseModel):
    """The legacy spelling of JSONSchemaFormat(style="qwen_xml")."""

    type: Literal["qwen_xml_parameter"] = "qwen_xml_parameter"
    json_schema: bool | dict[str, Any]


Format = Annotated[
    AnyTextFormat
    | ConstStringFormat
    | JSONSchemaFormat
    | GrammarFormat
    | RegexFormat
    | QwenXMLParameterFormat
    | OrFormat
    | SequenceFormat
    | TagFormat
    | TriggeredTagsFormat
    | TokenTriggeredTagsFormat
    | TagsWithSeparatorFormat
    | OptionalFormat
    | PlusFormat
    | StarFormat
    | TokenFormat
    | ExcludeTokenFormat
    | AnyTokensFormat
    | RepeatFormat
    | DispatchFormat
    | TokenDispatchFormat,
    Field(discriminator="type"),
]

for _model in (
    SequenceFormat,
    OrFormat,
    TagFormat,
    TriggeredTagsFormat,
    TokenTriggeredTagsFormat,
    TagsWithSeparatorFormat,
    OptionalFormat,
    PlusFormat,
    StarFormat,
    RepeatFormat,
    DispatchFormat,
    TokenDispatchFormat,
):
    _model.model_rebuild()  # resolve the recursive `Format` references


class StructuralTagItem(BaseModel):
    """XGrammar's deprecated structural tag item (still in XGrammar 0.2.8): `begin`, a JSON value
    of `schema`, `end`; see StructuralTag.from_legacy_structural_tag."""

    begin: str
    schema_: str | type[BaseModel] | dict[str, Any] = Field(alias="schema")
    end: str


class StructuralTag(BaseModel):
    """A whole structural tag: `{"type": "structural_tag", "format": {...}}`."""

    type: Literal["structural_tag"] = "structural_tag"
    format: Format

    @staticmethod
    def from_legacy_structural_tag(tags: list[StructuralTagItem], triggers: list[str]) -> StructuralTag:
        """XGrammar's deprecated legacy items and triggers (still in XGrammar 0.2.8) as one
        TriggeredTagsFormat, converted where every legacy form is (grammar/structural_tag.py)."""
        from .grammar.structural_tag import root_format  # the compiler's module: loaded on use

        return StructuralTag.model_validate({"format": root_format(list(tags), triggers)})

    @staticmethod
    def from_json(json_str: str | dict[str, Any]) -> StructuralTag:
        """A StructuralTag from its JSON text or dict (pydantic's ValidationError if it is not one)."""
        if isinstance(json_str, str):
            return StructuralTag.model_validate_json(json_str)
        if isinstance(json_str, dict):
            return StructuralTag.model_validate(json_str)
        raise ValueError(f"StructuralTag.from_json: expected JSON text or a dict, got {type(json_str).__name__}")
