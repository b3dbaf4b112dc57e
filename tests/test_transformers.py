"""The transformers LogitsProcessor and `pushmask.generate` with tiny random-weight Llamas and the
real SmolLM2 tokenizer: every output is checked by an independent oracle (json.loads + jsonschema,
lark's Earley parser for the EBNF grammar, Python's re for regexes)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
jsonschema = pytest.importorskip("jsonschema")
lark = pytest.importorskip("lark")

from support import REPO, grammar_compiler, hf_tokenizer, tiny_llama  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.integrations.transformers import GrammarLogitsProcessor  # noqa: E402

VOCAB = 49_152
EOS = 2  # <|im_end|>, SmolLM2's eos and pad

# Short keys and bounded values, so most random-weight outputs end well within MAX_NEW (after
# the closing brace EOS is the only allowed token). Keys may still be spelled with \\u escapes,
# which is valid JSON, so a row can run out of tokens: such rows must be valid prefixes.
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 99},
        "tag": {"type": "string", "maxLength": 4},
        "pet": {"enum": ["cat", "dog"]},
        "ok": {"type": "boolean"},
    },
    "required": ["id", "tag", "pet", "ok"],
    "additionalProperties": False,
}
MAX_NEW = 80


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    # Tiny models gain nothing from intra-op threads, and on a loaded 2-core CI machine thread
    # oversubscription makes every op ~10x slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


ARITHMETIC_EBNF = (REPO / "examples" / "arithmetic.ebnf").read_text()
# The same language written independently for lark (the oracle).
ARITHMETIC_LARK = r"""
start: expr
expr: term (ADDOP term)*
term: factor (MULOP factor)*
factor: NUMBER | "(" expr ")"
ADDOP: / [+-] /
MULOP: / [*\/] /
NUMBER: /0|[1-9][0-9]{0,5}/
"""


@pytest.fixture(scope="module")
def tok():
    tokenizer = hf_tokenizer("smollm2")
    tokenizer.padding_side = "left"
    return tokenizer


@pytest.fixture(scope="module")
def compiler():
    return grammar_compiler("smollm2")


@pytest.fixture(scope="module")
def schema_grammar(compiler):
    return compiler.compile_json_schema(SCHEMA, whitespace="compact")


@pytest.fixture(scope="module")
def arithmetic_grammar(compiler):
    return compiler.compile_grammar(ARITHMETIC_EBNF)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0)


@pytest.fixture(scope="module")
def prompts(tok):
    # different lengths, so the batch is left-padded
    return tok(["Describe a person in JSON, please:", "Hi"], return_tensors="pt", padding=True)


def generated_rows(out, prompt_len):
    return [row[prompt_len:].tolist() for row in out]


def split_at_eos(tokens):
    """(tokens before the first EOS, whether there was one)."""
    if EOS in tokens:
        return tokens[: tokens.index(EOS)], True
    return tokens, False


def text_of(tokens) -> str:
    """The exact text of generated tokens (bytes from the vocabulary, not the lossy decode)."""
    vocab = grammar_compiler("smollm2").tokenizer_info.decoded_vocab
    return b"".join(vocab[t] for t in tokens).decode("utf-8")


def assert_valid_json_rows(rows, grammar, *, min_ended=1):
    """Rows that ended with EOS parse and validate; rows cut by max_new_tokens are prefixes the
    grammar accepts. At least `min_ended` rows must have ended."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    ended = 0
    for tokens in rows:
        body, has_eos = split_at_eos(tokens)
        text = text_of(body)
        if has_eos:
            validator.validate(json.loads(text))
            ended += 1
        else:
            assert len(tokens) == MAX_NEW and pm.GrammarMatcher(grammar).accept_string(text), text
    assert ended >= min_ended, f"only {ended} of {len(rows)} rows ended"


def test_greedy_batch_left_padding(model, tok, prompts, schema_grammar):
    processor = GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)
    out = model.generate(
        **prompts,
        logits_processor=[processor],
        max_new_tokens=MAX_NEW,
        do_sample=False,
        pad_token_id=EOS,
        eos_token_id=EOS,
    )
    rows = generated_rows(out, prompts.input_ids.shape[1])
    assert len(rows) == 2
    assert_valid_json_rows(rows, schema_grammar)


