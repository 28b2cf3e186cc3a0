-- test_runtime.lua: the qkv executable, the module from stock lua5.4,
-- and tensor memory (collector accounting, __gc/__close).
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
  local out, code = sh("LUA_CPATH=" .. quote(builddir .. "/?.so;;") ..
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

TestMemory = {}

local function rss_mb()
  local f = assert(io.open("/proc/self/statm"))
  local _, resident = f:read("n", "n")
  f:close()
  return resident * 4096 / 2^20
end

-- 10^6 temporaries of 1000 floats: without accounting, Lua sees only the
-- small headers and lets gigabytes of garbage pile up behind a big heap
function TestMemory:testTemporariesStayFlat()
  local ballast = {}
  for i = 1, 1e6 do ballast[i] = i + 0.5 end      -- a 16 MB Lua heap
  local x = qkv.ones(1000)
  collectgarbage()
  local start = rss_mb()
  for _ = 1, 1e5 do local _ = x * 2 end           -- reach the steady state
  local warm, peak = rss_mb(), 0
  for i = 1, 1e6 do
    local y = x * 2
    if i % 1e4 == 0 then peak = math.max(peak, rss_mb()) end
  end
  lu.assertTrue(#ballast == 1e6)
  lu.assertTrue(peak - warm < 8, string.format("grew from %.1f to %.1f MB", warm, peak))
  lu.assertTrue(peak - start < 64, string.format("%.1f MB above the start", peak - start))
end

function TestMemory:testMemoryCountsLiveBytes()
  collectgarbage()
  local base = qkv.memory()
  local x = qkv.zeros(1000, "float64")
  lu.assertEquals(qkv.memory() - base, 8000)
  local v = x:view(10, 100)                   -- a view holds no new bytes
  lu.assertEquals(qkv.memory() - base, 8000)
  x, v = nil, nil
  collectgarbage()
  lu.assertEquals(qkv.memory(), base)
end

function TestMemory:testCloseFreesAndIsSafeTwice()
  collectgarbage()
  local base = qkv.memory()
  local y
  do
    local x <close> = qkv.ones(256)
    y = x
    lu.assertEquals(qkv.memory() - base, 1024)
  end
  lu.assertEquals(qkv.memory(), base)
  local mt = getmetatable(y)
  mt.__close(y)                               -- a second time does nothing
  mt.__gc(y)
  lu.assertEquals(tostring(y), "tensor(<closed>)")
  local ok, err = pcall(function() return y:sum() end)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "tensor was closed")
end

function TestMemory:testViewKeepsStorageAlive()
  local v
  do
    local x <close> = qkv.arange(6)
    v = x:view(2, 3)
  end
  collectgarbage()
  lu.assertEquals(v:tolist(), {{0, 1, 2}, {3, 4, 5}})
end

function TestMemory:testHugeAllocationIsAnError()
  local ok, err = pcall(qkv.zeros, 1e12)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "zeros: out of memory: tried to allocate 4000000000000 bytes")
end

os.exit(lu.LuaUnit.run(), true)
