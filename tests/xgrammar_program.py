"""A small program written against xgrammar's Python API, as a user would write it.

tests/test_xgrammar_compat.py runs it twice: as it is (when xgrammar is installed) and with its
one import line changed to `import pushmask as xgr`, and compares what the two runs return.
Usage on its own: python tests/xgrammar_program.py TOKENIZER_DIR  (prints the results as JSON).
"""

import hashlib
import json
import sys

import torch
from transformers import AutoTokenizer

import xgrammar as xgr

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "height": {"type": "number"},
                   "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "height"],
}
PET = {
    "type": "object",
    "properties": {"kind": {"enum": ["cat", "dog", "hamster"]}, "indoor": {"type": "boolean"},
                   "owner": {"type": "null"}},
    "required": ["kind", "indoor", "owner"],
}
CASES = [
    # (schema, compile_json_schema keyword arguments, text the "model" emits)
    (PERSON, {"any_whitespace": False}, '{"name": "Ann Lee", "height": 1.75, "tags": ["a b", "c"]}'),
    (PERSON, {"any_whitespace": False, "strict_mode": True}, '{"name": "Bo", "height": -2e3}'),
    (PET, {"any_whitespace": False, "separators": (",", ":")}, '{"kind":"hamster","indoor":false,"owner":null}'),
    ({"type": "array", "items": {"type": "number"}}, {"any_whitespace": False, "indent": 2}, "[\n  1.5,\n  20\n]"),
]


def run(tokenizer_dir: str) -> list[dict]:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, stop_token_ids=[tokenizer.eos_token_id])
    compiler = xgr.GrammarCompiler(info)
    special = torch.tensor(sorted(i for i, added in tokenizer.added_tokens_decoder.items() if added.special))
    results = []
    for schema, kwargs, text in CASES:
        compiled = compiler.compile_json_schema(json.dumps(schema), **kwargs)
        matcher = xgr.GrammarMatcher(compiled)
        bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        tokens = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        steps = []
        for token in tokens:
            matcher.fill_next_token_bitmask(bitmask)
            logits = torch.zeros(1, info.vocab_size)
            xgr.apply_token_bitmask_inplace(logits, bitmask)
            allowed = torch.isfinite(logits[0]).nonzero().flatten()
            text_tokens = allowed[~torch.isin(allowed, special)]  # special tokens' text: see the README
            steps.append({"text_tokens": len(text_tokens),
                          "digest": hashlib.sha256(text_tokens.numpy().tobytes()).hexdigest(),
                          "special_tokens": allowed[torch.isin(allowed, special)].tolist(),
                          "token_allowed": bool(torch.isfinite(logits[0, token])),
                          "accepted": matcher.accept_token(token)})
        terminated = matcher.is_terminated()
        matcher.rollback(3)  # back before the last two text tokens and the stop token
        again = [matcher.accept_token(token) for token in tokens[-3:]]
        results.append({"steps": steps, "terminated": terminated, "reaccepted": again,
                        "terminated_again": matcher.is_terminated()})
    return results


if __name__ == "__main__":
    json.dump(run(sys.argv[1]), sys.stdout, indent=1)
