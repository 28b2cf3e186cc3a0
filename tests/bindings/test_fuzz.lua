-- test_fuzz.lua: the API fuzzer (tests/fuzz/fuzz_api.lua): a short run as
-- CI's, its checker on outcomes made up to break each rule, the whole
-- fuzzer on fake functions that break them (tests/fuzz/fakes.lua); what it
-- found is kept in tests/bindings/test_fuzz_found.lua.
local lu = require "luaunit"

local EXE = arg and arg[-1] or "build/qkv"
local sh = dofile("tests/helpers/shell.lua")

-- runs the fuzzer with these arguments; returns its output and status
local function fuzz(args)
  return sh.sh(sh.quote(EXE) .. " tests/fuzz/fuzz_api.lua " .. args)
end

-- pcall(f, ...) must fail with a string containing every piece
local function fails(pieces, f, ...)
  local ok, err = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  lu.assertIsString(err)
  for _, p in ipairs(pieces) do lu.assertStrContains(err, p) end
  return err
end

---------------------------------------------------------------- runs

TestFuzzRun = {}

-- a few thousand calls over every function: no finding, and every call
-- counted once as ok or error
function TestFuzzRun:testShortRun()
  local out, code = fuzz("3000 1")
  local ok, err = out:match("fuzz: 3000 calls, seed 1: (%d+) ok, (%d+) errors, 0 findings, "
                            .. "0 crashes, 0 hangs\n$")
  lu.assertNotNil(ok, out)
  lu.assertEquals(code, 0)
  lu.assertEquals(tonumber(ok) + tonumber(err), 3000)
  -- both outcomes are common: neither the checks nor the calls are trivial
  lu.assertTrue(tonumber(ok) > 600 and tonumber(err) > 600, out)
end

-- the counts of the closing line, as numbers
local function counts(out)
  local c = {out:match("fuzz: (%d+) calls, seed %-?%d+: (%d+) ok, (%d+) errors, (%d+) findings, "
                      .. "(%d+) crashes, (%d+) hangs\n$")}
  lu.assertEquals(#c, 6, out)
  for i, v in ipairs(c) do c[i] = tonumber(v) end
  return {calls = c[1], ok = c[2], errors = c[3], findings = c[4], crashes = c[5], hangs = c[6]}
end

local FAKES = "--only ^fake --extra tests/fuzz/fakes.lua --hang-seconds 1"

-- the fakes: each rule broken is a finding with its call number, a hang
-- is killed and reported with its replay line, the function that keeps the
-- rules is not reported, and the status is 1
function TestFuzzRun:testFakesAreFindings()
  local out, code = fuzz("50 1 " .. FAKES)
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "(fake.unnamed): message does not name 'unnamed': something went wrong")
  lu.assertStrContains(out, "(fake.table): raised a table")
  lu.assertStrMatches(out, ".*finding at call %d+ %(fake.malformed%): result 1: checking it raised: "
                           .. "[^\n]*tensor was closed.*")
  lu.assertStrMatches(out, ".*fuzz: hang at call %d+: no progress in 1 s, killed\n"
                           .. "  call %d+ seed 1: fake.hang%(tensor [^\n]*%(%d*,? ?0[,)].*")
  lu.assertNotStrContains(out, "(fake.good)")
  lu.assertNotStrContains(out, "(fake.hoard)")
  lu.assertNotStrContains(out, "(fake.hang)")
  -- fake.hoard's calls keep 2 MiB each: a finding at the end of each child
  -- (a hang starts a new one) that got to its end and called it
  local _, memory = out:gsub("\nfinding: %d+ bytes of tensors live after the run, %d+ before it\n", "")
  lu.assertTrue(memory >= 1, out)
  -- every call counted once; the memory findings are not calls
  local c = counts(out)
  lu.assertEquals(c.calls, 50)
  lu.assertEquals(c.crashes, 0)
  lu.assertTrue(c.hangs >= 1 and c.findings > 20, out)
  lu.assertEquals(c.ok + c.errors + c.findings - memory + c.hangs, 50, out)
