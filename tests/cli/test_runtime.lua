-- test_runtime.lua: the qkv executable and the module from stock lua5.4
-- (tensor memory is tests/core/test_memory.lua's).
local lu = require "luaunit"

local exe = arg and arg[-1] or "build/qkv"
local builddir = exe:match("(.*)/") or "."

local shell = dofile("tests/helpers/shell.lua")
local quote, sh = shell.quote, shell.sh
local ROOT = (sh("pwd"):gsub("\n$", ""))


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
  lu.assertStrContains(out, "unrecognized option '--frobnicate'\nusage:")
end

-- a misspelt long option names the nearest of qkv's, as a misspelt key of
-- an options table does; nothing runs
function TestExecutable:testMisspeltOptionNamesTheNearest()
  for bad, near in pairs({["--devic"] = "--device", ["-device"] = "--device",
                          ["--device=cpu"] = "--device", ["--hlep"] = "--help",
                          ["--verison"] = "--version", ["--Help"] = "--help"}) do
    local out, code = sh(quote(exe) .. " " .. bad .. " cpu -e 'print(\"ran\")'")
    lu.assertEquals(code, 1, bad)
    lu.assertStrContains(out, exe .. ": unrecognized option '" .. bad .. "' (did you mean '" ..
                         near .. "'?)\nusage:")
    lu.assertNotStrContains(out, "ran")
  end
  -- too far from any, or one of lua's letters: lua's message alone
  for _, bad in ipairs({"--dev", "--frobnicate", "-x", "-vx"}) do
    local out = sh(quote(exe) .. " " .. bad)
    lu.assertStrContains(out, "unrecognized option '" .. bad .. "'\nusage:")
  end
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
  -- a folder's module (qkv.nn is stdlib/qkv/nn/init.lua): its init chunk
  sh(("mkdir -p %s/luac/qkv/folder %s/folder"):format(quote(bin), quote(lib)))
  write(lib .. "/folder/init.lua", "return 'source'")
  write(bin .. "/luac/qkv/folder/init.luac", string.dump(load("return 'compiled'")), "wb")
  local folder = run:gsub("qkv%.probe", "qkv.folder")
  sh("touch -d '2001-01-01' " .. quote(lib .. "/folder/init.lua"))
  lu.assertEquals((sh(folder)), "compiled")
  sh("touch " .. quote(lib .. "/folder/init.lua"))
  lu.assertEquals((sh(folder)), "source")
  sh("rm -rf " .. quote(root))
end

-- lua5.4's command line (tests/cli/test_lua_testes.lua runs Lua's own
-- tests of it, testes/main.lua): here what qkv adds to it and where it
-- differs on purpose (docs/repl-and-jupyter.md, "qkv as lua")
TestLuaHabits = {}

local function have_lua() return select(2, sh("command -v lua5.4")) == 0 end

-- env words, then the executable with its arguments (each quoted)
local function run(env, ...)
  local words = {}
  for i, a in ipairs{...} do words[i] = quote(a) end
  return sh(env .. " " .. quote(exe) .. " " .. table.concat(words, " "))
end

-- qkv's own options sit among lua's and take effect before any code runs
function TestLuaHabits:testQkvOptionsBesideLuas()
  local out, code = run("", "-W", "--device", "cpu", "-e", "io.write(qkv.default_device())")
  lu.assertEquals({out, code}, {"cpu", 0})
  out, code = run("", "--device")
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "'--device' needs argument\nusage:")
  out, code = run("", "--device", "tpu", "-e", "print('ran')")
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "--device: 'tpu' is not cpu or cuda")
  lu.assertNotStrContains(out, "ran")
end

-- -h is refused as lua refuses it (the usage follows); --help is qkv's
function TestLuaHabits:testDashHIsLuasDashDashHelpIsQkvs()
  local out, code = sh("(" .. quote(exe) .. " -h 2>/dev/null)")
  lu.assertEquals({out, code}, {"", 1})
  out, code = run("", "-h")
  lu.assertStrContains(out, exe .. ": unrecognized option '-h'\nusage: ")
  lu.assertStrContains(out, "--help")
  out, code = sh("(" .. quote(exe) .. " --help 2>/dev/null)")
  lu.assertEquals(code, 0)
  lu.assertStrContains(out, "-l g=mod")
