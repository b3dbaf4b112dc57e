"""Corpus validation and benchmarking of JSON Schema engines (`pushmask validate-corpus`).

    pushmask validate-corpus ../shared/data/maskbench-dev --sample 300 --engine pushmask --tokenizer llama3
    pushmask validate-corpus ../shared/data/maskbench-dev --sample 300 --engine llguidance --tokenizer llama3
    pushmask report results-pushmask.jsonl results-llguidance.jsonl --report out.md --plot plots/

Modules: `corpus` reads MaskBench files, plain schemas and the JSON Schema Test Suite;
`engines` adapts pushmask, llguidance, XGrammar and outlines-core to one interface;
`protocol` is the per-schema check (the same for every engine); `runner` runs schemas in
worker processes under time and memory limits; `report` summarizes and plots result files.
"""