end

-- a hang: the run goes on after it, and --replay K makes it again
function TestFuzzRun:testHangIsReportedAndReplays()
  local out, code = fuzz("12 1 --only ^fake%.hang --extra tests/fuzz/fakes.lua --hang-seconds 1")
  lu.assertEquals(code, 1)
  local K = out:match("fuzz: hang at call (%d+): no progress in 1 s, killed\n")
  lu.assertNotNil(K, out)
  local replay = out:match("fuzz: replay it with ([^\n]* %-%-replay " .. K .. ")\n")
  lu.assertNotNil(replay, out)
  lu.assertStrContains(replay, " --hang-seconds 1 ")
  local c = counts(out)
  lu.assertTrue(c.hangs >= 1 and c.hangs < 12, out)
  lu.assertEquals(c.ok + c.hangs, 12, out)
  out, code = sh.sh(replay)
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "fuzz: hang at call " .. K .. ": no progress in 1 s, killed\n  call "
                            .. K .. " seed 1: fake.hang(tensor ")
  lu.assertStrContains(out, "fuzz: 1 calls, seed 1: 0 ok, 0 errors, 0 findings, 0 crashes, 1 hangs\n")
end

-- a hang while the arguments are made, or in the call, after a restart:
-- seed 4242's call 31066 looped in the argument builder before fuzz_last
-- was written, so the watchdog blamed call 31065 and, once the new child
-- had truncated the file, never fired again. Here fake.spin's builder
-- (its parameter "spin") and its call never return: each of its calls
-- is a hang reported with its own number, and the run ends.
function TestFuzzRun:testHangsWhileMakingArgumentsAfterRestarts()
  local extra = os.tmpname()
  local f = assert(io.open(extra, "w"))
  f:write([[local P = require "params"
    local param = P.param
    function P.param(name, ...)
      if name == "spin" then while true do end end
      return param(name, ...)
    end
    return {{name = "fake.fine", fn = function() end},
            {name = "fake.spin", params = {{name = "spin"}}, fn = function() while true do end end}}]])
  f:close()
  -- (a run that never ends is ended at 120 s, with its children: only a hang)
  local out, code = sh.sh("timeout -k 5 120 " .. sh.quote(EXE) .. " tests/fuzz/fuzz_api.lua "
                          .. "6 1 --only ^fake --hang-seconds 1 --extra " .. sh.quote(extra))
  os.remove(extra)
  lu.assertEquals(code, 1)
  local hung = {}
  for K, line in out:gmatch("fuzz: hang at call (%d+): no progress in 1 s, killed\n  (call [^\n]*)") do
    lu.assertStrContains(line, "call " .. K .. " seed 1: fake.spin")
    hung[#hung + 1] = tonumber(K)
  end
  lu.assertEquals(hung, {2, 4, 6}, out)
  lu.assertStrContains(out, "fake.spin (making its arguments)")
  local c = counts(out)
  lu.assertEquals({c.calls, c.ok, c.hangs}, {6, 3, 3}, out)
end

-- a crash (here a signal the call sends its own process) is reported with
-- its replay line and the run goes on in a new child from the next call
function TestFuzzRun:testCrashIsReportedAndTheRunGoesOn()
  local extra = os.tmpname()
  local f = assert(io.open(extra, "w"))
  f:write([[return {{name = "fake.crash", params = {{name = "n"}}, fn = function(n)
    if n == 2 then os.execute("kill -SEGV $PPID"); while true do end end
  end}}]])
  f:close()
  local out, code = fuzz("40 1 --extra " .. sh.quote(extra) .. " --only ^fake")
  os.remove(extra)
  lu.assertEquals(code, 1)
  -- killed by signal 11, or (under ASan, which reports the SEGV) status 1
  local K = out:match("fuzz: crash at call (%d+): the child [^\n]*\n  call %d+ seed 1: fake.crash%(2%)\n")
  lu.assertNotNil(K, out)
  lu.assertStrContains(out, "--replay " .. K .. "\n")
  local folder = out:match("fuzz: its folder is kept: ([^\n]+)\n")
  lu.assertNotNil(folder, out)
  os.execute("rm -rf " .. sh.quote(folder))
  local c = counts(out)
  lu.assertTrue(c.crashes >= 2, out)          -- the run went on after the first
  lu.assertEquals(c.ok + c.errors + c.crashes, 40, out)
end

-- the hostile values reach the fakes: a NUL path that a writer takes and
-- a size it clamps are findings, each with a replay line that shows it
function TestFuzzRun:testHostileValuesAreFindings()
  local out, code = fuzz("2000 1 --only ^fake%.s --extra tests/fuzz/fakes.lua")
  lu.assertEquals(code, 1)
  local K = out:match("finding at call (%d+) %(fake.save%): returned, but the path holds a NUL must be an error\n")
  lu.assertNotNil(K, out)
  lu.assertStrMatches(out, ".*finding at call %d+ %(fake.size%): returned, but a size, dim or index is "
                           .. "[-%w.+]+ must be an error\n.*")
  out = fuzz("2000 1 --only ^fake%.s --extra tests/fuzz/fakes.lua --replay " .. K)
  lu.assertStrMatches(out, "call " .. K .. ": fake.save%(\"[^\n]*\\0[^\n]*\n.*")
end

-- --replay K makes call K again alone, and says what it was
function TestFuzzRun:testReplay()
  local out, code = fuzz("50 1 " .. FAKES .. " --replay 10")
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, "call 10: fake.table(")
  lu.assertStrContains(out, "fuzz: 1 calls, seed 1: 0 ok, 0 errors, 1 findings, 0 crashes, 0 hangs")
  out, code = fuzz("50 1 " .. FAKES .. " --replay 14")
  lu.assertEquals(code, 0)
  lu.assertStrContains(out, "call 14: fake.good(")
