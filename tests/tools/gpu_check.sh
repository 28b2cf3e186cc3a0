#!/bin/bash
# gpu_check.sh -- the whole GPU check, run on a bare GPU machine from the
# repository's root, with build/gpu.tar.xz (`make gpu-check` makes it and
# prints the command).  Each step runs under its own time limit and writes
# its log under $OUT (8 files at most); one line per step goes to
# $OUT/0-summary.txt and to stdout, so the end of the output is the summary.
#
#   1-env.log        nvidia-smi, driver, toolkit, the plugin's libraries,
#                    the PyTorch there and its cuDNN (tests/tools/gpu_probe.py),
#                    and whether qkv's cuDNN path loads it
#   2-cuda.log       the cross-backend suite, every part, and cuDNN's
#                    (tests/backends/cuda/, test_cudnn.lua),
#                    CUDA_LAUNCH_BLOCKING=1, and the half-precision attention
#                    under QKV_CUDA_MMA_SYNC=1
#   3-memcheck.log   compute-sanitizer memcheck over the fused attention's
#                    tests (QKV_CUDA_NO_CACHE=1, QKV_CUDNN=0: our kernels),
#                    the variants' compiled ones in a process beside them
#   4-racecheck.log  racecheck over the tensor-core kernels' tests, the
#                    variants' likewise
#   5-device.log     the suites with the GPU as the default device
#   6-bench.log      bench/attention_gpu.lua against the PyTorch there
#                    (and its table of the tensor-core kernel's variants)
#   7-wgmma.log      its --quick tables again for the wgmma forward's other
#                    builds (fewer overlaps, cp.async loads, 64 keys a tile)
#
# Steps 2 to 5 run side by side (16 cores, one GPU; none of them is
# timed), then the benches alone: about 6 minutes on an H100.  `gpu_check.sh
# quick` runs the attention's suites and the bench's --quick tables alone.  `gpu_check.sh backend`
# runs the backend's whole check instead (every test class under memcheck,
# racecheck and synccheck over the shared-memory kernels, every suite on
# the device, bench/cuda.lua, and tests/tools/gpu_oom.lua filling the card
# as 7-oom.log), about 7 minutes.
set -u
OUT=${OUT:-build/gpu-check}
mkdir -p "$OUT"
SUM=$OUT/0-summary.txt
: > "$SUM"
T0=$(date +%s)
say() { echo "$*" | tee -a "$SUM"; }

# the bundle, and the names the suites use for the build (build/qkv, ...)
tar -C build -xJf build/gpu.tar.xz || { echo "gpu_check: no build/gpu.tar.xz (make gpu-check)"; exit 1; }
for f in qkv qkv.so qkv_cuda.so fakecuda.so simcuda.so ptydrive luac lib; do
  [ -e build/gpu/bin/$f ] && [ ! -e build/$f ] && ln -s gpu/bin/$f build/$f
done
# (the test-time Python peers stay away: build/pyref is absent, so their
# checks skip; they test file formats, not the GPU)
# cudart and cuBLAS: the toolkit's (the plugin's rpath), else the wheels'
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, q, "lib") for p in nvidia.__path__ for q in os.listdir(p)))' 2>/dev/null); do
  [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
export LD_LIBRARY_PATH
export QKV=build/gpu/bin/qkv
export CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)

# run NAME LIMIT CMD...: the step (a command or a function below), its
# time, its status and its last words
run() {
  local name=$1 limit=$2; shift 2
  local t=$(date +%s%N)
  timeout -k 10 "$limit" bash -c '"$@"' _ "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local s=$(( ($(date +%s%N) - t) / 1000000 ))
  local last=$(grep -E "passed, [0-9]+ failed|ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY|check .*rc=|^(ok|FAIL) " "$OUT/$name.log" | tr '\n' ';' | tail -c 600)
  [ $rc = 124 ] || [ $rc = 137 ] && last="TIMED OUT after $limit s; $last"
  printf '%-12s rc=%-3s %5d.%01d s  %s\n' "$name" "$rc" $((s / 1000)) $((s % 1000 / 100)) "${last:-$(tail -n 1 "$OUT/$name.log" | cut -c1-200)}" | tee -a "$SUM"
}

