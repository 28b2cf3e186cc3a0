#!/bin/sh
# passes.sh -- make test's passes, each run whatever the ones before it
# gave, each between two marker lines that tests/tools/total.lua reads:
#
#   == pass NAME: COMMAND
#   ... the pass's output, its runner's closing line "N passed, N failed" ...
#   == pass NAME: exit STATUS
#
#   tests/tools/passes.sh [NAME ...]     # from the repository root
#
# The passes (all four, in this order, when no NAME is given):
#   suites      every suite: build/qkv test --timeout 600 tests/
#   device      every suite again with "cuda" as the default device, on the
#               GPU when there is one, else through build/fakecuda.so
#   cudasim     the cross-backend suite, every part of tests/backends/cuda/,
#               on the CUDA kernels built for the host simulation
#               (build/simcuda.so, made here by make)
#               and then the variants' kernels that pass compiled from their
#               programs (build/cudasim/jit/*.cu) compiled again with NVRTC
#               for sm_90, through the real plugin (build/jit_check), where
#               nvcc built it
#   cudasim-warps   the same with each warp running ahead to the next barrier,
#               and the variants' programs interpreted (QKV_CUDA_JIT=0)
# Each test may run 600 s (--timeout; the runner's default, 60 s, is for a
# user's own suites): only a hang takes that long, on any machine however
# busy, and a test under the sanitizers or beside other work may run past a
# minute.
# Environment: BUILD (build), MAKE (make), TIMEOUT (600).  Exits 1 when
# any pass did.
BUILD=${BUILD:-build}
TIMEOUT=${TIMEOUT:-600}
MAKE=${MAKE:-make}
QKV=$BUILD/qkv
SIM=$BUILD/simcuda.so
failed=0

pass() {
  name=$1
  shift
  echo "== pass $name: $*"
  "$@"
  rc=$?
  echo "== pass $name: exit $rc"
  [ "$rc" = 0 ] || failed=1
}

# the simulation is built before its first pass; a build that fails is
# that pass's failure (and the next one's)
sim() {
  "$MAKE" --no-print-directory BUILD="$BUILD" "$SIM" || return
  # compiled texts older than this simulation are never found again
  [ -d "$BUILD/cudasim/jit" ] && find "$BUILD/cudasim/jit" -type f ! -newer "$SIM" -delete
  env "$@" QKV_CUDA_PLUGIN="$SIM" "$QKV" test --timeout "$TIMEOUT" tests/backends/cuda/ || return
  case "$*" in *QKV_CUDA_JIT=0*) return 0 ;; esac
  [ -x "$BUILD/jit_check" ] && [ -f "$BUILD/qkv_cuda.so" ] || return 0
  out=$("$BUILD/jit_check" "$BUILD/qkv_cuda.so" "$BUILD/cudasim/jit" 90)
  rc=$?
  printf '%s\n' "$out" | grep -v '^ok '
  [ "$rc" != 1 ]
}

run() {
  case $1 in
    suites) pass suites "$QKV" test --timeout "$TIMEOUT" tests/ ;;
    device)
      if "$QKV" -e 'os.exit(qkv.cuda_available() and 0 or 1)'; then
        pass device "$QKV" test --timeout "$TIMEOUT" --device cuda tests/
      else
        pass device env QKV_CUDA_PLUGIN="$BUILD/fakecuda.so" "$QKV" test --timeout "$TIMEOUT" \
          --device cuda tests/
      fi ;;
    cudasim) pass cudasim sim SIM_ORDER=forward ;;
    cudasim-warps) pass cudasim-warps sim SIM_ORDER=warps QKV_CUDA_JIT=0 ;;
    *) echo "passes.sh: no pass '$1' (suites, device, cudasim, cudasim-warps)" >&2; exit 2 ;;
  esac
}

[ $# -gt 0 ] || set -- suites device cudasim cudasim-warps
for p in "$@"; do run "$p"; done
exit $failed