end

---------------------------------------------------------------- checker

local C = dofile("tests/fuzz/check.lua")
C.setup(qkv)

TestFuzzChecker = {}

local plain = {name = "qkv.softmax"}

function TestFuzzChecker:testErrors()
  lu.assertEquals(C.outcome(plain, {"softmax"}, {}, false, "softmax: x is (2,)"), "error")
  lu.assertEquals(C.outcome(plain, {"softmax"}, {}, false,
                            "bad argument #1 to 'qkv.softmax' (x)"), "error")
  local kind, why = C.outcome(plain, {"softmax"}, {}, false, "x is (2,)")
  lu.assertEquals(kind, "finding")
  lu.assertStrContains(why, "does not name 'softmax'")
  -- a whole word: 't' is not named by "transpose: ..."
  lu.assertEquals(C.outcome(plain, {"t"}, {}, false, "transpose: dim 3"), "finding")
  lu.assertEquals(C.outcome(plain, {"t"}, {}, false, "t: expects 2 dims"), "error")
  kind, why = C.outcome(plain, {"softmax"}, {}, false, {msg = "softmax"})
  lu.assertEquals(kind, "finding")
  lu.assertStrContains(why, "raised a table")
  lu.assertEquals(C.outcome(plain, {"softmax"}, {}, false, nil), "finding")
  lu.assertEquals(C.outcome(plain, {"softmax"}, {}, false, "softmax: got (null)"), "finding")
  lu.assertEquals(C.outcome(plain, {"softmax"}, {}, false, " "), "finding")
end

-- qkv.test's failures are failures, by design; elsewhere they are findings
function TestFuzzChecker:testLuaUnitFailures()
  local msg = lu.FAILURE_PREFIX .. "expected 1, got 2"
  lu.assertEquals(C.outcome({luaunit = true}, {"assertClose"}, {}, false, msg), "fail")
  lu.assertEquals(C.outcome(plain, {"softmax"}, {}, false, msg), "finding")
