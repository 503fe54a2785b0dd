#!/usr/bin/env bash
# The main job on the bundled model: describe it, capture its queries and keys on the sample
# texts, and show it generating. Output lands in ./attnscope-out.
set -euo pipefail
cli=$1
res=$2
out=${ATTNSCOPE_OUT:-attnscope-out}
mkdir -p "$out"
"$cli" info
"$cli" capture --text "$res"/texts/*.txt --seq-len 128 --num-seqs 8 --seed 0 --out "$out/capture"
"$cli" eval --text "$res"/texts/*.txt --seq-len 256
"$cli" generate --prompt "The history of the county" --new-tokens 40
echo "capture store: $out/capture"
