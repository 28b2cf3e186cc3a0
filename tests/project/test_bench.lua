-- test_bench.lua: bench/latency.lua compares like with like. Each python
-- equivalent (bench/latency/*.py) prints the numbers its qkv script prints,
-- the generated suite holds 1,000 tests that pass under `qkv test` and, when
-- /usr/bin/python3 has torch and pytest, under pytest; and a --quick run
-- prints every row of its summary with numbers that parse, with the python
-- side of each row exactly when its peers are there (torch for most rows,
-- torch and pytest for the suite's), also with either peer hidden. Timings
-- are never asserted: this machine's load is not the code's fault.
local lu = require "luaunit"

local shell = dofile("tests/helpers/shell.lua")
local quote, sh = shell.quote, shell.sh
local EXE = arg and arg[-1] or "build/qkv"
local PY = "/usr/bin/python3"
local SCRIPTS = {"000_worked_example", "001_self_attention", "001_cross_attention"}

-- why python's torch (or pytest) cannot run, or nil; asked once per file
local missing = {}
local function why_not(what, cmd)
  if missing[what] == nil then
    local out, code = sh(cmd)
    missing[what] = code ~= 0 and (out:match("([^\n]+)\n*$") or "fails") or false
  end
  return missing[what] or nil
end

local function torch_missing() return why_not("torch", PY .. " -c 'import torch'") end
local function pytest_missing() return why_not("pytest", PY .. " -m pytest --version") end

local function need_torch()
  local why = torch_missing()
  if why then lu.skip(PY .. " has no torch: " .. why) end
end

local function need_pytest()
  need_torch()
  local why = pytest_missing()
  if why then lu.skip(PY .. " has no pytest: " .. why) end
end

local function tempdir()
  return (sh("mktemp -d"):gsub("%s+$", ""))
end

-- the numbers in a text, in order: "tensor([[0.5000, -1.], ..." and
-- "torch.Size([2, 3])" or "(2, 3)" alike (the words between are not compared)
local function numbers(text)
  local list, i = {}, 1
  while true do
    local a, b = text:find("%-?%d[%d%.]*", i)
    if not a then return list end
    local e = text:match("^[eE][%-+]?%d+", b + 1)
    if e then b = b + #e end
    list[#list + 1] = assert(tonumber(text:sub(a, b)), text:sub(a, b))
    i = b + 1
  end
end

TestBenchEquivalents = {}

function TestBenchEquivalents:setUp() self.out = tempdir() end
function TestBenchEquivalents:tearDown() os.execute("rm -rf " .. quote(self.out)) end

function TestBenchEquivalents:testNumbersParse()
  lu.assertEquals(numbers("tensor([[0.5000, -1.],\n [2.8284e-01, 4]]) torch.Size([2, 3]) d_k=3"),
                  {0.5, -1, 0.28284, 4, 2, 3, 3})
end

for _, name in ipairs(SCRIPTS) do
  TestBenchEquivalents["test_" .. name] = function(self)
    need_torch()
    local q, qcode = sh("QKV_OUT=" .. quote(self.out) .. " " .. quote(EXE) .. " scripts/"
                        .. name .. ".lua")
    lu.assertEquals(qcode, 0, q)
    local p, pcode = sh(PY .. " bench/latency/" .. name .. ".py")
    lu.assertEquals(pcode, 0, p)
    local a, b = numbers(q), numbers(p)
    lu.assertTrue(#a > 10, "the script prints its numbers:\n" .. q)
    lu.assertEquals(#b, #a, "as many numbers\n--- qkv\n" .. q .. "\n--- python\n" .. p)
    for i = 1, #a do
      lu.assertTrue(math.abs(a[i] - b[i]) <= 1e-4,
                    string.format("number %d: qkv %g, python %g\n--- qkv\n%s\n--- python\n%s",
                                  i, a[i], b[i], q, p))
    end
  end
end

TestBenchSuite = {}

function TestBenchSuite:setUp()
  self.dir = tempdir()
  self.lua, self.py = dofile("bench/latency/gen_suite.lua").write(self.dir, 1000)
end

function TestBenchSuite:tearDown() os.execute("rm -rf " .. quote(self.dir)) end

-- the same 1,000 names, each calling the same check with the same arguments
function TestBenchSuite:testBothFilesHoldTheSameTests()
  local lua, py = {}, {}
  for name, call in shell.read(self.lua):gmatch("function TestSmall%.test(%S+)%(%) (.-) end\n") do
    lua[#lua + 1] = name .. " " .. call
  end
  for name, call in shell.read(self.py):gmatch("\ndef test_(%S+)%(%):\n    ([^\n]+)") do
    py[#py + 1] = name .. " " .. call
  end
  lu.assertEquals(#lua, 1000)
  lu.assertEquals(py, lua)
end

function TestBenchSuite:testQkvPassesAll()
  local out, code = sh(quote(EXE) .. " test " .. quote(self.lua))
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(out, "\n1000 passed, 0 failed\n")
end

function TestBenchSuite:testPytestPassesAll()
  need_pytest()
  local out, code = sh(PY .. " -m pytest -q -p no:cacheprovider " .. quote(self.py))
  lu.assertEquals(code, 0, out)
  lu.assertNotNil(out:find("\n1000 passed in ", 1, true), out)
end

TestBenchSmoke = {}

local ROWS = {
  "start: 000 worked example", "start: 001 self-attention", "start: 001 self-attn, no fig",
  "start: 001 cross-attention", "start: 001 cross-attn, no fig", "start: empty, import torch",
  "step: primitives", "step: qkv.attention", "step: attention, fused",
  "x + 1 (4×4)", "softmax (4×4)", "matmul (4×4)", "project (4×16, 16×16)",
  "scores (4×16, 9×16)", "mask (4×9, causal)", "softmax (4×9)", "heads (1×4×16, 2 heads)",
  "merge (1×2×4×8)", "gelu (4×16)", "align (4×16, 16×16, b)", "align MLP (16-16-16)",
  "attention (4×16, 9×16, 9×16)", "suite of 1,000 small tests",
}

-- the summary's rows by workload: {qkv, torch, ratio, target} as printed
local function summary(out)
  local rows, on = {}, false
  for line in out:gmatch("[^\n]+") do
    if line:match("^== summary") then on = true
    elseif on and not line:match("^%-%-%-") then
      local cells = {}
      for cell in (line .. "  "):gmatch("(%S.-)%s%s+") do cells[#cells + 1] = cell end
      if #cells == 5 then rows[cells[1]] = {table.unpack(cells, 2)} end
    end
  end
  return rows
end

local function check_time(cell, what)
  -- µ is two bytes: no pattern class for it
  local v, unit = cell:match("^([%d%.]+) (%S+)$")
  lu.assertTrue(tonumber(v) ~= nil and (unit == "ms" or unit == "µs"), what .. ": " .. cell)
end

local SUITE_ROW = ROWS[#ROWS]

-- python: whether the row's python side ran (rows of torch; the suite's
-- needs pytest too)
local function check_row(label, r, python)
  lu.assertNotNil(r, label .. " is in the summary")
  check_time(r[1], label .. " qkv")
  if python then
    check_time(r[2], label .. " torch")
    lu.assertNotNil(tonumber(r[3]:match("^([%d%.]+)×$") or ""), label .. " ratio: " .. r[3])
  else
    lu.assertEquals({r[2], r[3]}, {"-", "-"}, label)
  end
  local t, unit, verdict = r[4]:match("^≤ ([%d%.]+) (%S+): (%a+)$")
  lu.assertTrue(r[4] == "-" or (tonumber(t) and (unit == "ms" or unit == "µs")
                                and (verdict == "yes" or verdict == "no")),
                label .. " target: " .. r[4])
end

-- the rows of a summary, each with the python side when its peers are there
local function check_rows(rows, labels, torch, pytest)
  for _, label in ipairs(labels) do
    check_row(label, rows[label], torch and (label ~= SUITE_ROW or pytest))
  end
end

-- every section, torch's side included when it is there
function TestBenchSmoke:testQuickRunPrintsEveryRow()
  local out, code = sh(quote(EXE) .. " bench/latency.lua --quick")
  lu.assertEquals(code, 0, out)
  check_rows(summary(out), ROWS, not torch_missing(), not pytest_missing())
  lu.assertStrContains(out, "start: the 001 scripts also draw their PNG figure")
end

-- "PYTHONPATH=dir " where dir holds modules that shadow the named ones
-- (PYTHONPATH comes before site-packages), so that /usr/bin/python3 runs
-- as if they were not installed
local function hiding(self, modules)
  for _, m in ipairs(modules) do
    local f = assert(io.open(self.dir .. "/" .. m .. ".py", "w"))
    f:write('raise ImportError("' .. m .. ' hidden by tests/project/test_bench.lua")\n')
    f:close()
  end
  return "PYTHONPATH=" .. quote(self.dir) .. " "
end

function TestBenchSmoke:setUp() self.dir = tempdir() end
function TestBenchSmoke:tearDown() os.execute("rm -rf " .. quote(self.dir)) end

local STEP_AND_SUITE = {ROWS[7], ROWS[8], ROWS[9], SUITE_ROW}

-- torch without pytest (Debian's python3-torch alone): the suite's row has
-- no python side, the others have it
function TestBenchSmoke:testPytestHidden()
  local out, code = sh(hiding(self, {"pytest"}) .. quote(EXE) .. " bench/latency.lua step suite --quick")
  lu.assertEquals(code, 0, out)
  check_rows(summary(out), STEP_AND_SUITE, not torch_missing(), false)
  lu.assertStrContains(out, "pytest side skipped: ")
end

-- pytest without torch: no python side anywhere, and the run says why
function TestBenchSmoke:testTorchHidden()
  local out, code = sh(hiding(self, {"torch"}) .. quote(EXE) .. " bench/latency.lua step suite --quick")
  lu.assertEquals(code, 0, out)
  check_rows(summary(out), STEP_AND_SUITE, false, not pytest_missing())
  lu.assertStrContains(out, "cannot import torch: ")
end

-- one section, without torch and without hyperfine: the fallbacks
function TestBenchSmoke:testOneSectionWithoutPeers()
  local out, code = sh(quote(EXE) .. " bench/latency.lua startup --quick --no-torch --no-hyperfine")
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(out, "by a loop of os.execute")
  local rows = summary(out)
  check_rows(rows, {table.unpack(ROWS, 1, 6)}, false, false)
  lu.assertNil(rows[ROWS[7]], "only the start-up section ran")
end

function TestBenchSmoke:testBadArgument()
  local out, code = sh(quote(EXE) .. " bench/latency.lua nonsense")
  lu.assertEquals(code, 2)
  lu.assertStrContains(out, "usage: ")
end

os.exit(lu.LuaUnit.run(), true)