end

function TestFuzzChecker:testResults()
  local x = qkv.ones(2, 3)
  lu.assertEquals(C.outcome(plain, {"softmax"}, {}, true, x, 1, "s", nil, {x, {x}}), "ok")
  lu.assertEquals(C.outcome(plain, {"softmax"}, {}, true, qkv.ones(1):expand(2, 3):t()), "ok")
  local closed = qkv.ones(2)
  getmetatable(closed).__close(closed)
  local kind, why = C.outcome(plain, {"softmax"}, {}, true, x, closed)
  lu.assertEquals(kind, "finding")
  lu.assertStrContains(why, "result 2: checking it raised")
  kind, why = C.outcome(plain, {"softmax"}, {}, true, {w = {closed}})
  lu.assertEquals(kind, "finding")
  lu.assertStrContains(why, "result 1: [w] [1] checking it raised")
  -- returned as it was given (an Identity): not judged
  lu.assertEquals(C.outcome(plain, {"softmax"}, {closed}, true, closed), "ok")
end

---------------------------------------------------------------- hostile

package.path = "tests/fuzz/?.lua;" .. package.path
local V, P, H = require "values", require "params", require "hostile"
V.setup(qkv, "/nonexistent/dir")
P.setup(qkv, {})
H.setup(qkv)

TestFuzzHostile = {}

-- what must raise: a success is a finding; an error the call's own
-- proxies raised need not name the function
function TestFuzzHostile:testJudge()
  local kind, why = C.judge("ok", nil, true, nil, {}, "the path holds a NUL")
  lu.assertEquals(kind, "finding")
  lu.assertStrContains(why, "the path holds a NUL must be an error")
  lu.assertEquals(C.judge("error", nil, false, "save: NUL", {}, "the path holds a NUL"), "error")
  lu.assertEquals(C.judge("ok", nil, true, nil, {}, nil), "ok")
  local msg = H.RAISED .. " 3"
  lu.assertEquals(C.judge("finding", "does not name", false, msg, {H.RAISED}), "error")
  lu.assertEquals(C.judge("finding", "does not name", false, msg, {}), "finding")
  lu.assertEquals(C.judge("finding", "does not name", false, "other", {H.RAISED}), "finding")
end

-- the numbers: none an int64 holds, or none a size, dim or index can be
function TestFuzzHostile:testNumbers()
  for _, v in ipairs(H.NOT_INT) do lu.assertTrue(H.not_int(v), tostring(v)) end
  for _, v in ipairs{0 / 0, math.huge, 2 ^ 63, -(2 ^ 63) - 2048, 1e300} do
    lu.assertTrue(H.no_int64(v), tostring(v))
  end
  for _, v in ipairs{-(2 ^ 63), 2.5, math.maxinteger, 3} do lu.assertFalse(H.no_int64(v), tostring(v)) end
  lu.assertFalse(H.not_int(3.0))
end

-- a proxy closes one of the call's tensors at the read its plan says, and
-- describing it reads nothing
function TestFuzzHostile:testProxyCloses()
  local closed = false
  for seed = 1, 200 do
    math.randomseed(seed)
    local x = qkv.ones(2)
    local p = H.proxy({x, 1, 2})
    H.arm(nil, {p}, 1)
    local text = H.describe(p)
    if text:find("closes a tensor at read 1,") or text:find("closes a tensor at read 1%)") then
      lu.assertTrue(pcall(function() return x:sum() end), "not closed before a read")
      pcall(function() return p[1] end)
      lu.assertFalse(pcall(function() return x:sum() end), "closed at read 1: " .. text)
      closed = true
      break
    end
  end
  lu.assertTrue(closed)
end

