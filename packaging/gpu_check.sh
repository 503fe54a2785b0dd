#!/usr/bin/env bash
# The GPU machine's checks, in stages that each stop at their own time box and write their results
# into OUT (default gpu-check/) before the next one starts, so a run cut short still leaves what it
# did: OUT/stageN.summary is one line per stage (also printed), the logs sit beside it. docs/GPU.md
# says how to carry and run it, and records every run.
#   1  the kernel checker built here and carried (attnscope_cuda_check: CHECKER, else build/kernels/
#      or BUILD_DIR/kernels/; rebuilt with nvcc alone if it cannot run there): every case, its
#      timings, then compute-sanitizer memcheck, racecheck, synccheck, initcheck on --small
#   2  preflight (python3 + torch, cmake, ninja, nvcc against torch.version.cuda, the .gpudeps folder
#      of packaging/gpu_deps.sh), then packaging/gpu_build.sh: core, kernels, the CLI, the tests
#   3  the CUDA tests (KernelsCuda, DofBatched, DistillDevice, SpeedBench, MemoryMeter), two of them
#      under compute-sanitizer, then the whole suite with ctest
#   4  the benchmarks: the kernels beside SDPA, DoF spectra, training and generation (docs/PERFORMANCE.md)
# Environment: STAGES (default 1,2,3,4; e.g. STAGES=1 or STAGES=1,3), OUT, CHECKER, BUILD_DIR
# (default build-gpu), DEPS (default .gpudeps), TOTAL_SECONDS (default 480: every time box is cut
# to what is left of it), SUITE_TIMEOUT (ctest, default 150), BUILD_TIMEOUT (default 240).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/gpu-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)
b=${BUILD_DIR:-$root/build-gpu}
deps=${DEPS:-$root/.gpudeps}
stages=${STAGES:-1,2,3,4}
[ "${KERNELS_ONLY:-0}" = 1 ] && stages=${STAGES:-1}  # the former switch: the kernels alone
start=$(date +%s)
deadline=$((start + ${TOTAL_SECONDS:-480}))
cli=$b/app/attnscope
tests_bin=$b/tests/attnscope_tests

want() { [[ ",$stages," == *",$1,"* ]]; }
left() { echo $((deadline - $(date +%s))); }
# tbox SECONDS CMD...: timeout SECONDS, cut to what is left of TOTAL_SECONDS (rc 124 when cut).
tbox() {
  local s=$1 l
  shift
  l=$(left)
  ((s > l)) && s=$l
  if ((s < 5)); then echo "gpu_check: no time left for: $*" >&2; return 124; fi
  timeout --kill-after=10 "$s" "$@"
}
# summary N TEXT: the stage's one-line summary, written before the next stage starts.
summary() {
  echo "stage $1 ($(($(date +%s) - start)) s into the run): $2" | tee "$out/stage$1.summary"
}
joined() { local r; r=$(printf '%s; ' "$@"); echo "${r%; }"; }
rc_word() { case $1 in 0) echo ok ;; 124 | 137) echo "timed out" ;; *) echo "rc=$1" ;; esac; }

{ echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "stages: $stages"
  if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1
  else echo "no nvidia-smi"; fi
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
  echo "cores: $(nproc)"; } | tee "$out/machine.txt"

have_gpu=0
if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then have_gpu=1; fi

find_tool() {  # find_tool NAME: PATH, CUDA_HOME, /usr/local/cuda, pip's nvidia packages beside torch
  local c
  for c in "$(command -v "$1" 2> /dev/null)" ${CUDA_HOME:+"$CUDA_HOME/bin/$1"} "/usr/local/cuda/bin/$1" \
    $(python3 -c 'import nvidia, os, sys; print(" ".join(os.path.join(p, s, "bin", sys.argv[1]) for p in nvidia.__path__ for s in ("cuda_nvcc", "cu13", "cuda_sanitizer_api")))' "$1" 2> /dev/null); do
    if [ -n "$c" ] && [ -x "$c" ]; then echo "$c"; return 0; fi
  done
  [ "$1" = compute-sanitizer ] && [ -x /usr/local/cuda/compute-sanitizer/compute-sanitizer ] &&
    { echo /usr/local/cuda/compute-sanitizer/compute-sanitizer; return 0; }
  return 1
}