def test_sampling_with_num_return_sequences(model, tok, prompts, schema_grammar):
    torch.manual_seed(1)
    processor = GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)
    out = model.generate(
        **prompts,
        logits_processor=[processor],
        max_new_tokens=MAX_NEW,
        do_sample=True,
        temperature=1.5,
        top_p=0.95,
        num_return_sequences=3,
        pad_token_id=EOS,
        eos_token_id=EOS,
    )
    rows = generated_rows(out, prompts.input_ids.shape[1])
    assert len(rows) == 6
    assert_valid_json_rows(rows, schema_grammar)
    assert len({tuple(r) for r in rows}) > 1  # sampling really sampled


def test_beam_search(model, tok, prompts, schema_grammar):
    processor = GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)
    out = model.generate(
        **prompts,
        logits_processor=[processor],
        max_new_tokens=MAX_NEW,
        num_beams=3,
        num_return_sequences=2,
        do_sample=False,
        pad_token_id=EOS,
        eos_token_id=EOS,
    )
    rows = generated_rows(out, prompts.input_ids.shape[1])
    assert len(rows) == 4
    assert_valid_json_rows(rows, schema_grammar)


def test_assisted_generation(model, tok, schema_grammar):
    assistant = tiny_llama(7)
    enc = tok(["Give me JSON:"], return_tensors="pt")
    processor = GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)
    out = model.generate(
        **enc,
        logits_processor=[processor],
        assistant_model=assistant,
        max_new_tokens=MAX_NEW,
        do_sample=False,
        pad_token_id=EOS,
        eos_token_id=EOS,
    )
    rows = generated_rows(out, enc.input_ids.shape[1])
    # Greedy decoding of a random-weight model may not finish within MAX_NEW tokens (additional
    # members are allowed); a cut row must still be a valid prefix, and the real check is below.
    assert_valid_json_rows(rows, schema_grammar, min_ended=0)
    # Assisted greedy decoding must give what plain greedy decoding gives under the same mask.
    plain = model.generate(
        **enc,
        logits_processor=[GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)],
        max_new_tokens=MAX_NEW,
        do_sample=False,
        pad_token_id=EOS,
        eos_token_id=EOS,
    )
    assert split_at_eos(rows[0])[0] == split_at_eos(generated_rows(plain, enc.input_ids.shape[1])[0])[0]


def test_ebnf_grammar_against_lark(model, tok, arithmetic_grammar):
    oracle = lark.Lark(ARITHMETIC_LARK, parser="earley", lexer="dynamic")
    torch.manual_seed(3)
    enc = tok(["1 + 2 =", "Compute"], return_tensors="pt", padding=True)
    processor = GrammarLogitsProcessor(arithmetic_grammar, eos_token_id=EOS)
    out = model.generate(
        **enc,
        logits_processor=[processor],
        max_new_tokens=30,
        do_sample=True,
        num_return_sequences=3,
        pad_token_id=EOS,
        eos_token_id=EOS,
    )
    ended = 0
    for tokens in generated_rows(out, enc.input_ids.shape[1]):
        body, has_eos = split_at_eos(tokens)
        text = text_of(body)
        if has_eos:
            oracle.parse(text)  # raises on a string outside the language
            ended += 1
        else:  # cut by max_new_tokens: must still be a prefix the grammar accepts
            matcher = pm.GrammarMatcher(arithmetic_grammar)
            assert matcher.accept_string(text), text
    assert ended >= 1


def test_one_grammar_per_prompt(model, tok, prompts, schema_grammar, arithmetic_grammar):
    oracle = lark.Lark(ARITHMETIC_LARK, parser="earley", lexer="dynamic")
    processor = GrammarLogitsProcessor([schema_grammar, arithmetic_grammar], eos_token_id=EOS)
    torch.manual_seed(4)
    out = model.generate(
        **prompts,
        logits_processor=[processor],
        max_new_tokens=MAX_NEW,
        do_sample=True,
        num_return_sequences=2,
        pad_token_id=EOS,
        eos_token_id=EOS,
    )
    rows = generated_rows(out, prompts.input_ids.shape[1])
    assert_valid_json_rows(rows[:2], schema_grammar)  # rows 0, 1 belong to prompt 0
    for tokens in rows[2:]:
        body, has_eos = split_at_eos(tokens)
        if has_eos:
            oracle.parse(text_of(body))
        else:
            assert pm.GrammarMatcher(arithmetic_grammar).accept_string(text_of(body))


