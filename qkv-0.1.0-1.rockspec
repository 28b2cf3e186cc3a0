-- luarocks make: builds build/qkv.so with the Makefile and installs it as
-- the `qkv` module of the tree's Lua 5.4, and the stdlib's Lua files,
-- every folder of stdlib/qkv/ (qkv.nn is qkv/nn/init.lua), into the
-- tree's Lua folder (the Makefile's install-rock).
package = "qkv"
version = "0.1.0-1"
source = { url = "git+file://." }
description = {
  summary = "Tensors and attention primitives for Lua 5.4",
  detailed = "qkv: a C11 tensor runtime (oneDNN, OpenBLAS, its own threads) for writing, exploring and testing attention computations.",
  license = "MIT",
}
dependencies = { "lua >= 5.4, < 5.5" }
build = {
  type = "make",
  build_target = "so",
  build_variables = { CFLAGS = "-O2" },
  install_target = "install-rock",
  install_variables = { INST_LIBDIR = "$(LIBDIR)", INST_LUADIR = "$(LUADIR)" },
}
