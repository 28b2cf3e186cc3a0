-- test_runtime.lua: the qkv executable and the module from stock lua5.4
-- (tensor memory is tests/core/test_memory.lua's).
local lu = require "luaunit"

local exe = arg and arg[-1] or "build/qkv"
local builddir = exe:match("(.*)/") or "."

local shell = dofile("tests/helpers/shell.lua")
local quote, sh = shell.quote, shell.sh


local function tmpfile(text)
  local name = os.tmpname()
  local f = assert(io.open(name, "w"))
  f:write(text)
  f:close()
  return name
end

TestExecutable = {}

function TestExecutable:testHelp()
  local out, code = sh(quote(exe) .. " --help")
  lu.assertEquals(code, 0)
  lu.assertStrContains(out, "usage:")
  lu.assertStrContains(out, "-e code")
end

function TestExecutable:testVersion()
  local out, code = sh(quote(exe) .. " --version")
  lu.assertEquals(code, 0)
  lu.assertStrMatches(out, "qkv %d+%.%d+%.%d+ %(Lua 5%.4%.%d+%)\n")
end

function TestExecutable:testEvalUsesGlobalQkv()
  local out, code = sh(quote(exe) .. " -e 'print(qkv.ones(2, 2):sum():item())'")
  lu.assertEquals(code, 0)
  lu.assertEquals(out, "4.0\n")
end

function TestExecutable:testRequireGivesTheSameModule()
  local out = sh(quote(exe) .. " -e 'print(require(\"qkv\") == qkv)'")
  lu.assertEquals(out, "true\n")
end

function TestExecutable:testScriptArgs()
  local f = tmpfile("print(arg[0], arg[1], arg[2], #arg, select('#', ...), ...)")
  local out, code = sh(quote(exe) .. " " .. f .. " a 'b c'")
  os.remove(f)
  lu.assertEquals(code, 0)
  lu.assertEquals(out, f .. "\ta\tb c\t2\t2\ta\tb c\n")
end

-- help is a global in scripts and suites, as in the REPL: qkv.help
function TestExecutable:testHelpIsAGlobal()
  local out, code = sh(quote(exe) .. " -e 'help(qkv.softmax)'")
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(out, "qkv.softmax(x [, dim])\n")
  local f = tmpfile("help('softmax'); help(qkv.nn.Linear)")
  local out2, code2 = sh(quote(exe) .. " " .. f)
  os.remove(f)
  lu.assertEquals(code2, 0, out2)
  lu.assertStrContains(out2, "qkv.softmax(x [, dim])\n")
  lu.assertStrContains(out2, "qkv.nn.Linear(d_in, d_out")
  lu.assertEquals(type(help), "function")       -- this suite's state
  lu.assertEquals(require("qkv.doc").text(help), require("qkv.doc").text(qkv.help))
end

function TestExecutable:testErrorPrintsTracebackAndFails()
  local f = tmpfile("local function inner() qkv.matmul(qkv.ones(2, 3), qkv.ones(4, 5)) end\ninner()\n")
  local out, code = sh(quote(exe) .. " " .. f)
  os.remove(f)
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "matmul: (2, 3) @ (4, 5): inner dims 3 and 4 differ")
  lu.assertStrContains(out, "stack traceback:")
  lu.assertStrContains(out, "in local 'inner'")
end

function TestExecutable:testSyntaxErrorFails()
  local f = tmpfile("x = = 1")
  local out, code = sh(quote(exe) .. " " .. f)
  os.remove(f)
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "unexpected symbol")
end

function TestExecutable:testMissingScriptFails()
  local out, code = sh(quote(exe) .. " /nonexistent/script.lua")
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "cannot open /nonexistent/script.lua")
end

function TestExecutable:testUnknownOptionFails()
  local out, code = sh(quote(exe) .. " --frobnicate")
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "unrecognized option '--frobnicate'")
end

function TestExecutable:testStdin()
  local out, code = sh("echo 'print(qkv.eye(2):sum():item())' | " .. quote(exe))
  lu.assertEquals(code, 0)
  lu.assertEquals(out, "2.0\n")
end

-- OpenBLAS is mapped only when a product needs it (vm/cpu/blas.c): a
-- script of small products never loads it, a bigger product does, and
-- both give the right numbers
function TestExecutable:testOpenBlasLoadsOnFirstUse()
  local probe = [[
local function blas()
  return (io.open("/proc/self/maps"):read("a"):find("openblas", 1, true)) ~= nil
end
local a = qkv.ones(8, 8)
local small = a:matmul(a)                        -- 512 multiply-adds: loops
io.write(tostring(blas()), " ", small[1][1], " ")
local b = qkv.ones(8, 9)
local big = a:matmul(b)                          -- 576: OpenBLAS
io.write(tostring(blas()), " ", big[8][9], "\n")
]]
  if not io.open("/proc/self/maps") then lu.skip("no /proc/self/maps") end
  local path = tmpfile(probe)
  local out, code = sh(quote(exe) .. " " .. quote(path))
  os.remove(path)
  lu.assertEquals(code, 0, out)
  lu.assertEquals(out, "false 8 true 8\n")