def test_reuse_across_calls_matches_fresh_processor(model, tok, schema_grammar):
    reused = GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)
    kwargs = dict(max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=EOS, eos_token_id=EOS)
    batches = [
        tok(["First prompt here", "Second"], return_tensors="pt", padding=True),
        tok(["A third, different prompt"], return_tensors="pt"),
        tok(["First prompt here", "Second"], return_tensors="pt", padding=True),
    ]
    for enc in batches:
        got = model.generate(**enc, logits_processor=[reused], **kwargs)
        fresh = model.generate(
            **enc, logits_processor=[GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)], **kwargs
        )
        assert torch.equal(got, fresh)
        assert_valid_json_rows(generated_rows(got, enc.input_ids.shape[1]), schema_grammar)


def test_model_vocab_wider_than_tokenizer(tok, schema_grammar):
    """Masks are sized from scores.shape[-1]; ids past the tokenizer are always masked."""
    processor = GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)
    width = VOCAB + 64
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    scores = torch.zeros(2, width)
    scores[:, VOCAB:] = 100.0  # the padding ids would win if left unmasked
    out = processor(ids, scores.clone())
    assert out.shape == (2, width)
    assert torch.isneginf(out[:, VOCAB:]).all()
    allowed = ~torch.isneginf(out[0, :VOCAB])
    expected = pm.GrammarMatcher(schema_grammar).get_next_token_mask()
    assert np.array_equal(allowed.numpy(), expected)
    # and a whole generation with a padded-vocabulary model stays valid
    model = tiny_llama(5, vocab_size=width)
    enc = tok(["x"], return_tensors="pt")
    gen = model.generate(
        **enc,
        logits_processor=[GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)],
        max_new_tokens=MAX_NEW,
        do_sample=True,
        pad_token_id=EOS,
        eos_token_id=EOS,
    )
    assert_valid_json_rows(generated_rows(gen, enc.input_ids.shape[1]), schema_grammar)


def test_eos_only_when_grammar_can_end_and_never_all_inf(tok, compiler):
    cg = compiler.compile_grammar('root ::= "ab" | "abc"')
    processor = GrammarLogitsProcessor(cg, eos_token_id=EOS)
    a, b, c = (tok.convert_tokens_to_ids(x) for x in ("a", "b", "c"))
    prompt = [11, 12]

    def step(generated):
        ids = torch.tensor([prompt + generated])
        return processor(ids, torch.zeros(1, VOCAB))[0]

    first = step([])
    assert torch.isneginf(first[EOS]) and not torch.isneginf(first[a])
    step([a])
    after_ab = step([a, b])
    assert not torch.isneginf(after_ab[EOS]) and not torch.isneginf(after_ab[c])
    after_abc = step([a, b, c])
    assert set(torch.nonzero(~torch.isneginf(after_abc)).flatten().tolist()) == {EOS}
    finished = step([a, b, c, EOS])  # a finished row (generate pads it) may only stop
    assert set(torch.nonzero(~torch.isneginf(finished)).flatten().tolist()) == {EOS}
    padded = step([a, b, c, EOS, EOS])
    assert set(torch.nonzero(~torch.isneginf(padded)).flatten().tolist()) == {EOS}
    junk = step([a, c])  # a token outside the grammar (another processor interfered)
    assert set(torch.nonzero(~torch.isneginf(junk)).flatten().tolist()) == {EOS}
    again = step([a])  # rolling back past the bad token revives the row
    assert not torch.isneginf(again[b]) and torch.isneginf(again[EOS])


def test_rows_left_without_a_choice_may_stop(tok, compiler):
    """A row whose allowed tokens all lie past the model's columns, or whose allowed scores an
    earlier processor set to -inf, gets its stop token rather than nothing to sample."""
    cg = compiler.compile_grammar('root ::= "a"')
    a = tok.convert_tokens_to_ids("a")
    assert a > EOS
    ids = torch.tensor([[11, 12], [11, 12]])

    def allowed(row):
        return set(torch.nonzero(~torch.isneginf(row)).flatten().tolist())

    narrow = GrammarLogitsProcessor(cg, eos_token_id=EOS)(ids, torch.zeros(2, a))  # "a" is past the columns
    assert [allowed(row) for row in narrow] == [{EOS}, {EOS}]
    scores = torch.zeros(2, VOCAB)
    scores[1, a] = float("-inf")  # an earlier processor forbade the only token the grammar allows
    out = GrammarLogitsProcessor(cg, eos_token_id=EOS)(ids, scores)
    assert [allowed(row) for row in out] == [{a}, {EOS}]


