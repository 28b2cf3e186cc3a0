-- test_make.lua: the Makefile does what the documents say of it. `make`
-- builds everything the suites need (so `build/qkv test tests/` after it
-- is `make test`'s main pass), and the packages `make deps` and
-- `make bench-deps` install are the ones README.md and docs/contributing.md
-- list. Read from make itself (a dry run, and --eval to print a variable),
-- not by parsing the Makefile here.
local lu = require "luaunit"

local shell = dofile("tests/helpers/shell.lua")
local documents = dofile("tests/helpers/documents.lua")
local quote, sh = shell.quote, shell.sh

local function need_make()
  if select(2, sh("command -v make")) ~= 0 then lu.skip("make is not installed") end
  if not io.open("Makefile") then lu.skip("no Makefile in " .. shell.sh("pwd")) end
end

-- make as a user runs it: not a sub-make of the make that may be running
-- these suites (`make test`, `make test-asan`), whose jobserver it would
-- otherwise find unavailable, with a warning in its output
local MAKE = "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make"

-- the words of a Makefile variable, as make expands it
local function variable(name)
  local out, code = sh(MAKE .. " -s --no-print-directory --eval "
                       .. quote("qkv-print-var: ; @echo $(" .. name .. ")") .. " qkv-print-var")
  lu.assertEquals(code, 0, out)
  local words = {}
  for w in out:gmatch("%S+") do words[#words + 1] = w end
  return words
end

local function words(s)
  local list = {}
  for w in s:gmatch("[^%s,]+") do list[#list + 1] = w end
  return list
end

TestMake = {}

-- a dry run into an empty build folder lists every file `make` would make
function TestMake:testDefaultTargetBuildsWhatTheSuitesNeed()
  need_make()
  local dir = (sh("mktemp -d"):gsub("%s+$", ""))
  local out, code = sh(MAKE .. " -n --no-print-directory BUILD=" .. quote(dir .. "/b"))
  os.execute("rm -rf " .. quote(dir))
  lu.assertEquals(code, 0, out)
  for _, f in ipairs{"qkv", "qkv.so", "lib/qkv/cairo.so", "lib/qkv/zip.so",
                     "luac/qkv/test.luac", "ptydrive"} do
    lu.assertStrContains(out, "-o " .. dir .. "/b/" .. f .. " ", false, f .. " is built by `make`")
  end
end

-- the CUDA backend: built as qkv_cuda.so when make finds nvcc, never with
-- CUDA=0, and make says which
function TestMake:testCudaBackendIsBuiltWhenNvccIsThere()
  need_make()
  local dir = (sh("mktemp -d"):gsub("%s+$", ""))
  local on, c1 = sh(MAKE .. " -n --no-print-directory BUILD=" .. quote(dir .. "/b"))
  local off, c2 = sh(MAKE .. " -n --no-print-directory CUDA=0 BUILD=" .. quote(dir .. "/b"))
  os.execute("rm -rf " .. quote(dir))
  lu.assertEquals({c1, c2}, {0, 0}, on .. off)
  lu.assertNotStrContains(off, "qkv_cuda.so ")
  lu.assertNotStrContains(off, "-gencode")
  lu.assertStrContains(off, "CUDA backend not built")
  if #variable("NVCC") == 0 then
    lu.assertStrContains(on, "CUDA backend not built")
  else
    lu.assertStrContains(on, "-o " .. dir .. "/b/qkv_cuda.so ")
    lu.assertStrContains(on, "arch=compute_90a,code=sm_90a")   -- Hopper's wgmma (wgmma.cuh)
    lu.assertStrContains(on, "arch=compute_90,code=compute_90")  -- PTX for later GPUs
    lu.assertStrContains(on, "CUDA backend built")
  end
end

-- the documents' lists of packages are DEPS (README.md's set-up) and
-- BENCH_DEPS (docs/contributing.md's targets), in their order; each list
-- is written once, in whichever document (tests/helpers/documents.lua)
function TestMake:testDocumentsListThePackages()
  need_make()
  local docs = documents.all("")
  for var, pattern in pairs{
      DEPS = "does nothing when all are there:\n\n(.-)\n\n",
      BENCH_DEPS = "`make bench%-deps`%s+installs their optional peers: ([^.]*)%."} do
    local found = {}
    for _, d in ipairs(docs) do
      local list = d.text:match(pattern)
      if list then
        found[#found + 1] = d.path
        lu.assertEquals(words(list), variable(var), d.path .. "'s list of " .. var)
      end
    end
    lu.assertEquals(#found, 1, "the list of " .. var .. " is in " .. #found ..
                    " documents: " .. table.concat(found, ", "))
  end
end

-- make test's last line: tests/tools/total.lua sums the passes' closing
-- lines from the log that tests/tools/passes.sh writes, names every pass
-- that failed, and fails when one did
local function total(log)
  local dir = (sh("mktemp -d"):gsub("%s+$", ""))
  local f = assert(io.open(dir .. "/log", "w")); f:write(log); f:close()
  local out, code = sh(quote(arg[-1]) .. " tests/tools/total.lua " .. quote(dir .. "/log"))
  os.execute("rm -rf " .. quote(dir))
  return out, code
end

local function pass(name, body, rc)
  return "== pass " .. name .. ": build/qkv test tests/\n" .. body
         .. (rc and "== pass " .. name .. ": exit " .. rc .. "\n" or "")
end

function TestMake:testTotalSumsThePasses()
  local ok = pass("suites", "== tests/core/test_math.lua\nRan 3 tests\n  7 passed, 0 failed\n"
                  .. "1064 passed, 0 failed, 38 skipped\n", 0)
             .. pass("device", "1096 passed, 0 failed, 6 skipped\n", 0)
             .. pass("cudasim", "36 passed, 0 failed\n", 0)
  local out, code = total(ok)
  lu.assertEquals(out, "all 3 passes: 2196 passed, 0 failed, 44 skipped\n")
  lu.assertEquals(code, 0)
end

-- a failing pass does not hide the ones after it: each is summed, and the
-- line names each that failed and how
function TestMake:testTotalNamesEveryFailedPass()
  local log = pass("suites", "1060 passed, 4 failed, 38 skipped\n", 1)
              .. pass("device", "1096 passed, 0 failed, 6 skipped\n", 0)
              .. pass("cudasim", "make: *** [build/simcuda.so] Error 1\n", 2)
              .. pass("cudasim-warps", "36 passed, 0 failed\n", 3)
              .. pass("late", "5 passed, 0 failed\n")
  local out, code = total(log)
  lu.assertEquals(out, "all 5 passes: 2197 passed, 4 failed, 44 skipped; failed: suites (4 failed), "
                  .. "cudasim (exit 2, no closing line), cudasim-warps (exit 3), late (did not finish)\n")
  lu.assertEquals(code, 1)
  -- a failed test fails the total even when its pass said 0
  lu.assertEquals(select(2, total(pass("suites", "1 passed, 1 failed\n", 0))), 1)
  lu.assertEquals({total("")}, {"all 0 passes: 0 passed, 0 failed, 0 skipped; failed: no pass ran\n", 1})
end

-- each failed test that LuaUnit listed is named above the closing line, by
-- pass, file and test, with its message's first line: the tail of a log
-- (all that CI may show) says what failed
function TestMake:testTotalNamesTheFailedTests()
  local body = "== tests/stdlib/test_a.lua\n..F\nFailed tests:\n-------------\n"
               .. "1) TestA.testCut\ntests/stdlib/test_a.lua:152: Found the not expected pattern\n"
               .. "\"hung\"\nRan 3 tests\n2 passed, 1 failed\n"
               .. "== tests/stdlib/test_b.lua\nE\nTests with errors:\n------------------\n"
               .. "1) TestB.testBoom\nboom\nstack traceback:\n0 passed, 1 failed\n"
  local out, code = total(pass("suites", "3 passed, 0 failed\n", 0) .. pass("device", body, 1))
  lu.assertEquals(out, "failed in device: tests/stdlib/test_a.lua TestA.testCut: "
                  .. "tests/stdlib/test_a.lua:152: Found the not expected pattern\n"
                  .. "failed in device: tests/stdlib/test_b.lua TestB.testBoom: boom\n"
                  .. "all 2 passes: 3 passed, 1 failed, 0 skipped; failed: device (1 failed)\n")
  lu.assertEquals(code, 1)
end

-- passes.sh runs every pass it is given even when one before it fails, and
-- exits 1 then; an unknown name is refused
function TestMake:testPassesRunAfterAFailure()
  local dir = (sh("mktemp -d"):gsub("%s+$", ""))
  -- a stand-in qkv: "test" fails for the plain suites, passes for the rest
  local f = assert(io.open(dir .. "/qkv", "w"))
  f:write('#!/bin/sh\ncase "$1" in -e) exit 1;; esac\n'
          .. 'case "$*" in *--device*) ;; *) echo "1 passed, 1 failed"; exit 1;; esac\n'
          .. 'echo "2 passed, 0 failed"\n')
  f:close()
  os.execute("chmod +x " .. quote(dir .. "/qkv"))
  local out, code = sh("BUILD=" .. quote(dir) .. " sh tests/tools/passes.sh suites device 2>&1")
  lu.assertEquals(code, 1, out)
  -- each test may run 600 s: a hang catcher, whatever the machine's load
  lu.assertStrContains(out, "== pass suites: " .. dir .. "/qkv test --timeout 600 tests/\n")
  lu.assertStrContains(out, "== pass suites: exit 1\n")
  lu.assertStrContains(out, "== pass device: env QKV_CUDA_PLUGIN=" .. dir .. "/fakecuda.so")
  lu.assertStrContains(out, "2 passed, 0 failed\n== pass device: exit 0\n")
  out, code = sh("BUILD=" .. quote(dir) .. " sh tests/tools/passes.sh gpu 2>&1")
  lu.assertEquals(code, 2)
  lu.assertStrContains(out, "no pass 'gpu'")
  os.execute("rm -rf " .. quote(dir))
end

os.exit(lu.LuaUnit.run(), true)
