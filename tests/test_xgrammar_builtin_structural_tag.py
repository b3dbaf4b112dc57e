"""XGrammar's `builtin_structural_tag` (model structural tags from OpenAI tools) and
`GrammarMatcher.traverse_draft_tree`: the tags' languages against the models' documented call
texts, the tool-choice rules, and the draft tree's rows against one matcher walk per node."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pushmask as pm
from pushmask.builtin_structural_tag import get_model_structural_tag, normalize_tool_choice
from pushmask.openai_tool_call_schema import BuiltinToolParam, FunctionToolParam
from pushmask.testing import _is_grammar_accept_string

pytest.importorskip("pydantic")

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": SCHEMA}} for n in ("search", "alt")]
ARGS = json.dumps({"q": "x"})


def accepts(tag: pm.StructuralTag, text: str) -> bool:
    return _is_grammar_accept_string(pm.Grammar.from_structural_tag(tag), text)


def test_normalize_tool_choice_filters_and_simplifies():
    builtin = {"type": "web_search_preview", "name": "browser.search", "parameters": SCHEMA}
    functions, builtins, choice = normalize_tool_choice(
        TOOLS + [builtin], {"type": "function", "function": {"name": "alt"}}
    )
    assert [t.function.name for t in functions] == ["alt"] and builtins == [] and choice == "forced"
    functions, builtins, choice = normalize_tool_choice(TOOLS + [builtin], {"type": "web_search_preview"})
    assert functions == [] and [t.name for t in builtins] == ["browser.search"] and choice == "forced"
    assert isinstance(builtins[0], BuiltinToolParam)
    allowed = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "search"}}]},
    }
    functions, builtins, choice = normalize_tool_choice(TOOLS, allowed)
    assert [t.function.name for t in functions] == ["search"] and isinstance(functions[0], FunctionToolParam)
    assert choice == "required"
    assert normalize_tool_choice(TOOLS, "none") == ([], [], "auto")
    assert normalize_tool_choice(None, None) == ([], [], "auto")


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        ("not a list", "auto", "must be a list"),
        ([], "required", "'required'"),
        (TOOLS, {"type": "function", "function": {"name": "missing"}}, "'missing' is not found"),
        (TOOLS, {"type": "code_interpreter"}, "exactly one builtin tool"),
        (
            TOOLS,
            {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "web"}]}},
            "Allowed builtin",
        ),
    ],
)
def test_bad_tool_choices_are_refused_with_the_reason(tools, choice, message):
    with pytest.raises(ValueError, match=message):
        normalize_tool_choice(tools, choice)


def test_unknown_model_and_bad_reasoning_are_refused():
    with pytest.raises(ValueError, match="Unknown format type: nope"):
        get_model_structural_tag("nope", tools="not even a list")
    with pytest.raises(ValueError, match="'enabled', 'disabled', 'auto'"):
        get_model_structural_tag("qwen_3", reasoning="sometimes")
    assert pm.get_builtin_structural_tag is pm.get_model_structural_tag


QWEN_CALL = f'<tool_call>\n{{"name": "search", "arguments": {ARGS}}}\n</tool_call>'


@pytest.mark.parametrize(
    ("reasoning", "text", "accepted"),
    [
        ("enabled", f"plan</think>\n\nok {QWEN_CALL}", True),  # the prompt opened <think>
        ("enabled", f"<think>plan</think>\n\nok {QWEN_CALL}", False),
        ("auto", f"<think>plan</think>\n\n{QWEN_CALL}", True),
        ("auto", "just text", True),
        ("auto", "plan</think>\n\ntext", False),
        ("disabled", QWEN_CALL, True),
        ("disabled", "a</think>", False),  # free text never holds the special tokens
    ],
)
def test_qwen_3_reasoning_modes(reasoning, text, accepted):
    assert accepts(get_model_structural_tag("qwen_3", tools=TOOLS, reasoning=reasoning), text) == accepted


@pytest.mark.parametrize(
    ("choice", "text", "accepted"),
    [
        ("auto", 'text {"name": "search", "parameters": ' + ARGS + "} more", True),
        ("auto", 'text {"name": "search", "parameters": {"q": 1}}', False),  # the schema holds
        ("auto", '{"name": "other", "parameters": ' + ARGS + "}", False),
        ("required", "no call", False),
        ("required", '{"name": "alt", "parameters": ' + ARGS + "} then text", True),
        ({"type": "function", "function": {"name": "alt"}}, '{"name": "alt", "parameters": ' + ARGS + "}", True),
        ({"type": "function", "function": {"name": "alt"}}, '{"name": "search", "parameters": ' + ARGS + "}", False),
        ("none", '{"name": "search", "parameters": ' + ARGS + "}", True),  # no tools: plain text
        ("none", "a <think>", False),
    ],
)
def test_llama_tool_choice(choice, text, accepted):
    assert accepts(get_model_structural_tag("llama", tools=TOOLS, tool_choice=choice), text) == accepted


def test_deepseek_and_kimi_sections():
    call = f"<｜tool▁call▁begin｜>search<｜tool▁sep｜>{ARGS}<｜tool▁call▁end｜>"
    section = f"<｜tool▁calls▁begin｜>{call}{call}<｜tool▁calls▁end｜>"
    deepseek = get_model_structural_tag("deepseek_v3_1", tools=TOOLS, reasoning=False)
    assert accepts(deepseek, "hi " + section)
    assert not accepts(deepseek, f"hi <｜tool▁calls▁begin｜>{call}")  # an open section must close
    one = get_model_structural_tag("deepseek_v3_1", tools=TOOLS, reasoning=False, parallel_tool_calls=False)
    assert not accepts(one, "hi " + section)
    kimi_call = f"<|tool_call_begin|>functions.alt:3<|tool_call_argument_begin|>{ARGS}<|tool_call_end|>"
    kimi = get_model_structural_tag("kimi", tools=TOOLS, tool_choice="required")
    assert accepts(kimi, f"plan</think><|tool_calls_section_begin|>{kimi_call}<|tool_calls_section_end|>")
    assert not accepts(kimi, "plan</think>no calls")


def test_harmony_calls_and_builtin_tools():
    builtin = {"type": "web_search_preview", "name": "browser.search", "parameters": SCHEMA}
    tag = get_model_structural_tag("harmony", tools=[TOOLS[0], builtin])
    analysis = "<|channel|>analysis<|message|>think<|end|><|start|>assistant"
    assert accepts(
        tag, analysis + f"<|channel|>commentary to=functions.search<|constrain|>json<|message|>{ARGS}<|call|>"
    )
    assert accepts(tag, analysis + f"<|channel|>commentary to=browser.search code<|message|>{ARGS}<|call|>")
    assert accepts(tag, analysis + "<|channel|>final<|message|>done<|return|>")
    assert not accepts(
        tag, analysis + f"<|channel|>commentary to=functions.alt<|constrain|>json<|message|>{ARGS}<|call|>"
    )


K3_END = "<|close|>response<|sep|><|close|>message<|sep|>"


@pytest.mark.parametrize(
    ("model", "reasoning", "text", "accepted"),
    [
        ("minimax_m3", "auto", "answer", True),
        ("minimax_m3", "auto", "<mm:think>plan</mm:think>answer", True),
        ("minimax_m3", "auto", "</mm:think>answer", True),  # the block's end alone
        ("minimax_m3", "auto", "plan</mm:think>answer", False),
        ("kimi_k3", "enabled", "plan<|close|>think<|sep|><|open|>response<|sep|>hi" + K3_END, True),
        ("kimi_k3", "disabled", "hi" + K3_END, True),
        ("kimi_k3", "disabled", "hi<|close|>response<|sep|><|open|>tools<|sep|>" + K3_END[24:], False),
    ],
)
def test_tool_less_turns_of_the_models_with_their_own_layout(model, reasoning, text, accepted):
    tag = get_model_structural_tag(model, tools=[], reasoning=reasoning)
    assert accepts(tag, text) == accepted


def test_model_builders_keep_xgrammars_defaults():
    from pushmask.builtin_structural_tag import get_minimax_m3_structural_tag, get_qwen_3_coder_structural_tag

    # MiniMax-M3's own builder defaults to "auto", the dispatcher to "enabled"
    assert get_minimax_m3_structural_tag(tools=[]) == get_model_structural_tag("minimax_m3", reasoning="auto")
    assert get_model_structural_tag("minimax_m3") == get_model_structural_tag("minimax_m3", reasoning="enabled")
    assert get_qwen_3_coder_structural_tag.__name__ == "get_qwen_3_5_structural_tag"  # one format


# -- traverse_draft_tree ---------------------------------------------------------------------

VOCAB = ["a", "b", "{", "}", '"', ":", ","]


@pytest.fixture(scope="module")
def json_grammar():
    info = pm.TokenizerInfo(VOCAB, vocab_size=len(VOCAB), stop_token_ids=[])
    return pm.GrammarCompiler(info).compile_grammar(pm.Grammar.builtin_json_grammar())


def _path(node: int, first_child: list[int], sibling: list[int]) -> list[int]:
    """The nodes from the root's first child down to `node`, found by search (the oracle)."""

    def walk(at: int, path: list[int]) -> list[int] | None:
        if at == node:
            return path
        child = first_child[at]
        while child != -1:
            found = walk(child, path + [child])
            if found is not None:
                return found
            child = sibling[child]
        return None

    return walk(0, [])


