#!/usr/bin/env bash
# The main job on the bundled model. With a display (and the GUI built) it opens the workbench,
# which captures the sample texts and computes spectra and metrics as it opens. Without one it
# describes the model and writes the full analysis report (capture, DoF spectra, Algorithm 1 for
# every strategy, head metrics, maps of the most and least complex heads) as Markdown/LaTeX/CSV/JSON
# tables and PNG figures under ./attnscope-out, then says how to open the window.
set -euo pipefail
cli=$1
out=${ATTNSCOPE_OUT:-attnscope-out}
has_gui() { "$cli" gui --help >/dev/null 2>&1; }
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && has_gui && [ -z "${ATTNSCOPE_NO_GUI:-}" ]; then
  echo "opening the attnscope workbench on the bundled model (ATTNSCOPE_NO_GUI=1 for the report instead)"
  exec "$cli" gui
fi
mkdir -p "$out"
"$cli" info
"$cli" report --out "$out/report"
echo
cat "$out/report/table1_allocation.md"
echo
cat "$out/report/table2_dof.md"
echo
echo "report: $out/report/index.md"
if has_gui; then
  echo "workbench: no display here; on a desktop run  $cli gui"
  echo "           (or write a picture of it headless:  $cli gui --screenshot heads.png --view heads)"
else
  echo "workbench: this build has no GUI (configure with -DATTNSCOPE_GUI=ON to get  attnscope gui)"
fi
