#!/usr/bin/env bash
# Builds core, kernels, the CLI and the tests on the GPU machine against the CUDA LibTorch inside its
# Python torch, with no Qt (ATTNSCOPE_GUI=OFF). DEPS is the folder packaging/gpu_deps.sh wrote on a
# Debian machine and the device call carried (default .gpudeps). BUILD_DIR defaults to build-gpu.
# Usage: packaging/gpu_build.sh [TARGET...]   (default: attnscope attnscope_tests)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${DEPS:-$root/.gpudeps}
build=${BUILD_DIR:-$root/build-gpu}
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(attnscope attnscope_tests)
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
sed -i "s|^prefix=.*|prefix=$deps|" "$deps/lib/pkgconfig/libpcre2-8.pc"
if [ ! -f "$deps/lib/libgtest.a" ]; then
  cmake -S "$deps/src/googletest" -B "$deps/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_INSTALL_PREFIX="$deps" >/dev/null
  cmake --build "$deps/gtest-build" --target install >/dev/null
fi
export PKG_CONFIG_PATH=$deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSCOPE_GUI=OFF \
  -DCMAKE_PREFIX_PATH="$deps;$torch_prefix" -DCMAKE_BUILD_RPATH="$deps/lib" \
  -DCMAKE_CUDA_ARCHITECTURES=90
# -k 0: a failed file does not hide the errors of the others.
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" -- -k 0
