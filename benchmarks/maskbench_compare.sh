#!/usr/bin/env bash
# The README's MaskBench comparison in one command: the same seeded sample through pushmask and
# llguidance (and XGrammar with ENGINES="pushmask llguidance xgrammar", after pip install -e .[bench]),
# one engine after the other on this machine, then the side-by-side report and plots.
#   benchmarks/maskbench_compare.sh [SAMPLE] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
sample=${1:-300}
out=${2:-results/maskbench${sample}}
engines=${ENGINES:-pushmask llguidance}
mkdir -p "$out"
files=()
for engine in $engines; do
  .venv/bin/pushmask validate-corpus ../shared/data/maskbench-dev --sample "$sample" --seed 0 \
    --engine "$engine" --time-limit 120 --no-progress --out "$out/$engine.jsonl"
  files+=("$out/$engine.jsonl")
done
.venv/bin/pushmask report "${files[@]}" --report "$out/report.md" --plot "$out/plots"
