#!/usr/bin/env bash
# Builds the Debian package from an already built tree and checks what a user installs: the
# program, the bundled model and texts it opens by default, a valid desktop entry with its icon,
# and library dependencies on Debian's packages. Then runs the packaged program from an unpacked
# copy to show it finds its installed resources rather than the source tree's.
# usage: check_deb.sh BUILD_DIR
set -euo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cpack --config "$build/CPackConfig.cmake" -B "$tmp/out" > "$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/out/attnscope_*.deb)
echo "package: $(basename "$deb") ($(du -h "$deb" | cut -f1))"

dpkg-deb -c "$deb" | awk '{print $6}' > "$tmp/contents"
for f in ./usr/bin/attnscope \
         ./usr/share/applications/attnscope.desktop \
         ./usr/share/icons/hicolor/scalable/apps/attnscope.svg \
         ./usr/share/attnscope/resources/models/brown-gpt2-mini/config.json \
         ./usr/share/attnscope/resources/models/brown-gpt2-mini/model.safetensors \
         ./usr/share/attnscope/resources/models/brown-gpt2-mini/tokenizer.json \
         ./usr/share/attnscope/resources/texts/brown_news_ca44.txt \
         ./usr/share/doc/attnscope/README.md; do
  grep -qx -- "$f" "$tmp/contents" || { echo "missing from the package: $f"; exit 1; }
done

depends=$(dpkg-deb -f "$deb" Depends)
for lib in libtorch libqt6widgets6 libqcustomplot; do
  grep -q "$lib" <<< "$depends" || { echo "Depends lacks $lib: $depends"; exit 1; }
done
[ "$(dpkg-deb -f "$deb" Package)" = attnscope ] || { echo "wrong package name"; exit 1; }

dpkg-deb -x "$deb" "$tmp/root"
desktop-file-validate "$tmp/root/usr/share/applications/attnscope.desktop"
grep -q '^Exec=attnscope gui' "$tmp/root/usr/share/applications/attnscope.desktop"
grep -q '<svg' "$tmp/root/usr/share/icons/hicolor/scalable/apps/attnscope.svg"

# The unpacked program opens its own bundled model (not the source tree's).
info=$(env -u ATTNSCOPE_RESOURCES "$tmp/root/usr/bin/attnscope" info --json)
grep -q "\"$tmp/root/usr/share/attnscope/resources/models/brown-gpt2-mini" <<< "$info" \
  || { echo "the packaged program did not use its installed model:"; echo "$info" | head -5; exit 1; }
echo "package ok"
