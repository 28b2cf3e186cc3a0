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

-- the words of a Makefile variable, as make expands it
local function variable(name)
  local out, code = sh("make -s --no-print-directory --eval "
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
  local out, code = sh("make -n --no-print-directory BUILD=" .. quote(dir .. "/b"))
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
  local on, c1 = sh("make -n --no-print-directory BUILD=" .. quote(dir .. "/b"))
  local off, c2 = sh("make -n --no-print-directory CUDA=0 BUILD=" .. quote(dir .. "/b"))
  os.execute("rm -rf " .. quote(dir))
  lu.assertEquals({c1, c2}, {0, 0}, on .. off)
  lu.assertNotStrContains(off, "qkv_cuda.so ")
  lu.assertNotStrContains(off, "-gencode")
  lu.assertStrContains(off, "CUDA backend not built")
  if #variable("NVCC") == 0 then
    lu.assertStrContains(on, "CUDA backend not built")
  else
    lu.assertStrContains(on, "-o " .. dir .. "/b/qkv_cuda.so ")
    lu.assertStrContains(on, "arch=compute_90,code=sm_90")
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
-- lines from the log, and fails when a pass failed or a test did
function TestMake:testTotalSumsThePasses()
  local dir = (sh("mktemp -d"):gsub("%s+$", ""))
  local function total(log, status)
    local f = assert(io.open(dir .. "/log", "w")); f:write(log); f:close()
    f = assert(io.open(dir .. "/status", "w")); f:write(status, "\n"); f:close()
    return sh(quote(arg[-1]) .. " tests/tools/total.lua " .. quote(dir .. "/log") .. " "
              .. quote(dir .. "/status"))
  end
  local log = "== tests/core/test_math.lua\nRan 3 tests\n1064 passed, 0 failed, 38 skipped\n"
              .. "  7 passed, 0 failed\n1096 passed, 0 failed, 6 skipped\n36 passed, 0 failed\n"
  local out, code = total(log, "0")
  lu.assertEquals(out, "all 3 passes: 2196 passed, 0 failed, 44 skipped\n")
  lu.assertEquals(code, 0)
  out, code = total(log .. "35 passed, 1 failed\n", "2")
  lu.assertEquals(out, "all 4 passes: 2231 passed, 1 failed, 44 skipped (a pass failed: it "
                  .. "stopped there)\n")
  lu.assertEquals(code, 1)
  lu.assertEquals(select(2, total(log .. "1 passed, 1 failed\n", "0")), 1)
  os.execute("rm -rf " .. quote(dir))
end

os.exit(lu.LuaUnit.run(), true)