def test_traverse_draft_tree_rows_match_one_walk_per_node(json_grammar):
    # 0 -> 1 ('{') -> 2 ('"') and 3 ('}', a sibling of 2); 0 -> 4 ('a', refused: a sibling of 1)
    first_child, sibling, tokens = [1, 2, -1, -1, -1], [-1, 4, 3, -1, -1], [2, 2, 4, 3, 0]
    matcher = pm.GrammarMatcher(json_grammar)
    bitmask = pm.allocate_token_bitmask(5, len(VOCAB))
    assert matcher.traverse_draft_tree(*(np.array(v, dtype=np.int64) for v in (first_child, sibling, tokens)), bitmask)
    for node in range(5):
        oracle = pm.GrammarMatcher(json_grammar)
        expected = pm.allocate_token_bitmask(1, len(VOCAB))
        if all(oracle.accept_token(tokens[k]) for k in _path(node, first_child, sibling)):
            oracle.fill_next_token_bitmask(expected)
        else:
            expected[:] = 0
        assert np.array_equal(np.asarray(bitmask[node]), np.asarray(expected[0])), node
    assert not np.asarray(bitmask[4]).any()
    assert matcher.accept_token(2)  # the matcher itself did not move


@pytest.mark.parametrize(
    "tree",
    [
        ([1, 1, -1], [-1, -1, -1], [2, 2, 3]),  # node 1 is its own child
        ([5, -1, -1], [-1, -1, -1], [2, 2, 3]),  # an edge past the nodes
        ([1, -1, -1], [1, -1, -1], [2, 2, 3]),  # the root with a sibling
    ],
)
def test_traverse_draft_tree_refuses_a_bad_tree(json_grammar, tree):
    bitmask = pm.allocate_token_bitmask(3, len(VOCAB))
    with pytest.raises(pm.InvalidDraftTreeError) as error:
        pm.GrammarMatcher(json_grammar).traverse_draft_tree(*(np.array(v, dtype=np.int64) for v in tree), bitmask)
    assert isinstance(error.value, RuntimeError)