def test_rollback_when_history_diverges(tok, schema_grammar):
    """Assisted decoding rewinds rows; the masks must equal those of a fresh processor."""
    text = '{"id":7,"tag":"ab","pet":"cat","ok":true}'
    tokens = tok.encode(text, add_special_tokens=False)
    other = tok.encode('{"id":42,"tag":"wxyz","pet":"dog","ok":false}', add_special_tokens=False)
    prompt = [3, 4, 5]
    processor = GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)
    # grow along `tokens` one at a time, then revisit shorter and diverging histories (never more
    # than one token past the longest seen, as in assisted decoding)
    histories = [tokens[:k] for k in range(len(tokens) + 1)]
    histories += [tokens[:3], tokens[:4] + other[4:5], tokens[:2], other[:7], tokens[:5], []]
    for history in histories:
        got = processor(torch.tensor([prompt + history]), torch.zeros(1, VOCAB))
        fresh = GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)
        for k in range(len(history) + 1):  # grow one token at a time, like generate
            want = fresh(torch.tensor([prompt + history[:k]]), torch.zeros(1, VOCAB))
        assert torch.equal(torch.isneginf(got), torch.isneginf(want)), history


def test_beam_rows_swap_histories(tok, schema_grammar):
    """Beam search reorders rows: each row's mask follows its own tokens, not its index."""
    a = tok.encode('{"id":1,"tag":"x', add_special_tokens=False)
    b = tok.encode('{"id":23,"tag":"yz","pet', add_special_tokens=False)
    n = min(len(a), len(b))
    prompt = [3, 4]
    processor = GrammarLogitsProcessor(schema_grammar, eos_token_id=EOS)
    processor(torch.tensor([prompt, prompt]), torch.zeros(2, VOCAB))
    for k in range(1, n + 1):
        processor(torch.tensor([prompt + a[:k], prompt + b[:k]]), torch.zeros(2, VOCAB))
    swapped = processor(torch.tensor([prompt + b[:n], prompt + a[:n]]), torch.zeros(2, VOCAB))
    for row, history in enumerate((b[:n], a[:n])):
        matcher = pm.GrammarMatcher(schema_grammar, override_stop_tokens=[EOS])
        assert matcher.accept_tokens(history)
        assert np.array_equal((~torch.isneginf(swapped[row])).numpy(), matcher.get_next_token_mask())


def test_generate_helper_schema_stream_and_jump_forward(model, tok):
    pieces = []
    result = pm.generate(
        model,
        tok,
        "Describe a person",
        schema=SCHEMA,
        max_new_tokens=MAX_NEW,
        json_options={"whitespace": "compact"},
        stream=pieces.append,
        do_sample=True,
    )
    assert result.complete
    jsonschema.validate(result.value, SCHEMA)
    assert json.loads(result.text) == result.value
    assert "".join(pieces) == result.text
    assert result.num_forced > 0  # '{"name":"' is forced at the start
    # the compiled grammar is cached per tokenizer
    from pushmask.integrations.generate import compile_constraint

    assert compile_constraint(tok, schema=SCHEMA, json_options={"whitespace": "compact"}) is compile_constraint(
        tok, schema=SCHEMA, json_options={"whitespace": "compact"}
    )


def test_jump_forward_keeps_the_model_conditioned_on_forced_text(model, tok, compiler):
    """Greedy with jump-forward: every token the model chose must be the argmax of the allowed
    tokens under logits recomputed from scratch on the full prefix (forced text included), so
    the KV cache carried across the pauses is right."""
    ebnf = r'root ::= "{\"name\": \"" [a-z]{1,6} "\", \"kind\": \"" ("cat" | "dog") "\"}"'
    result = pm.generate(model, tok, "Describe a pet", grammar=ebnf, max_new_tokens=MAX_NEW)
    assert result.complete and re.fullmatch(r'\{"name": "[a-z]{1,6}", "kind": "(cat|dog)"\}', result.text)
    assert result.num_forced >= 6 and not all(result.forced)
    from pushmask.integrations.generate import _prompt_ids

    prompt = _prompt_ids(tok, "Describe a pet", None)[0].tolist()
    full = torch.tensor([prompt + result.token_ids])
    with torch.no_grad():
        logits = model(full).logits[0]
    matcher = pm.GrammarMatcher(compiler.compile_grammar(ebnf), override_stop_tokens=[EOS])
    for i, token in enumerate(result.token_ids):
        if not result.forced[i]:
            allowed = torch.from_numpy(matcher.get_next_token_mask())
            row = logits[len(prompt) + i - 1].masked_fill(~allowed, float("-inf"))
            assert int(row.argmax()) == token, i
        assert matcher.accept_token(token)


