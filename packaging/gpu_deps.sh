#!/usr/bin/env bash
# Collects, on this Debian machine, what the GPU machine lacks to build core + CLI + tests against
# the CUDA LibTorch of its Python torch (it has no apt and reaches no network): the header-only
# libraries with their relocatable CMake configs (nlohmann-json, CLI11, Eigen), PCRE2 (headers, the
# shared library and a pkg-config file) and GoogleTest's sources. Writes DEST (default .gpudeps,
# ignored by git), a prefix for packaging/gpu_build.sh; about 20 MB.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$root/.gpudeps}
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
rm -rf "$dest" && mkdir -p "$dest"/{include,lib/pkgconfig,share/cmake,share/eigen3,src}
cp -r /usr/include/nlohmann /usr/include/CLI "$dest/include/"
cp -r /usr/include/eigen3 "$dest/include/"
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$dest/share/cmake/"
cp -r /usr/share/eigen3/cmake "$dest/share/eigen3/"
cp /usr/include/pcre2.h "$dest/include/"
cp -P /usr/lib/$arch/libpcre2-8.so* "$dest/lib/"
sed -e "s|^prefix=.*|prefix=$dest|" -e 's|^libdir=.*|libdir=${prefix}/lib|' \
  /usr/lib/$arch/pkgconfig/libpcre2-8.pc > "$dest/lib/pkgconfig/libpcre2-8.pc"
cp -r /usr/src/googletest "$dest/src/"
# The .pc file names an absolute prefix: gpu_build.sh rewrites it to where the folder lands.
echo "gpu_deps: wrote $dest ($(du -sh "$dest" | cut -f1))"
