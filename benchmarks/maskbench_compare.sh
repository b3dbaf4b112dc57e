#!/usr/bin/env bash
# The README's MaskBench comparison in one command: the same seeded sample through pushmask (warm
# cross-schema caches, as in a server, and --cold-cache), llguidance and XGrammar (pip install
# -e .[bench]), one engine after the other on this machine, single-threaded workers, then the
# side-by-side report and plots.  ENGINES="pushmask llguidance" picks a subset, SEED=1 another
# sample (default 0).
#   benchmarks/maskbench_compare.sh [SAMPLE] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
sample=${1:-300}
seed=${SEED:-0}
out=${2:-results/maskbench${sample}}
engines=${ENGINES:-pushmask llguidance xgrammar}
mkdir -p "$out"
files=()
run() {  # run ENGINE OUT_FILE [extra validate-corpus options]
  local engine=$1 file=$2
  shift 2
  .venv/bin/pushmask validate-corpus ../shared/data/maskbench-dev --sample "$sample" --seed "$seed" \
    --tokenizer llama3 --engine "$engine" --time-limit 120 --no-progress --out "$file" "$@"
  files+=("$file")
}
for engine in $engines; do
  run "$engine" "$out/$engine.jsonl"
  if [ "$engine" = pushmask ]; then
    run pushmask "$out/pushmask-cold.jsonl" --cold-cache
  fi
done
.venv/bin/pushmask report "${files[@]}" --report "$out/report.md" --plot "$out/plots"