def test_generate_helper_regex_and_grammar(model, tok):
    pattern = r"[a-z]{2,5}-[0-9]{2}"
    result = pm.generate(model, tok, "Give me a code", regex=pattern, max_new_tokens=20, do_sample=True)
    assert result.complete and re.fullmatch(pattern, result.text), result.text
    oracle = lark.Lark(ARITHMETIC_LARK, parser="earley", lexer="dynamic")
    result = pm.generate(model, tok, "Compute", grammar=ARITHMETIC_EBNF, max_new_tokens=40)
    if result.complete:
        oracle.parse(result.text)
    else:
        assert pm.GrammarMatcher(grammar_compiler("smollm2").compile_grammar(ARITHMETIC_EBNF)).accept_string(
            result.text
        )
    with pytest.raises(ValueError, match="exactly one"):
        pm.generate(model, tok, "x", regex="a", grammar='root ::= "a"')


def test_cli_generate_with_local_model(tmp_path, tok, capsys):
    from pushmask.cli import main

    model_dir = tmp_path / "tiny"
    tiny_llama(11).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    status = main(
        [
            "generate",
            "--schema",
            str(schema_file),
            "--model",
            str(model_dir),
            "--json-only",
            "--max-new-tokens",
            str(MAX_NEW),
            "--temperature",
            "1.0",
            "--seed",
            "3",
            "--repetition-penalty",
            "1.2",
            "Describe a cat",
        ]
    )
    out = capsys.readouterr().out.strip()
    assert status == 0, out
    jsonschema.validate(json.loads(out), SCHEMA)
    status = main(["generate", "--regex", "[0-9]{3}", "--model", str(model_dir), "--json-only", "Digits"])
    out = capsys.readouterr().out.strip()
    assert status == 0 and re.fullmatch("[0-9]{3}", out), out


def test_cli_aligned_sampling_with_local_model(tmp_path, tok, capsys):
    """`pushmask generate --aligned` prints N samples, each inside the regex's language."""
    from pushmask.cli import main

    model_dir = tmp_path / "tiny"
    tiny_llama(5).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    for mode in ("asap", "exact"):
        status = main(
            [
                "generate",
                "--regex",
                "[01]{3}",
                "--model",
                str(model_dir),
                "--json-only",
                "--aligned",
                mode,
                "--num-samples",
                "4",
                "--seed",
                "1",
                "Bits",
            ]
        )
        lines = capsys.readouterr().out.strip().splitlines()
        assert status == 0 and len(lines) == 4, lines
        assert all(re.fullmatch("[01]{3}", line) for line in lines), lines


# An array without maxItems: a model that never chooses to stop fills any budget with items.
EVENT_SCHEMA = {
    "type": "object",
    "properties": {
        "attendees": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"],
            },
        }
    },
    "required": ["attendees"],
}


def test_generate_finishes_within_the_budget(model, tok):
    """Random weights rarely stop by choice; the budget closes strings, items and the object in
    time, from the least accepted budget upward, greedy and sampled; below it, a clear error."""
    from pushmask.integrations.generate import compile_constraint

    least = pm.GrammarMatcher(compile_constraint(tok, schema=EVENT_SCHEMA)).min_tokens_to_finish()
    for budget, sample in ((least, False), (least + 3, True), (least + 25, True), (60, False)):
        torch.manual_seed(budget)
        result = pm.generate(
            model, tok, "List the attendees", schema=EVENT_SCHEMA, max_new_tokens=budget, do_sample=sample
        )
        assert result.complete and result.num_tokens <= budget, (budget, result.text)
        jsonschema.validate(json.loads(result.text), EVENT_SCHEMA)
    with pytest.raises(pm.BudgetTooSmallError, match=f"at least {least}"):
        pm.generate(model, tok, "List the attendees", schema=EVENT_SCHEMA, max_new_tokens=least - 1)