end

-- -v: qkv's version line, then Lua's own (which scripts look for)
function TestLuaHabits:testDashVShowsBothVersions()
  local out, code = run("", "-v", "-e", "print'hello'")
  lu.assertEquals(code, 0)
  lu.assertStrMatches(out, "qkv %d+%.%d+%.%d+ %(Lua 5%.4%.%d+%)\n"
                      .. "Lua 5%.4%.%d+  Copyright %(C%) 1994%-%d+ Lua%.org, PUC%-Rio\nhello\n")
end

-- `qkv test` is the runner: a script named test runs as ./test or after --
function TestLuaHabits:testAScriptNamedTest()
  local dir = shell.tmpdir()
  shell.write(dir .. "/test", "print('the script', ...)")
  local function inside(...)
    local words = {}
    for i, a in ipairs{...} do words[i] = quote(a) end
    return sh("cd " .. quote(dir) .. " && " .. table.concat(words, " "))
  end
  local abs = exe:sub(1, 1) == "/" and exe or ROOT .. "/" .. exe
  lu.assertEquals({inside(abs, "./test", "a")}, {"the script\ta\n", 0})
  lu.assertEquals({inside(abs, "--", "test", "b")}, {"the script\tb\n", 0})
  local out, code = inside(abs, "test")
  lu.assertEquals(code, 2)
  lu.assertStrContains(out, "tests: No such file or directory")
  sh("rm -rf " .. quote(dir))
end

-- LUA_PATH and LUA_CPATH are the paths, as in lua5.4; qkv's own modules
-- (Lua and C) load whatever they say, and under -E too
function TestLuaHabits:testPathsAreLuasQkvsModulesStillLoad()
  local probe = "io.write(package.path, ' ', package.cpath, ' ', type(require 'qkv.nn'),"
                .. " ' ', type(require 'qkv.json'))"
  local out, code = run("LUA_PATH=x LUA_CPATH=y", "-e", probe)
  lu.assertEquals({out, code}, {"x y table table", 0})
  out, code = run("LUA_PATH=x LUA_INIT='error(1)'", "-E", "-e", probe)
  lu.assertEquals(code, 0, out)
  lu.assertNotStrContains(out, "x ")
  lu.assertStrContains(out, " table table")
  out = run("LUA_PATH='a;;'", "-E", "-e", "io.write(package.path)")
  lu.assertEquals(run("LUA_PATH='a;;'", "-e", "io.write(package.path)"), "a;" .. out)
end

-- a failed require lists lua5.4's places, and qkv's only for qkv's names
function TestLuaHabits:testFailedRequireListsWhatLuaLists()
  local env = "LUA_PATH='./?.lua' LUA_CPATH='./?.so'"
  local code = "print(select(2, pcall(require, 'nosuch')))"
  local want = "module 'nosuch' not found:\n\tno field package.preload['nosuch']\n"
               .. "\tno file './nosuch.lua'\n\tno file './nosuch.so'\n"
  lu.assertEquals(run(env, "-e", code), want)
  if have_lua() then
    lu.assertEquals(sh(env .. " lua5.4 -e " .. quote(code)), want)
  end
  local out = run(env, "-e", "print(select(2, pcall(require, 'qkv.nosuch')))")
  lu.assertStrContains(out, "\n\tno file '" .. ROOT .. "/stdlib/qkv/nosuch.lua'\n")
  lu.assertStrContains(out, "\n\tno file './qkv/nosuch.lua'\n")
end