env_step() {
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  nvcc --version 2>&1 | tail -n 2
  echo "compute-sanitizer: ${CS:-absent}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd build/gpu/bin/qkv_cuda.so
  timeout 60 python3 tests/tools/gpu_probe.py
  $QKV -e 'print("cuda_available", qkv.cuda_available()); print(qkv.cuda.device_name())
    local t = qkv.clock(); local x = qkv.ones(1):cuda(); print("first cuda()", qkv.clock() - t)
    x = qkv.randn(2, 4, 256, 64, "cuda"):to("bfloat16")
    qkv.cuda.attention_backend("cudnn")
    t = qkv.clock()
    print("cudnn forced:", pcall(qkv.attention, x, x, x, {weights = false}))
    print("cudnn path:", qkv.cuda.attention_backend("auto"), "first call", qkv.clock() - t)'
}
# san TOOL [LuaUnit options]: a sanitizer over the cross-backend suite,
# every part in one process under the tool (tests/helpers/cuda_parts.lua)
san() {
  local tool=$1; shift
  QKV_CUDA_NO_CACHE=1 timeout -k 5 "${SAN_LIMIT:-600}" "$CS" --tool "$tool" --error-exitcode 3 \
    --print-limit 30 \
    $QKV tests/helpers/cuda_parts.lua "$@"
}
# racecheck, one process per test class that uses shared memory or warp
# shuffles, side by side, then synccheck on those; joined in one log
racesync() {
  local c SAN_LIMIT=140
  for c in Reduce Softmax Select Attention.testFused Attention.testMasks Attention.testBackward Halves \
           HalfGradients; do
    ( san racecheck -p "$c" > /tmp/race-$c.log 2>&1; echo "racecheck $c rc=$?" >> /tmp/race-$c.log ) &
  done
  san synccheck -p Reduce -p Softmax -p Attention -p Select > /tmp/race-sync.log 2>&1
  echo "synccheck rc=$?" >> /tmp/race-sync.log
  wait
  for c in /tmp/race-*.log; do echo "== $c"; cat "$c"; done
}
# sans TOOL [LuaUnit options]: TOOL over the tests the options select
# and, in a process of its own beside it, the variants' on the tensor cores
# and CUDA cores (test_variants.lua: their programs compiled by NVRTC);
# one log; fails when either does
sans() {
  local tool=$1; shift
  ( san "$tool" "$@" > /tmp/$tool-attention.log 2>&1
    echo "$tool attention rc=$?" >> /tmp/$tool-attention.log ) &
  ( san "$tool" -p Variants.testHalves -p Variants.testHalfGradients -p Variants.testFused \
      > /tmp/$tool-variants.log 2>&1; echo "$tool variants rc=$?" >> /tmp/$tool-variants.log ) &
  wait
  cat /tmp/$tool-attention.log /tmp/$tool-variants.log
  ! grep -q "^$tool .* rc=[1-9]" /tmp/$tool-attention.log /tmp/$tool-variants.log
}
export -f env_step san racesync sans
run 1-env 45 env_step
# `gpu_check.sh quick`: the attention's suites and the --quick bench, about 2 minutes
if [ "${1:-}" = quick ]; then
  checks() {
    $QKV test tests/backends/cuda/ tests/backends/test_cudnn.lua &&
      QKV_CUDA_MMA_SYNC=1 $QKV test -p Halves tests/backends/cuda/
  }
  export -f checks
  run 2-cuda 90 env CUDA_LAUNCH_BLOCKING=1 bash -c checks &
  run 5-device 90 $QKV test --device cuda tests/backends/test_attention.lua \
    tests/backends/test_cudnn.lua tests/autograd &
  wait
  run 6-bench 100 $QKV bench/attention_gpu.lua --quick
  say "gpu_check quick: $(( $(date +%s) - T0 )) s in all"
  grep -E "^\| (bfloat16|float16) \| " "$OUT/6-bench.log"
  grep -hE "^[0-9]+\) |^tests/.*:[0-9]+: " "$OUT"/[25]-*.log | head -n 30
  cat "$SUM"
  exit 0