def test_processor_budget_ends_every_row_valid(model, tok, prompts):
    compiled = grammar_compiler("smollm2").compile_json_schema(EVENT_SCHEMA, separators=(", ", ": "))
    budget = 30
    processor = GrammarLogitsProcessor(compiled, eos_token_id=EOS, max_new_tokens=budget)
    out = model.generate(
        **prompts,
        logits_processor=[processor],
        max_new_tokens=budget,
        do_sample=True,
        num_return_sequences=2,
        pad_token_id=EOS,
    )
    for tokens in generated_rows(out, prompts["input_ids"].shape[1]):
        body, _ = split_at_eos(tokens)
        jsonschema.validate(json.loads(text_of(body)), EVENT_SCHEMA)


def test_generation_defaults_to_the_json_dumps_layout(tok):
    """generate's default grammar takes exactly json.dumps's text (the oracle) and no other
    spacing; indent=2 when asked; compile_json_schema itself stays flexible."""
    from pushmask.integrations.generate import compile_constraint

    value = {"attendees": [{"name": "Ada", "age": 36}, {"name": "Bo", "age": 7}]}
    canonical = compile_constraint(tok, schema=EVENT_SCHEMA)
    assert pm.GrammarMatcher(canonical).accept_string(json.dumps(value))
    for other in (
        json.dumps(value, separators=(",", ":")),
        json.dumps(value, indent=2),
        json.dumps(value).replace(": ", " : "),
    ):
        matcher = pm.GrammarMatcher(canonical)
        assert not (matcher.accept_string(other) and matcher.can_end()), other
    indented = compile_constraint(tok, schema=EVENT_SCHEMA, json_options={"indent": 2})
    matcher = pm.GrammarMatcher(indented)
    assert matcher.accept_string(json.dumps(value, indent=2)) and matcher.can_end()
    flexible = grammar_compiler("smollm2").compile_json_schema(EVENT_SCHEMA)
    matcher = pm.GrammarMatcher(flexible)
    assert matcher.accept_string(json.dumps(value, indent=4).replace(": ", " :  ")) and matcher.can_end()


def test_generate_stream_yields_closed_members(model, tok):
    """stream=True: the pieces make up the text, every value shown agrees with the final value
    (json.loads of the text), and each top-level member is reported closed exactly once."""
    torch.manual_seed(0)
    stream = pm.generate(
        model, tok, "Describe a person", schema=SCHEMA, max_new_tokens=MAX_NEW, stream=True, do_sample=True
    )
    events = list(stream)
    result = stream.result
    assert result.complete and "".join(e.text for e in events) == result.text
    final = json.loads(result.text)
    closed = [key for e in events for key, _ in e.closed]
    assert closed == list(final)
    for e in events:
        if isinstance(e.value, dict):
            for key, value in e.value.items():
                assert final[key] == value


def test_processor_batch_masks_equal_row_by_row_fills(tok, schema_grammar, arithmetic_grammar):
    """The processor fills its live rows in one batch call: rows of two grammars, two of them in
    the same state, each step's bitmask rows equal each row's own single-row fill."""
    texts = [
        '{"id":7,"tag":"ab","pet":"cat","ok":true}',
        '{"id":42,"tag":"wxyz","pet":"dog","ok":false}',
        "(12 + 3) * 4 - 5 / 6",
        "(12 + 3) * 4 - 5 / 6",
    ]
    histories = [tok.encode(text, add_special_tokens=False) for text in texts]
    n = min(len(h) for h in histories)
    prompt = [3, 4, 5]
    processor = GrammarLogitsProcessor([schema_grammar, arithmetic_grammar], eos_token_id=EOS)
    grammars = [schema_grammar, schema_grammar, arithmetic_grammar, arithmetic_grammar]
    matchers = [pm.GrammarMatcher(g, override_stop_tokens=[EOS]) for g in grammars]
    expected = np.zeros((len(matchers), (VOCAB + 31) // 32), dtype=np.int32)
    for k in range(n + 1):
        got = processor.fill_bitmask(torch.tensor([prompt + h[:k] for h in histories]))
        for row, matcher in enumerate(matchers):
            matcher.fill_next_token_bitmask(expected, row)
        assert np.array_equal(got, expected[:, : got.shape[1]]), k
        if k < n:
            for matcher, history in zip(matchers, histories):
                assert matcher.accept_token(history[k])