-- an install's layout: PREFIX/bin/qkv finds PREFIX/share/lua/5.4/qkv/*.lua
function TestLuaHabits:testInstalledModulesWhateverLuaPath()
  local root = shell.tmpdir()
  sh(("mkdir -p %s/bin %s/share/lua/5.4/qkv && cp %s %s/bin/qkv"):format(
    quote(root), quote(root), quote(exe), quote(root)))
  shell.write(root .. "/share/lua/5.4/qkv/probe.lua", "return 'installed'")
  local out = sh("LUA_PATH=x LD_LIBRARY_PATH=" .. quote(builddir)
                 .. "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} " .. quote(root .. "/bin/qkv")
                 .. " -e 'io.write((require \"qkv.probe\"))'")
  lu.assertEquals(out, "installed")
  sh("rm -rf " .. quote(root))
end

-- lua5.4 exits with 0 after an error in standard input read as the
-- script by default; qkv exits with 1, as it does for `-` and a file
function TestLuaHabits:testErrorInStandardInputFails()
  local out, code = sh("echo 'error(\"boom\")' | " .. quote(exe))
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "stdin:1: boom")
  lu.assertEquals(select(2, sh("echo 'error(\"boom\")' | " .. quote(exe) .. " -")), 1)
end

TestModule = {}

-- stock Lua is an optional peer (Debian's lua5.4, which `make deps`
-- installs; a bare GPU machine has none)
local function need_lua()
  if select(2, sh("command -v lua5.4")) ~= 0 then lu.skip("needs lua5.4 on PATH") end
end

-- the library's modules are files (qkv.einsum) and folders (qkv.nn is
-- stdlib/qkv/nn/init.lua), found through LUA_PATH as README.md says
function TestModule:testStockLuaRequires()
  need_lua()
  local code_ = "local q = require 'qkv'; print(q.ones(2, 2)); " ..
                "print(getmetatable(q.ones(1)).__name); " ..
                "print(q.nn.Linear(2, 3).weight.shape, type(q.optim.lr_scheduler.StepLR), " ..
                "q.ones(2, 3):flatten().shape, type(q.einsum))"
  -- under make test-asan, qkv.so needs the sanitizer's runtime loaded first
  local rt = os.getenv("QKV_ASAN_PRELOAD")
  local preload = rt and rt ~= "" and "LD_PRELOAD=" .. quote(rt) .. " " or ""
  local out, code = sh(preload .. "LUA_CPATH=" .. quote(builddir .. "/?.so;;") ..
                       " LUA_PATH='stdlib/?.lua;stdlib/?/init.lua;;' lua5.4 -e " .. quote(code_))
  lu.assertEquals(code, 0, out)
  lu.assertEquals(out, "tensor([[1., 1.],\n        [1., 1.]])\nqkv.Tensor\n" ..
                       "(3, 2)\tfunction\t(6,)\tfunction\n")
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
                       " LUA_PATH='stdlib/?.lua;stdlib/?/init.lua;;' lua5.4 -e " .. quote(code_))
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(out, "2 of 2 elements differ; the first at [1] (actual = 1.0, expected = 0.0)")
end

function TestModule:testCheckudataMessage()
  local ok, err = pcall(qkv.matmul, 1, qkv.ones(1))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "qkv.Tensor expected, got number")
end

-- seconds: around a 1.1 s sleep, qkv.clock() moves at least 1.1 and no
-- more than os.time() (whole seconds of the same wall clock) moved, plus
-- the one second its truncation can hide; neither bound is the machine's
-- speed, since both clocks are read around the same interval
function TestModule:testClockIsMonotonicSeconds()
  local t0, a = os.time(), qkv.clock()
  os.execute("sleep 1.1")
  local b, t1 = qkv.clock(), os.time()
  lu.assertEquals(math.type(a), "float")
  lu.assertTrue(b - a >= 1.1, ("clock moved %.6f s"):format(b - a))
  lu.assertTrue(b - a <= t1 - t0 + 1, ("clock moved %.6f s, os.time %d s"):format(b - a, t1 - t0))
  local c = qkv.clock()
  lu.assertTrue(c >= b)
end

os.exit(lu.LuaUnit.run(), true)
