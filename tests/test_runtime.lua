-- test_runtime.lua: the qkv executable and the module from stock lua5.4
-- (tensor memory is tests/test_memory.lua's).
local lu = require "luaunit"

local exe = arg and arg[-1] or "build/qkv"
local builddir = exe:match("(.*)/") or "."

local shell = dofile("tests/shell.lua")
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

TestModule = {}

function TestModule:testStockLuaRequires()
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