# ---- stage 1: the carried kernel checker and compute-sanitizer ----
stage1() {
  local checker=${CHECKER:-} c rc res=()
  for c in "$root/build/kernels/attnscope_cuda_check" "$b/kernels/attnscope_cuda_check"; do
    if [ -z "$checker" ] && [ -x "$c" ]; then checker=$c; fi
  done
  if [ $have_gpu = 0 ]; then  # the checker's own word where there is one (it exits 2 without a device)
    [ -n "$checker" ] && { tbox 20 "$checker" --small > "$out/checker.log" 2>&1; echo "gpu_check: $checker exited $?: $(head -1 "$out/checker.log")"; }
    summary 1 "no GPU on this machine (nvidia-smi -L lists none): the kernel checker and the sanitizers did not run"
    return
  fi
  # The carried binary may not load here (an older glibc): then nvcc builds it from the sources alone.
  local rebuild=1
  if [ -n "$checker" ]; then
    "$checker" --usage > "$out/checker_load.log" 2>&1; rc=$?  # rc 2 and a usage line where it loads
    if [ $rc != 126 ] && [ $rc != 127 ] && ! grep -qE "GLIBC|cannot open shared|cannot execute" "$out/checker_load.log"; then rebuild=0; fi
  fi
  if [ $rebuild = 1 ]; then
    local nvcc arch
    nvcc=$(find_tool nvcc) || { summary 1 "no runnable kernel checker (${checker:-none carried}; see checker_load.log) and no nvcc to build one"; return; }
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
    echo "gpu_check: building the kernel checker with $nvcc for sm_$arch"
    checker=$out/attnscope_cuda_check
    if ! tbox 240 "$nvcc" -O3 -lineinfo -std=c++17 -arch="sm_$arch" -Xcompiler -pthread -I "$root/kernels" \
      "$root"/kernels/cuda/*.cu "$root/kernels/check/cuda_kernel_check.cpp" -o "$checker" > "$out/checker_build.log" 2>&1; then
      summary 1 "the kernel checker did not build with nvcc (checker_build.log)"; return
    fi
  fi
  echo "gpu_check: kernel checker $checker"
  tbox 120 "$checker" > "$out/checker.log" 2>&1; rc=$?
  res+=("checker: $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/checker.log" || echo 'no result') ($(rc_word $rc))")
  grep -E "^FAIL|^device|passed, .* failed|CUDA error|no CUDA" "$out/checker.log" | head -20
  tbox 45 "$checker" --time > "$out/checker_time.txt" 2>&1; rc=$?
  cat "$out/checker_time.txt"
  res+=("timing $(rc_word $rc)")
  local san tool
  if san=$(find_tool compute-sanitizer); then
    for tool in memcheck racecheck synccheck initcheck; do
      # The checker allocates with cudaMalloc itself; PyTorch's caching allocator is set aside anyway.
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 tbox 45 "$san" --tool $tool --error-exitcode 3 "$checker" --small \
        > "$out/sanitizer_$tool.log" 2>&1; rc=$?
      res+=("$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_$tool.log" | tail -1 | sed 's/^========= //') ($(rc_word $rc))")
    done
  else
    res+=("no compute-sanitizer (PATH, CUDA_HOME, /usr/local/cuda)")
  fi
  summary 1 "$(joined "${res[@]}")"
}

# ---- stage 2: preflight, then the build against this machine's torch ----
stage2() {
  local missing=() notes=() torch_cuda nvcc nvcc_ver t0 rc
  torch_cuda=$(python3 -c 'import torch; print(torch.version.cuda)' 2> /dev/null) || missing+=("python3 with torch")
  command -v cmake > /dev/null || missing+=(cmake)
  command -v ninja > /dev/null || missing+=(ninja)
  [ -f "$deps/lib/pkgconfig/libpcre2-8.pc" ] && [ -d "$deps/src/googletest" ] ||
    missing+=("$deps (packaging/gpu_deps.sh writes it on the Debian machine; carry it)")
  if nvcc=$(find_tool nvcc); then
    nvcc_ver=$("$nvcc" --version | grep -o 'release [0-9.]*' | cut -d' ' -f2)
    notes+=("nvcc $nvcc_ver ($nvcc)")
    if [ -n "$torch_cuda" ] && [ "${nvcc_ver%%.*}" != "${torch_cuda%%.*}" ]; then
      notes+=("nvcc $nvcc_ver does not match torch.version.cuda $torch_cuda")
    fi
  else
    missing+=("nvcc (the kernels would be left out and KernelsCuda fail)")
  fi
  { echo "torch.version.cuda: ${torch_cuda:-none}"; printf 'note: %s\n' "${notes[@]}"
    printf 'missing: %s\n' "${missing[@]}"; } > "$out/preflight.txt"
  if [ ${#missing[@]} -gt 0 ]; then
    summary 2 "preflight: missing $(joined "${missing[@]}"); nothing built"
    return
  fi
  t0=$(date +%s)
  DEPS=$deps BUILD_DIR=$b tbox "${BUILD_TIMEOUT:-240}" bash "$root/packaging/gpu_build.sh" attnscope attnscope_tests \
    > "$out/build.log" 2>&1; rc=$?
  grep -E "attnscope:|gpu_build:|Gloo|NCCL" "$out/build.log" | head -5
  [ $rc = 0 ] || grep -E "error|Error" "$out/build.log" | head -20
  summary 2 "build $(rc_word $rc) in $(($(date +%s) - t0)) s; $(joined "${notes[@]}")"
}

# ---- stage 3: the CUDA tests, then the whole suite ----
gtest_line() {  # the counts of a gtest log, or how it ended
  local p f k
  p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$1" | grep -oE '[0-9]+$'); f=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$1" | grep -oE '[0-9]+')
  k=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$1" | grep -oE '[0-9]+')
  grep -q '^\[==========\] .* ran' "$1" || echo -n "did not finish: "
  echo "${p:-0} passed, ${f:-0} failed, ${k:-0} skipped"
}
stage3() {
  if [ ! -x "$tests_bin" ]; then summary 3 "no test binary ($tests_bin): stage 2 did not build it"; return; fi
  local res=() rc group name filter san tool
  for group in "kernels_cuda_tests:KernelsCuda.*" "dof_cuda_tests:DofBatched.*" "cuda_tests:DistillDevice.*:SpeedBench.*:MemoryMeter.*"; do
    name=${group%%:*}; filter=${group#*:}
    (cd "$b" && OMP_NUM_THREADS=8 tbox 120 ./tests/attnscope_tests --gtest_filter="$filter" > "$out/$name.log" 2>&1); rc=$?
    res+=("$filter $(gtest_line "$out/$name.log") ($(rc_word $rc))")
    grep -E "^\[  (PASSED|FAILED)|Failure|max \|" "$out/$name.log" | head -12
  done
  # The kernels inside LibTorch's process, with its caching allocator out of memcheck's way.
  if [ $have_gpu = 1 ] && san=$(find_tool compute-sanitizer); then
    for tool in memcheck racecheck; do
      (cd "$b" && PYTORCH_NO_CUDA_MEMORY_CACHING=1 tbox 90 "$san" --tool $tool --error-exitcode 3 ./tests/attnscope_tests \
        --gtest_filter='KernelsCuda.RowsWithoutWeightAreNanWithZeroGradient' > "$out/sanitizer_tests_$tool.log" 2>&1); rc=$?
      res+=("$tool on KernelsCuda.RowsWithoutWeight: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_tests_$tool.log" | tail -1 | sed 's/^========= //') ($(rc_word $rc))")
    done
  fi
  # The whole suite against this LibTorch (the real checkpoints are not here).
  (cd "$b" && OMP_NUM_THREADS=1 tbox "${SUITE_TIMEOUT:-150}" ctest -j"$(nproc)" --timeout 100 > "$out/ctest.log" 2>&1); rc=$?
  grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|\(Timeout\)|Total Test time" "$out/ctest.log" | head -30
  res+=("ctest: $(grep -E 'tests passed' "$out/ctest.log" || echo 'no total') $(grep -c SEGFAULT "$out/ctest.log") SEGFAULT ($(rc_word $rc))")
  # 2026-11-26 (LibTorch 2.11, H200): test processes died with SIGSEGV at or near exit (issue 17).
  # A backtrace of one, where some still do (cuda-gdb also debugs host-only programs).
  local segv
  segv=$(grep -oE '[A-Za-z0-9_]+\.[A-Za-z0-9_/]+ \.+\*\*\*Exception: SegFault' "$out/ctest.log" | head -1 | cut -d' ' -f1)
  if [ -n "$segv" ] && command -v cuda-gdb > /dev/null; then
    (cd "$b" && tbox 60 cuda-gdb -batch -ex run -ex bt -ex "info sharedlibrary" --args ./tests/attnscope_tests \
      --gtest_filter="$segv" > "$out/segv_backtrace.txt" 2>&1)
    grep -E "^#[0-9]+|signal" "$out/segv_backtrace.txt" | head -25
  fi
  summary 3 "$(joined "${res[@]}")"
}

# ---- stage 4: the benchmarks of docs/PERFORMANCE.md ----
stage4() {
  if [ ! -x "$cli" ]; then summary 4 "no CLI ($cli): stage 2 did not build it"; return; fi
  local res=() rc pass
  # The CUDA kernels beside SDPA as a plain table (tests/bench needs Google Benchmark, absent here).
  if tbox 90 cmake --build "$b" --target bench_linear_attention_cuda_plain > "$out/bench_cuda_build.log" 2>&1; then
    tbox 60 "$b/kernels/bench_linear_attention_cuda_plain" 5 > "$out/bench_linear_attention_cuda.txt" 2>&1; rc=$?
    res+=("bench_linear_attention_cuda $(rc_word $rc)"); cat "$out/bench_linear_attention_cuda.txt"
  else
    res+=("bench_linear_attention_cuda_plain did not build"); grep -E "error" "$out/bench_cuda_build.log" | head -10
  fi
  # The kernels through the CLI beside the previous chunked LibTorch form, the cumsum form and SDPA
  # (flash attention), flash-linear-attention's B2 H16 D128 shape.
  for pass in "" "--backward"; do
    tbox 60 "$cli" bench attention --device cuda --dtype bfloat16 --batch 2 --heads 16 --head-dim 128 --features 128 \
      --lengths 1024,2048,4096,8192,16384 --repeats 5 $pass > "$out/bench_attention_cuda${pass:+_backward}.md" 2>&1; rc=$?
    res+=("bench attention${pass:+ backward} $(rc_word $rc)"); cat "$out/bench_attention_cuda${pass:+_backward}.md"
  done
  # DoF spectra: the batched layer (cuSOLVER) beside dsyevd and the certified fast path, J = 4096.
  tbox 30 "$cli" capture --text "$root"/resources/texts/*.txt --seq-len 256 --num-seqs 8 --seed 0 -o "$out/capture" > /dev/null 2>&1
  OMP_NUM_THREADS=1 tbox 60 "$cli" bench dof --capture "$out/capture" --samples 4096 --layer 0 --device cuda \
    > "$out/bench_dof_cuda.md" 2>&1; rc=$?
  res+=("bench dof $(rc_word $rc)"); cat "$out/bench_dof_cuda.md"
  # Paper 000 Table 5: ms per 1024-token training sample, GPT-2-small shape, M = 64, every loss.
  tbox 90 "$cli" bench train --device cuda --loss l2,softmax,kl,direct --seq-len 1024 --steps 5 --json \
    > "$out/bench_train_cuda.json" 2> "$out/bench_train_cuda.err"; rc=$?
  res+=("bench train $(rc_word $rc)"); cat "$out/bench_train_cuda.json"
  # Paper 000 Table 4: generation tokens/s, softmax against linear.
  tbox 90 "$cli" bench generate --device cuda --contexts 256,512,1024,2048,4096 --tokens 8 --json \
    > "$out/bench_generate_cuda.json" 2> "$out/bench_generate_cuda.err"; rc=$?
  res+=("bench generate $(rc_word $rc)"); cat "$out/bench_generate_cuda.json"
  # Issue 29's goals that need a GPU: 32 sequences x 8K (GPT-2 shape, goal 5x softmax with its
  # cache), and the rotary Llama-3.2-1B shape to 32K.
  tbox 90 "$cli" bench generate --device cuda --contexts 8192 --batch 8,32 --no-batch --tokens 8 --json \
    > "$out/bench_generate_batch_cuda.json" 2> "$out/bench_generate_batch_cuda.err"; rc=$?
  res+=("bench generate 32 x 8K $(rc_word $rc)"); cat "$out/bench_generate_batch_cuda.json"
  tbox 150 "$cli" bench generate --device cuda --shape llama-3.2-1b --contexts 4096,16384,32768 --batch 1,8 --no-batch \
    --tokens 8 --json > "$out/bench_generate_llama_cuda.json" 2> "$out/bench_generate_llama_cuda.err"; rc=$?
  res+=("bench generate llama-3.2-1b $(rc_word $rc)"); cat "$out/bench_generate_llama_cuda.json"
  summary 4 "$(joined "${res[@]}")"
}

for s in 1 2 3 4; do
  if want $s; then
    if (($(left) < 5)); then summary $s "not run: the run's $((${TOTAL_SECONDS:-480})) s were spent"; continue; fi
    "stage$s"
  fi
done
echo "gpu_check: $(($(date +%s) - start)) s; summaries in $out/stage*.summary"
cat "$out"/stage*.summary > "$out/summary.txt" 2> /dev/null
