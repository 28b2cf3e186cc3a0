#!/bin/sh
# build.sh -- builds build/simcuda.so: the whole CUDA plugin source
# (vm/cuda/*.cu, unmodified) compiled with g++ against the host simulation
# in this folder (cudasim.h, README in its header; runtime.cpp,
# scheduler.cpp and products.cpp, with internal.h between them), loadable
# wherever build/qkv_cuda.so is:
#
#   tests/tools/cudasim/build.sh            # from the repository root
#   QKV_CUDA_PLUGIN=build/simcuda.so build/qkv test tests/backends/cuda/
#
# Each .cu goes through rewrite.py into build/cudasim/gen/X.cpp (launches
# and extern __shared__ rewritten; #line keeps the .cu's names and line
# numbers), then g++ -std=c++20.  cuda_runtime.h, cuda.h, cudaTypedefs.h,
# cublas_v2.h and CUB's header are one-line forwards to cudasim.h, made in build/cudasim/include.
# Environment: CXX (g++), SIMFLAGS (extra flags, e.g. "-O0 -g" or
# "-fsanitize=undefined"), BUILD (build), JOBS (parallel compiles: nproc),
# SRC (the .cu files' folder, vm/cuda; a copy of vm/ elsewhere lets one
# try a change, e.g. a removed barrier, without touching the tree).
# At run time: SIM_WORKERS (OS threads running blocks), SIM_STACK_KB
# (each simulated thread's stack), SIM_DEVICES=0 (no device),
# SIM_TRACE=1 (print each launch), SIM_ORDER=reverse|random|warps (the order
# in which a block's threads run between barriers; forward by default),
# SIM_TMA=early|late (when a TMA copy lands: at issue, or at the wait on
# its mbarrier, the default; tma.cpp).
set -e
cd "$(dirname "$0")/../../.."
CXX=${CXX:-g++}
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
SIM=tests/tools/cudasim
SRC=${SRC:-vm/cuda}
OUT=$BUILD/cudasim
mkdir -p "$OUT/gen" "$OUT/obj" "$OUT/include/cub/device"
here=$(pwd)
for h in cuda_runtime.h cuda.h cudaTypedefs.h cublas_v2.h cub/device/device_segmented_sort.cuh; do
  echo "#include \"$here/$SIM/cudasim.h\"" > "$OUT/include/$h.new"
  cmp -s "$OUT/include/$h.new" "$OUT/include/$h" 2>/dev/null || mv "$OUT/include/$h.new" "$OUT/include/$h"
  rm -f "$OUT/include/$h.new"
done

# (-Wno-unknown-pragmas: CUDA's #pragma unroll, which g++ does not know)
FLAGS="-std=c++20 -O2 -g -fPIC -ffp-contract=off -fno-strict-aliasing -pthread \
  -Wall -Wextra -Wno-unused-function -Wno-unused-parameter -Wno-missing-field-initializers \
  -Wno-unknown-pragmas -Wno-psabi \
  -I$OUT/include -I$SRC $SIMFLAGS \
  -DQKV_SIM_DIR=\"$here/$SIM\" -DQKV_SIM_JIT=\"$here/$OUT/jit\""

# compile one source into $OUT/obj when it, a header, or this script changed
compile () {       # src obj
  deps="$1 $SIM/*.h $SIM/build.sh $SRC/*.cuh $SRC/../common/*.h $SRC/../core/qkv.h \
    $SRC/../core/backend.h $SRC/../core/half.h $SRC/../dispatch/plugin.h"
  if [ -f "$2" ] && [ -z "$SIMFLAGS" ]; then
    stale=0
    for d in $deps; do [ "$d" -nt "$2" ] && stale=1; done
    [ $stale = 0 ] && return 0
  fi
  echo "  $CXX $1"
  $CXX $FLAGS -c "$1" -o "$2"
}

pids=""
objs=""
for cu in $SRC/*.cu; do
  b=$(basename "$cu" .cu)
  python3 $SIM/rewrite.py "$cu" "$OUT/gen/$b.cpp.new"
  cmp -s "$OUT/gen/$b.cpp.new" "$OUT/gen/$b.cpp" 2>/dev/null || mv "$OUT/gen/$b.cpp.new" "$OUT/gen/$b.cpp"
  rm -f "$OUT/gen/$b.cpp.new"
  objs="$objs $OUT/obj/$b.o"
  compile "$OUT/gen/$b.cpp" "$OUT/obj/$b.o" &
  pids="$pids $!"
  if [ $(echo $pids | wc -w) -ge "$JOBS" ]; then
    for p in $pids; do wait $p; done
    pids=""
  fi
done
# the text jit.cu compiles at run time (vm/cuda/embed.py), as the plugin's
python3 $SRC/embed.py $SRC/jit_kernels.cuh qkv_cu_mods_text "$OUT/gen/mods_text.cpp.new"
cmp -s "$OUT/gen/mods_text.cpp.new" "$OUT/gen/mods_text.cpp" 2>/dev/null || \
  mv "$OUT/gen/mods_text.cpp.new" "$OUT/gen/mods_text.cpp"
rm -f "$OUT/gen/mods_text.cpp.new"
objs="$objs $OUT/obj/mods_text.o"
compile "$OUT/gen/mods_text.cpp" "$OUT/obj/mods_text.o"
# the simulation's own sources, as sim_X.o (a .cu may share a name)
for cpp in $SIM/*.cpp; do
  o="$OUT/obj/sim_$(basename "$cpp" .cpp).o"
  objs="$objs $o"
  compile "$cpp" "$o" &
  pids="$pids $!"
done
for p in $pids; do wait $p; done

$CXX -shared -pthread -o "$BUILD/simcuda.so" $objs $SIMFLAGS -Wl,-z,defs
echo "built $BUILD/simcuda.so"
