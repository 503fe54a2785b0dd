#!/usr/bin/env bash
# Brown corpus (tagged, one file per text) -> plain English, one paragraph per line.
# Usage: brown_to_text.sh CORPUS_DIR FILE...   (names like ca01; prints to stdout)
# Tokens are word/TAG; the tag follows the last slash. `` and '' become ", and the spaces the
# tokenization put before punctuation are removed.
set -euo pipefail
dir=$1
shift
for f in "$@"; do
  sed -E -e 's#([^ \t]*)/[^ /\t]+#\1#g' \
         -e "s#\`\`|''#\"#g" \
         -e 's#^[ \t]+##' \
         -e 's# ([.,;:?!)]|'"'"'s|n'"'"'t)#\1#g' \
         -e 's#\( #(#g' \
         "$dir/$f" |
    awk 'NF { printf "%s%s", sep, $0; sep = " "; next } sep { print ""; sep = "" } END { if (sep) print "" }' |
    # Quotes alternate open/close within a paragraph: no space after an opening one, none before a
    # closing one.
    awk -F'"' -v OFS='' '{
      out = $1
      for (i = 2; i <= NF; i++) {
        if (i % 2 == 0) { sub(/ $/, "", out); out = out " \""; s = $i; sub(/^ /, "", s); out = out s }
        else { sub(/ $/, "", out); out = out "\""; out = out $i }
      }
      sub(/^ /, "", out); print out
    }'
done
