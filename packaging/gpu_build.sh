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
# nvcc for the CUDA kernels (kernels/cuda): CUDACXX, PATH, CUDA_HOME, /usr/local/cuda (where the GPU
# machine's image has CUDA 13.0), then the pip package nvidia-cuda-nvcc beside torch. Without one
# the kernels are left out (the KernelsCuda tests then fail on a GPU, saying so).
nvcc=${CUDACXX:-$(command -v nvcc || true)}
pip_nvcc=$(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "bin", "nvcc") for p in nvidia.__path__ for s in ("cuda_nvcc", "cu13")))' 2>/dev/null || true)
for candidate in ${CUDA_HOME:+$CUDA_HOME/bin/nvcc} /usr/local/cuda/bin/nvcc $pip_nvcc; do
  if [ -z "$nvcc" ] && [ -x "$candidate" ]; then nvcc=$candidate; fi
done
cuda_args=()
if [ -n "$nvcc" ]; then
  cuda_args=(-DATTNSCOPE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90)
  echo "gpu_build: nvcc $nvcc ($("$nvcc" --version | grep -o 'release [0-9.]*'))"
else
  echo "gpu_build: no nvcc (CUDACXX, PATH, CUDA_HOME, /usr/local/cuda, pip nvidia-cuda-nvcc): building without the CUDA kernels" >&2
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSCOPE_GUI=OFF \
  -DCMAKE_PREFIX_PATH="$deps;$torch_prefix" -DCMAKE_BUILD_RPATH="$deps/lib" "${cuda_args[@]}"
# -k 0: a failed file does not hide the errors of the others.
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" -- -k 0
