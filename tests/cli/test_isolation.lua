-- test_isolation.lua: `qkv test` runs each file in a process of its own
-- (vm/cli/testrun.c, vm/cli/testchild.c): a crash or a test that never ends fails,
-- naming the file and the test, and the run goes on; --timeout; Ctrl-C
-- that reaches the runner alone. Run as a user runs it, on the suites in
-- tests/fixtures/runner/fixtures/ (test_runner.lua has the rest of `qkv test`).
local lu = require "luaunit"

local EXE = arg and arg[-1] or "build/qkv"
local FIX = "tests/fixtures/runner/fixtures"

local shell = dofile("tests/helpers/shell.lua")
local quote = shell.quote

-- `qkv test <args>`; returns the output (stdout and stderr), the exit
-- status and the last line
local function run(...) return shell.exe(EXE, "test", ...) end

local ran, tmpdir, writefile = shell.ran, shell.tmpdir, shell.write


-- each file runs in a process of its own: a crash or a test that never
-- ends fails, naming the file and the test, and the run goes on
TestIsolation = {}

local ISO = FIX .. "/isolation"
local function iso(name) return ISO .. "/" .. name end

-- the output's lines that contain s
local function lines(out, s)
  local t = {}
  for line in out:gmatch("[^\n]+") do
    if line:find(s, 1, true) then t[#t + 1] = line end
  end
  return t
end

-- a crash (SIGSEGV), a Lua loop, a C loop no hook reaches, then a suite
-- that passes: 1+1, 2+1, 1+1 and 1 passed and failed.  The limit is 2 s:
-- the tests that pass, and the crash (a `kill` started by popen), must be
-- done within it on a busy machine too (0.3 s was not always enough)
function TestIsolation:testCrashAndTimeoutsAndTheRunGoesOn()
  local out, code, last = run(ISO, "--timeout", "2")
  lu.assertEquals(code, 1)
  lu.assertEquals(last, "5 passed, 3 failed")
  lu.assertEquals(ran(out), {iso"test_1_crash.lua", iso"test_2_loop.lua",
                             iso"test_3_cloop.lua", iso"test_4_after.lua"})
  -- the crash: on a line of its own, after LuaUnit's dot for testA (under
  -- ASan, its handler turns SIGSEGV into a report and exit status 1)
  local how = os.getenv("ASAN_OPTIONS") and "exited with status 1 before the suite ended"
              or "crashed (signal 11, Segmentation fault)"
  lu.assertEquals(lines(out, "TestCrash.testB"),
                  {iso"test_1_crash.lua" .. ": TestCrash.testB: the process " .. how})
  lu.assertNotStrContains(out, "ran after the crash")
  lu.assertNotStrContains(out, "still alive")
  -- the Lua loop: the test errs, and the one after it runs
  lu.assertStrContains(out, iso"test_2_loop.lua" .. ": TestLoop.testForever: timed out after 2 s, at "
                            .. iso"test_2_loop.lua" .. ":8\n")
  lu.assertStrContains(out, "Ran 3 tests in")
  -- the C loop: killed after the limit and its grace period
  lu.assertEquals(lines(out, "TestCLoop.testHang"),
                  {iso"test_3_cloop.lua" .. ": TestCLoop.testHang: timed out after 2 s, "
                   .. "and was killed 2 s later"})
end

-- a crash outside any test (the file's top level), after what it printed
function TestIsolation:testCrashOutsideTests()
  local d = tmpdir()
  writefile(d .. "/test_top.lua", [[
print("before the crash")
local pid = io.open("/proc/self/stat"):read("n")
io.popen("kill -ABRT " .. pid):close()
for _ = 1, 1e9 do end
]])
  writefile(d .. "/test_next.lua", "function testNext() end\n")
  local out, code, last = run(d .. "/test_top.lua", d .. "/test_next.lua")
  os.execute("rm -rf " .. quote(d))
  lu.assertEquals({code, last}, {1, "1 passed, 1 failed"})
  lu.assertStrContains(out, "before the crash\n\n" .. d .. "/test_top.lua: (outside any test): "
                       .. "the process crashed (signal 6, Aborted)\n")
end

-- a loop inside a coroutine times out as one in the test does (each
-- thread carries the time-out's hook from its start), and the tests after
-- it run: the hook reached the main thread alone, the child was killed, and
-- the file's later tests were lost unreported
function TestIsolation:testLoopsInCoroutinesTimeOut()
  local co = FIX .. "/coloop/test_coloop.lua"
  local out, code, last = run(co, "--timeout", "2")
  lu.assertEquals({code, last}, {1, "1 passed, 3 failed"}, out)
  lu.assertStrContains(out, co .. ": TestCo.testA_loopInAWrap: timed out after 2 s, at " .. co .. ":9")
  lu.assertStrContains(out, co .. ": TestCo.testB_loopInACoroutineMadeAtLoad: timed out after 2 s, at "
                            .. co .. ":")
  lu.assertStrContains(out, "a failure after the loops")
  lu.assertNotStrContains(out, "was killed")
end

-- --timeout 0 is no limit: a test waiting 0.6 s fails under 0.3 s only
function TestIsolation:testTimeoutZeroIsNone()
  local sleep = FIX .. "/sleep/test_sleep.lua"
  local out, code, last = run(sleep, "--timeout", "0.3")
  lu.assertEquals({code, last}, {1, "0 passed, 1 failed"})
  lu.assertStrContains(out, sleep .. ": testSleeps: timed out after 0.3 s, at " .. sleep .. ":4\n")
  out, code, last = run(sleep, "--timeout", "0")
  lu.assertEquals({code, last}, {0, "1 passed, 0 failed"}, out)
end

-- Ctrl-C sent to the runner alone (not to its process group, as a terminal
-- does): it is passed on to the file's process, whose test stops. The
-- signal goes once the test says it is looping, however long the start
-- took; `timeout 120` only ends a run that hangs.
function TestIsolation:testCtrlCToTheRunnerAlone()
  local cmd = ([[
out=$(mktemp) || exit 2
%s test %s --timeout 0 >"$out" 2>&1 & pid=$!
while kill -0 $pid 2>/dev/null && ! grep -q looping "$out"; do sleep 0.05; done
kill -INT $pid; wait $pid; echo "status $?"; cat "$out"; rm -f "$out"]])
    :format(quote(EXE), quote(FIX .. "/ctrlc/test_ctrlc.lua"))
  local out = shell.sh("timeout 120 sh -c " .. quote(cmd))
  lu.assertStrContains(out, "status 130\n")
  lu.assertStrContains(out, "1 passed, 1 failed\n")
  lu.assertStrContains(out, "interrupted")
  lu.assertNotStrContains(out, "timed out")
end

os.exit(lu.LuaUnit.run(), true)
