-- test_nested_runs.lua: a LuaUnit run that a test starts inside itself
-- (as LuaUnit's own suite does, to test itself) is that test's business:
-- `qkv test` and a suite run alone count only the file's outermost runs,
-- and the runner hears of their tests alone (a crash, the time limit).
-- Run as a user runs it, on the suites in
-- tests/fixtures/runner/fixtures/nested/.
local lu = require "luaunit"

local EXE = arg and arg[-1] or "build/qkv"
local NESTED = "tests/fixtures/runner/fixtures/nested"

local shell = dofile("tests/helpers/shell.lua")

-- an inner run's tests do not count, are not told to the runner, and do
-- not restart the outer test's time limit
TestNestedRuns = {}

local function nested(name) return NESTED .. "/" .. name end

function TestNestedRuns:testOnlyTheOutermostRunCounts()
  local file = nested"test_nested.lua"
  local out, code, last = shell.exe(EXE, "test", file)
  lu.assertStrContains(out, "Ran 3 tests in ")
  lu.assertStrContains(out, " seconds, 2 successes, 1 failure\n")
  lu.assertEquals({code, last}, {1, "2 passed, 1 failed"})
  -- run alone, the same closing line
  out, code, last = shell.exe(EXE, file)
  lu.assertEquals({code, last}, {1, "2 passed, 1 failed"}, out)
end

function TestNestedRuns:testJUnitHasTheOutermostTests()
  local xml = os.tmpname()
  local out, code = shell.exe(EXE, "test", nested"test_nested.lua", "-o", "junit", "-n", xml)
  local text = shell.read(xml .. ".xml") or ""
  os.remove(xml)
  os.remove(xml .. ".xml")
  lu.assertEquals(code, 1, out)
  local names = {}
  for name in text:gmatch('<testcase classname="[^"]*" name="([^"]*)"') do names[#names + 1] = name end
  lu.assertEquals(names, {"TestNested.testInnerRun", "TestNested.testInnerRunsNest",
                          "TestNested.testOuterFails"})
  lu.assertStrContains(text, 'tests="3" failures="1" errors="0" skipped="0"')
end

-- a crash after an inner run is the outer test's, and the inner tests
-- that ended before it do not count
function TestNestedRuns:testCrashAfterAnInnerRun()
  local file = nested"test_nested_crash.lua"
  local out, code, last = shell.exe(EXE, "test", file)
  lu.assertEquals({code, last}, {1, "1 passed, 1 failed"}, out)
  local how = os.getenv("ASAN_OPTIONS") and "exited with status 1 before the suite ended"
              or "crashed (signal 11, Segmentation fault)"
  lu.assertStrContains(out, "\n" .. file .. ": TestNestedCrash.testB: the process " .. how .. "\n")
end

-- an inner test that never ends runs out of the outer test's time
function TestNestedRuns:testTimeLimitIsTheOuterTests()
  local file = nested"test_nested_timeout.lua"
  -- 2 s: the test after it must pass within the limit on a busy machine too
  local out, code, last = shell.exe(EXE, "test", file, "--timeout", "2")
  lu.assertEquals({code, last}, {1, "1 passed, 1 failed"}, out)
  lu.assertStrContains(out, file .. ": TestNestedTimeout.testInnerLoopsForever: timed out after 2 s, at ")
  lu.assertStrContains(out, "test_nested_timeout.lua:11\n")
end

os.exit(lu.LuaUnit.run(), true)