-- seed 4242, call 31066: a size list rewritten with a number no size can
-- be was copied item by item up to its #, which a proxy said was 2^40; a
-- proxy is no list to rewrite, and making the arguments reads none of it
function TestFuzzHostile:testProxyListIsNotRead()
  local reads = 0
  local function read() reads = reads + 1; return 1 << 40 end
  local p = setmetatable({}, {__len = read, __index = read})
  local e = {name = "qkv.fake", kind = "function", params = {{name = "shape"}}}
  debug.sethook(function() error("the rewrite ran past its budget") end, "", 10000000)
  local ok, err = pcall(function()
    for seed = 1, 300 do
      math.randomseed(seed)
      H.begin(e)
      H.rewrite(e, nil, {p}, 1, {"shape"})
    end
  end)
  debug.sethook()
  lu.assertTrue(ok, err)
  lu.assertEquals(reads, 0)
end

-- x[i] = v over its own storage: the check made from copies says when
-- the write gave another value
function TestFuzzHostile:testOverlappingWriteCheck()
  local e = {name = "Tensor.__newindex", kind = "meta", params = {}}
  local checked = 0
  for seed = 1, 400 do
    math.randomseed(seed)
    H.begin(e)
    local args = {qkv.ones(2, 2), 1, 0}
    local _, _, marks = H.rewrite(e, nil, args, 3, {"x", "i", "v"})
    if H.post then
      local x, i, v = args[1], args[2], args[3]
      local ok = pcall(function() x[i] = v end)
      if ok and x.dtype ~= "bool" then
        lu.assertNil(H.post(), "the right write")
        x[i] = x[i] + 1
        lu.assertStrContains(H.post(), "gave another value")
        checked = checked + 1
      end
    elseif marks[1] then
      lu.assertFalse(pcall(function() args[1][args[2]] = args[3] end), marks[1])
    end
  end
  lu.assertTrue(checked > 10, checked)
end

---------------------------------------------------------------- rules

TestFuzzRules = {}

-- (required here, not at the top: a suite that cannot load is one failure)
local function rules() return require "rules" end

-- the classes of issues 28 and 46, each on a fake that breaks its rule
-- (tests/fuzz/fakes_rules.lua): a finding named with its class; with
-- --rules none the same calls have none
function TestFuzzRules:testFakesBreakingEachRule()
  local cmd = "3000 1 --only ^fake_rule --extra tests/fuzz/fakes_rules.lua"
  local out, code = fuzz(cmd)
  lu.assertEquals(code, 1)
  for _, want in ipairs{
      {"options", "options: returned, but the unknown option '"},
      {"duplicates", "duplicates: returned, but a parameter listed twice must be an err"},
      {"grad", "grad: returned, but p.grad = "},
      {"clamp", "convert: returned, but a float %-> int64 conversion of "},
      {"round", "convert: a float %-> int64 conversion changed a value"},
      {"crc", "crc: returned, but an npz whose bytes do not match its CRC"},
      {"nul", "nul: returned, but a tensor name in the header holds a NUL"},
      {"sizes", "sizes: returned, but sizes %(.-%) whose nonzero product overflow"},
      {"shapes", "shapes: returned, but the unknown key '"},
      {"modules", "modules: parameters%(%) lists a tensor twice"},
      {"ddp", "ddp: ddp:[%w_]+%(%) "},
      {"schedulers", "schedulers: returned, but "},
      {"dotcall", "dotcall: message does not name '"}} do
    lu.assertStrMatches(out, ".*fake_rule%." .. want[1] .. "%)?: rule " .. want[2] .. ".*")
  end
  out = fuzz(cmd .. " --rules none")
  lu.assertNotStrContains(out, "rule ")
  lu.assertStrContains(out, "fuzz: 3000 calls, seed 1: ")
  out, code = fuzz(cmd .. " --rules options,nope")
  lu.assertEquals(code, 2)
  lu.assertStrContains(out, "--rules: no class 'nope'")
end

