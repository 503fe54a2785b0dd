#!/usr/bin/env bash
# The main job on the bundled model: describe it, then the full analysis report (capture of the
# sample texts, DoF spectra, Algorithm 1 for every strategy, head metrics, maps of the most and
# least complex heads) as Markdown/LaTeX/CSV/JSON tables and PNG figures. Output: ./attnscope-out.
set -euo pipefail
cli=$1
out=${ATTNSCOPE_OUT:-attnscope-out}
mkdir -p "$out"
"$cli" info
"$cli" report --out "$out/report"
echo
cat "$out/report/table1_allocation.md"
echo
cat "$out/report/table2_dof.md"
echo
echo "report: $out/report/index.md"