fi
# `gpu_check.sh backend`: the backend's whole check (issue 16's)
if [ "${1:-}" = backend ]; then
  run 2-cuda 100 env CUDA_LAUNCH_BLOCKING=1 $QKV test tests/backends/cuda/
  SAN_LIMIT=200 run 3-memcheck 200 san memcheck -x OutOfMemory &
  run 4-racecheck 220 racesync &
  run 5-device 300 $QKV test --device cuda tests/ &
  wait
  run 6-bench 90 $QKV bench/cuda.lua
  run 7-oom 45 $QKV tests/tools/gpu_oom.lua
  say "gpu_check backend: $(( $(date +%s) - T0 )) s in all"
  cat "$SUM"
  exit 0
fi
cat "$OUT/1-env.log" | grep -E "NVIDIA|cuda_available|first cuda|not found|release|^torch|^cudnn" | head -n 10
# the checks side by side (16 cores, one GPU; none of them timed): the
# cross-backend suite and cuDNN's; the sanitizers over the tensor-core
# kernels (QKV_CUDNN=0: ours, not cuDNN's); every suite with the GPU as the
# default device, the attention's first
checks() {
  $QKV test tests/backends/cuda/ tests/backends/test_cudnn.lua &&
    QKV_CUDA_MMA_SYNC=1 $QKV test -p Halves tests/backends/cuda/
}
export -f checks
run 2-cuda 140 env CUDA_LAUNCH_BLOCKING=1 bash -c checks &
# (-p HalvesOnThe: the default variants; each of testHalvesInEveryVariant's
# processes would start under the sanitizer, too slow for the limit)
# (-p HalvesOnWgmma: the Hopper forward, forced)
QKV_CUDNN=0 SAN_LIMIT=140 run 3-memcheck 150 sans memcheck -p HalvesOnThe -p HalvesOnWgmma -p Backward \
  -p Fused -x Variants &
QKV_CUDNN=0 SAN_LIMIT=140 run 4-racecheck 150 sans racecheck -p HalvesOnThe -p HalvesOnWgmma -p Backward \
  -x Variants &
run 5-device 150 $QKV test --device cuda tests/backends/test_attention.lua tests/backends/test_cudnn.lua \
  tests/core tests/stdlib tests/autograd tests/bindings tests/cli &
wait
run 6-bench 180 $QKV bench/attention_gpu.lua
# the wgmma forward's other builds, --quick each: TMA with the turns
# alone and with neither, the first version's cp.async loads, and 64
# keys a tile
wgmma_step() {
  local e
  for e in "QKV_CUDA_WGMMA_LOAD=tma-pingpong" "QKV_CUDA_WGMMA_LOAD=tma-serial" \
           "QKV_CUDA_WGMMA_LOAD=cp.async" "QKV_CUDA_WGMMA_BK=64"; do
    echo "== $e"
    env $e $QKV bench/attention_gpu.lua --quick
  done
}
export -f wgmma_step
run 7-wgmma 200 wgmma_step
say "gpu_check: $(( $(date +%s) - T0 )) s in all"
echo "== bench"; grep -E "^\| (bfloat16|float16) \| (16 x 128|32 x 64) \| (1024|4096|16384) |^ceilings" "$OUT/6-bench.log"
echo "== wgmma builds (quick)"; grep -E "^== |^\| (bfloat16|float16) \| (16 x 128|32 x 64) \| (4096|16384) " "$OUT/7-wgmma.log" | head -n 40
echo "== variants (bf16 forward, TFLOP/s: default r16k64 r32k32 r32k64 r32k128 SDPA)"
grep -E "^\| (16 x 128|32 x 64) \| " "$OUT/6-bench.log"
echo "== failures"; grep -hE "^(FAIL|not ok)|[0-9]+\) |Failed tests|crashed|timed out|device lost|Error|========= (Invalid|Race|Barrier|Program hit)" \
  "$OUT"/[2345]-*.log | sort | uniq -c | sort -rn | head -n 30
echo "== summary"; cat "$SUM"
