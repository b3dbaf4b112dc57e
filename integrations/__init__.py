"""Adapters that run pushmask inside serving and generation stacks:

- transformers.py: a transformers `LogitsProcessor` for `model.generate`;
- generate.py: `pm.generate`, one call from a transformers model and a prompt to text;
- streaming.py: `pm.generate(..., stream=True)`, the text and the JSON value so far;
- model_cli.py: `pushmask generate`, the command line over generate.py;
- models.py: the default model and tokenizers by name or path;
- fast_forward.py: forced text as the tokens the tokenizer itself would write;
- vllm.py: the vLLM structured-output backend (vllm_batch.py: a step's rows in one batch call;
  vllm_drafts.py: a speculative step's draft masks; vllm_grammar_drafts.py: forced text as draft
  tokens);
- sglang.py: the SGLang grammar backend;
- llama_cpp.py: a llama-cpp-python logits processor;
- token_budget.py: a server request's max_tokens as the matcher's budget (vLLM and SGLang).
"""
