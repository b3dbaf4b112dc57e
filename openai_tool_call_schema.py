"""XGrammar's `xgrammar.openai_tool_call_schema`: the OpenAI Chat Completions shapes of `tools` and
`tool_choice` as pydantic models, which `pushmask.builtin_structural_tag` reads.

Function tools are ``{"type": "function", "function": {"name", "parameters", "strict"}}``; a builtin
(hosted) tool is ``{"type", "name", "parameters"}``, its `name` the one the model writes (`type`
when absent).  `tool_choice` is "none" / "auto" / "required", a named function, a builtin type, or
an allowed-tools subset.  Field names and defaults are XGrammar 0.2.8's (and the openai SDK's).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

__all__ = [
    "AllowedToolChoiceParam",
    "AllowedToolRef",
    "AllowedToolsParam",
    "BuiltinToolChoiceParam",
    "BuiltinToolParam",
    "FunctionDefinition",
    "FunctionToolParam",
    "NamedToolChoiceFunction",
    "NamedToolChoiceParam",
    "ToolChoiceOptionParam",
    "ToolParam",
]


class FunctionDefinition(BaseModel):
    """A function: its `name`, and the JSON Schema of its arguments (None: any JSON value)."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # False: the arguments are any JSON value, whatever `parameters` says


class FunctionToolParam(BaseModel):
    """A function tool, in the Chat Completions shape."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class BuiltinToolParam(BaseModel):
    """A builtin (hosted) tool: its provider `type`, the `name` the model writes, its arguments' schema."""

    type: str
    name: str | None = None
    parameters: dict[str, Any] | None = None


ToolParam = FunctionToolParam | BuiltinToolParam


class NamedToolChoiceFunction(BaseModel):
    """The function a named tool choice names."""

    name: str


class NamedToolChoiceParam(BaseModel):
    """`tool_choice` forcing one function: ``{"type": "function", "function": {"name": ...}}``."""

    type: Literal["function"] = "function"
    function: NamedToolChoiceFunction


class BuiltinToolChoiceParam(BaseModel):
    """`tool_choice` forcing the builtin tool of this `type` (`name` is not used to match)."""

    type: str
    name: str | None = None


class AllowedToolRef(BaseModel):
    """One tool of an allowed-tools choice: a function by name, or a builtin tool by type."""

    type: str
    function: NamedToolChoiceFunction | None = None
    name: str | None = None


class AllowedToolsParam(BaseModel):
    """The allowed tools, and whether a call is optional ("auto") or needed ("required")."""

    mode: Literal["auto", "required"]
    tools: list[AllowedToolRef]


class AllowedToolChoiceParam(BaseModel):
    """`tool_choice` restricting the tools to a subset: ``{"type": "allowed_tools", "allowed_tools": ...}``."""

    type: Literal["allowed_tools"] = "allowed_tools"
    allowed_tools: AllowedToolsParam


ToolChoiceOptionParam = (
    Literal["none", "auto", "required"] | NamedToolChoiceParam | AllowedToolChoiceParam | BuiltinToolChoiceParam
)