-- every function that takes an options table has its known keys here
-- (the misspellings are made from them), and each class has draws for
-- the real functions it is about, most with a mark or a check
function TestFuzzRules:testDrawsForTheRealFunctions()
  local S, R = rules(), require "registry"
  V.setup(qkv, "/nonexistent/dir")
  P.setup(qkv, {})
  S.setup(qkv, require "qkv.plot.spec", {})
  local list = R.build(qkv)
  local missing = {}
  for _, e in ipairs(list) do
    for _, p in ipairs(e.params) do
      if (p.name == "opts" or p.name == "options") and not S.OPTIONS[e.name] then
        missing[#missing + 1] = e.name
      end
    end
  end
  lu.assertEquals(missing, {})
  local want = {options = {"qkv.attention", "qkv.nn.Linear", "qkv.optim.Adam", "qkv.plot.heatmap",
                           "Module:forward", "qkv.nn.SelfAttention"},
                duplicates = {"qkv.optim.SGD", "qkv.optim.Adam"}, grad = {"Tensor.__newindex"},
                convert = {"Tensor:to", "Tensor:long", "Tensor:copy_", "qkv.tensor"},
                crc = {"qkv.loadz"}, nul = {"qkv.load_safetensors", "qkv.save_safetensors"},
                sizes = {"Tensor:view", "qkv.zeros", "qkv.heads", "qkv.gather", "Tensor:index_add_"},
                shapes = {"qkv.zeros", "qkv.randint", "Tensor:new_zeros", "Tensor:view", "Tensor:flip",
                          "qkv.norm", "Tensor:scatter", "Tensor:to"},
                modules = {"Module:parameters", "Module:nparams", "Module:to", "Module:train",
                           "Module:forward"},
                ddp = {"qkv.dist.DDP"},
                schedulers = {"qkv.optim.lr_scheduler.StepLR", "qkv.optim.lr_scheduler.SequentialLR"},
                dotcall = {"qkv.optim.Adam", "qkv.optim.lr_scheduler.LinearLR", "qkv.dist.all_reduce",
                           "Tensor:register_post_accumulate_grad_hook", "qkv.wordpiece.load"}}
  local byname = {}
  for _, e in ipairs(list) do byname[e.name] = e end
  for class, names in pairs(want) do
    S.setup(qkv, require "qkv.plot.spec", {[class] = true})
    for _, name in ipairs(names) do
      local e = byname[name]
      lu.assertNotNil(e, name)
      local judged = 0
      for seed = 1, 20 do
        math.randomseed(seed)
        P.begin_call()
        local _, _, marks, hooks, drawn = S.rewrite(e, nil, {}, 0, {})
        lu.assertEquals(drawn, class, name)
        if next(marks) ~= nil or next(hooks) ~= nil then judged = judged + 1 end
      end
      -- (sizes that do not overflow are left to check.lua's judgement)
      lu.assertTrue(judged >= 5, name .. ": " .. judged)
    end
  end
end

-- a misspelt key is one letter dropped, doubled or two swapped, and none
-- the function knows
function TestFuzzRules:testMisspelling()
  local S = rules()
  local known = {scale = true, mask = true, causal = true, lr = true}
  for seed = 1, 200 do
    math.randomseed(seed)
    local key = V.pick{"scale", "mask", "causal", "lr"}
    local k = S.misspell(key, known)
    lu.assertNil(known[k], k)
    local n = #k - #key
    if n == 0 then                         -- two letters swapped
      local diff = {}
      for i = 1, #k do if k:sub(i, i) ~= key:sub(i, i) then diff[#diff + 1] = i end end
      lu.assertEquals(#diff, 2, k)
      lu.assertEquals(diff[2], diff[1] + 1, k)
    else
      local long, short = n > 0 and k or key, n > 0 and key or k
      lu.assertEquals(math.abs(n), 1, k)
      local fits = false
      for i = 1, #long do fits = fits or long:sub(1, i - 1) .. long:sub(i + 1) == short end
      lu.assertTrue(fits, k)
    end
  end
end

os.exit(lu.LuaUnit.run(), true)