end

-- the executable loads the stdlib precompiled by make (build/luac) only
-- when that chunk is not older than its source: a copy of the executable
-- in a folder laid out like build/ and stdlib/ shows which one it ran
function TestExecutable:testPrecompiledStdlibOnlyWhenFresh()
  local root = os.tmpname()
  os.remove(root)
  local bin, lib = root .. "/build", root .. "/stdlib/qkv"
  lu.assertEquals(select(2, sh(("mkdir -p %s/luac/qkv %s && cp %s %s/qkv"):format(
    quote(bin), quote(lib), quote(exe), quote(bin)))), 0)
  local function write(path, text, mode)
    local f = assert(io.open(path, mode or "w"))
    f:write(text)
    f:close()
  end
  write(lib .. "/probe.lua", "return 'source'")
  write(bin .. "/luac/qkv/probe.luac", string.dump(load("return 'compiled'")), "wb")
  -- the copy finds the libraries beside the original (make gpu-bundle's
  -- executable finds them through its $ORIGIN rpath)
  local run = "LD_LIBRARY_PATH=" .. quote(builddir) .. "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} " ..
              quote(bin .. "/qkv") .. " -e 'io.write((require \"qkv.probe\"))'"
  -- the source older than its chunk: the chunk
  sh("touch -d '2001-01-01' " .. quote(lib .. "/probe.lua"))
  lu.assertEquals((sh(run)), "compiled")
  -- the source edited since: the source, never the stale chunk
  sh("touch " .. quote(lib .. "/probe.lua"))
  lu.assertEquals((sh(run)), "source")
  -- no chunk: the source
  os.remove(bin .. "/luac/qkv/probe.luac")
  lu.assertEquals((sh(run)), "source")
  sh("rm -rf " .. quote(root))
end

TestModule = {}

-- stock Lua is an optional peer (Debian's lua5.4, which `make deps`
-- installs; a bare GPU machine has none)
local function need_lua()
  if select(2, sh("command -v lua5.4")) ~= 0 then lu.skip("needs lua5.4 on PATH") end
end

function TestModule:testStockLuaRequires()
  need_lua()
  local code_ = "local q = require 'qkv'; print(q.ones(2, 2)); " ..
                "print(getmetatable(q.ones(1)).__name)"
  -- under make test-asan, qkv.so needs the sanitizer's runtime loaded first
  local rt = os.getenv("QKV_ASAN_PRELOAD")
  local preload = rt and rt ~= "" and "LD_PRELOAD=" .. quote(rt) .. " " or ""
  local out, code = sh(preload .. "LUA_CPATH=" .. quote(builddir .. "/?.so;;") ..
                       " lua5.4 -e " .. quote(code_))
  lu.assertEquals(code, 0)
  lu.assertEquals(out, "tensor([[1., 1.],\n        [1., 1.]])\nqkv.Tensor\n")
end

-- qkv.test loaded from stock Lua teaches LuaUnit tensors there too
function TestModule:testStockLuaAssertEquals()
  need_lua()
  local code_ = "local q = require 'qkv'; local lu = require 'luaunit'; require 'qkv.test'; " ..
                "lu.assertEquals(q.ones(2), q.ones(2)); " ..
                "print(select(2, pcall(lu.assertEquals, q.ones(2), q.zeros(2))))"
  local rt = os.getenv("QKV_ASAN_PRELOAD")
  local preload = rt and rt ~= "" and "LD_PRELOAD=" .. quote(rt) .. " " or ""
  local out, code = sh(preload .. "LUA_CPATH=" .. quote(builddir .. "/?.so;;") ..
                       " LUA_PATH='stdlib/?.lua;;' lua5.4 -e " .. quote(code_))
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(out, "2 of 2 elements differ; the first at [1] (actual = 1.0, expected = 0.0)")
end

function TestModule:testCheckudataMessage()
  local ok, err = pcall(qkv.matmul, 1, qkv.ones(1))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "qkv.Tensor expected, got number")
end

function TestModule:testClockIsMonotonicSeconds()
  local a = qkv.clock()
  local x = 0
  for i = 1, 1e5 do x = x + i end
  local b = qkv.clock()
  lu.assertTrue(b > a)
  lu.assertTrue(b - a < 5)
  lu.assertEquals(math.type(a), "float")
end

os.exit(lu.LuaUnit.run(), true)
