-- test_optim.lua: qkv.optim (docs/autograd.md, "Gradients") step for
-- step against torch.optim (tests/fixtures/optim/torch_optim.lua, written
-- by torch_optim.py there): SGD with momentum, dampening, nesterov,
-- weight_decay and maximize, Adam with amsgrad, weight_decay and maximize,
-- AdamW (decoupled weight decay, also as Adam's flag) with the same, a
-- parameter without a gradient for two steps; and the training state
-- that must not drift: options that are not known, parameters listed
-- twice, .grad assignments, a module's tensors replaced, closed tensors,
-- grad mode left in an abandoned coroutine.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local F = dofile("tests/fixtures/optim/torch_optim.lua")

local fails = R.fails
local optim = qkv.optim

local function describe(run)
  local keys = {}
  for k, v in pairs(run.opts) do
    keys[#keys + 1] = k .. "=" .. (type(v) == "table" and "{" .. table.concat(v, ",") .. "}" or tostring(v))
  end
  table.sort(keys)
  return run.optim .. "{" .. table.concat(keys, ", ") .. "}"
end

local function assertNear(got, want, what)
  local g, w = got:tolist(), want:tolist()
  local flat_g, flat_w = R.flatten(g), R.flatten(w)
  for i = 1, #flat_w do
    local tol = 1e-12 * math.max(1, math.abs(flat_w[i]))
    if math.abs(flat_g[i] - flat_w[i]) > tol then
      lu.fail(string.format("%s: element %d is %.17g, torch has %.17g", what, i, flat_g[i], flat_w[i]))
    end
  end
end

---------------------------------------------------------------- PyTorch's steps
TestAgainstTorch = {}

-- every configuration of the fixtures, step by step: p and q as make_q
-- gives q; the checks on `check` ("p", "q" or both)
local function against_torch(runs, make_q, check, label)
  for _, run in ipairs(runs) do
    local p = qkv.tensor(F.p0, "float64"):requires_grad_()
    local q = make_q()
    local opts = {}
    for k, v in pairs(run.opts) do opts[k] = v end
    local opt = optim[run.optim]({p, q}, opts)
    for s = 1, #F.gp do
      opt:zero_grad()
      p.grad = qkv.tensor(F.gp[s], "float64")
      if F.gq[s] then q.grad = qkv.tensor(F.gq[s], "float64") end
      opt:step()
      local what = string.format("%s step %d", describe(run), s)
      if check ~= "q" then assertNear(p, qkv.tensor(run.p[s], "float64"), what .. " p") end
      assertNear(q, qkv.tensor(run.q[s], "float64"), what .. " q" .. (label or ""))
    end
  end
end

function TestAgainstTorch:testEveryConfiguration()
  lu.assertTrue(#F.runs >= 16)
  against_torch(F.runs, function() return qkv.tensor(F.q0, "float64"):requires_grad_() end)
end

-- Adam and AdamW step a contiguous float parameter in one fused pass
-- (qkv._adam) and any other with the composed ops: q here is a transposed
-- view, so every configuration runs both ways
function TestAgainstTorch:testTheComposedStepToo()
  local adams = {}
  for _, run in ipairs(F.runs) do if run.optim ~= "SGD" then adams[#adams + 1] = run end end
  lu.assertTrue(#adams >= 8)
  against_torch(adams, function()
    local qt = {}
    for i = 1, #F.q0[1] do qt[i] = {} for j = 1, #F.q0 do qt[i][j] = F.q0[j][i] end end
    local q = qkv.tensor(qt, "float64"):t():requires_grad_()
    lu.assertFalse(q:is_contiguous())
    return q
  end, "q", " (composed)")
end

---------------------------------------------------------------- state_dict
TestStateDict = {}

local function run_steps(run, p, q, opt, from, to)
  for s = from, to do
    opt:zero_grad()
    p.grad = qkv.tensor(F.gp[s], "float64")
    if F.gq[s] then q.grad = qkv.tensor(F.gq[s], "float64") end
    opt:step()
  end
end

local function fresh(run, opts)
  local p = qkv.tensor(F.p0, "float64"):requires_grad_()
  local q = qkv.tensor(F.q0, "float64"):requires_grad_()
  local o = {}
  for k, v in pairs(opts or run.opts) do o[k] = v end
  return p, q, optim[run.optim]({p, q}, o)
end

-- the state after three steps: torch.optim's names and values, each
-- parameter's own (q had no gradient at steps 2 and 3), and the group's
-- options as given
function TestStateDict:testStateAsTorchNamesIt()
  for _, run in ipairs(F.runs) do
    local p, q, opt = fresh(run)
    run_steps(run, p, q, opt, 1, 3)
    local sd = opt:state_dict()
    local what = describe(run)
    local got = {}
    for i in pairs(sd.state) do got[#got + 1] = i end
    local want = {}
    for i in pairs(run.state3) do want[#want + 1] = i end
    table.sort(got)
    table.sort(want)
    lu.assertEquals(got, want, what)
    for i, st in pairs(run.state3) do
      local mine = sd.state[i]
      local names = {}
      for k in pairs(mine) do names[#names + 1] = k end
      local theirs = {}
      for k in pairs(st) do theirs[#theirs + 1] = k end
      table.sort(names)
      table.sort(theirs)
      lu.assertEquals(names, theirs, what .. " state " .. i)
      for k, v in pairs(st) do
        if k == "step" then lu.assertEquals(mine.step, v, what)
        else assertNear(mine[k], qkv.tensor(v, "float64"), what .. " " .. k) end
      end
    end
    local g = sd.param_groups[1]
    lu.assertEquals(#sd.param_groups, 1)
    lu.assertEquals(g.params, {1, 2})
    for k, v in pairs(run.opts) do lu.assertEquals(g[k], v, what .. " " .. k) end
  end
end

-- three steps, a checkpoint written and read (qkv.save of a table), a new
-- optimizer with other options loading it: steps 4 and 5 are torch's
function TestStateDict:testResumedRunIsTorchsStepForStep()
  local path = os.tmpname()
  for _, run in ipairs(F.runs) do
    local p, q, opt = fresh(run)
    run_steps(run, p, q, opt, 1, 3)
    qkv.save(path, {model = {p = p, q = q}, optim = opt:state_dict(), step = 3})
    local ck = qkv.load(path)
    lu.assertEquals(ck.step, 3)
    local p2 = ck.model.p:clone():requires_grad_()
    local q2 = ck.model.q:clone():requires_grad_()
    local opt2 = optim[run.optim]({p2, q2}, {lr = 0.5})
    opt2:load_state_dict(ck.optim)
    run_steps(run, p2, q2, opt2, 4, 5)
    local what = describe(run) .. " resumed"
    assertNear(p2, qkv.tensor(run.p[5], "float64"), what .. " p")
    assertNear(q2, qkv.tensor(run.q[5], "float64"), what .. " q")
  end
  os.remove(path)
end

-- a state_dict that does not fit is an error naming what, and changes
-- nothing: the next step is the one the optimizer would have taken
function TestStateDict:testMisfitsAreErrorsAndChangeNothing()
  local run
  for _, r in ipairs(F.runs) do if r.optim == "Adam" and r.opts.amsgrad then run = r break end end
  local p, q, opt = fresh(run)
  run_steps(run, p, q, opt, 1, 3)
  local function sd() return opt:state_dict() end
  local function with(f) local s = sd(); f(s); return s end
  local _, _, other = fresh(run)
  fails("load_state_dict: the state_dict must be a table", other.load_state_dict, other, 3)
  fails("did you mean 'state'", other.load_state_dict, other, with(function(s) s.stat = s.state end))
  fails("param_groups must be a list of one group", other.load_state_dict, other,
        with(function(s) s.param_groups[2] = s.param_groups[1] end))
  fails("did you mean 'betas'", other.load_state_dict, other,
        with(function(s) s.param_groups[1].beta = 1 end))
  fails("the group has no 'eps'", other.load_state_dict, other,
        with(function(s) s.param_groups[1].eps = nil end))
  fails("option 'lr' must be a number >= 0, got -1", other.load_state_dict, other,
        with(function(s) s.param_groups[1].lr = -1 end))
  fails("the group's params must list the 2 parameters", other.load_state_dict, other,
        with(function(s) s.param_groups[1].params = {1} end))
  fails("state has an entry 3, not a parameter's place 1..2", other.load_state_dict, other,
        with(function(s) s.state[3] = s.state[1] end))
  fails("did you mean 'exp_avg'", other.load_state_dict, other,
        with(function(s) s.state[1].exp_av = s.state[1].exp_avg end))
  fails("state[2].exp_avg is (3,) but parameter 2 is (2, 2)", other.load_state_dict, other,
        with(function(s) s.state[2].exp_avg = s.state[1].exp_avg end))
  fails("state[1].step must be a whole number", other.load_state_dict, other,
        with(function(s) s.state[1].step = 1.5 end))
  fails("state[1] needs step, exp_avg and exp_avg_sq", other.load_state_dict, other,
        with(function(s) s.state[1].exp_avg_sq = nil end))
  -- a failed load left the other optimizer as made: its first step is a
  -- first step; the good one resumes where it was
  local good = sd()
  opt:load_state_dict(good)
  run_steps(run, p, q, opt, 4, 5)
  assertNear(p, qkv.tensor(run.p[5], "float64"), "after the failed loads")
  fails("state[1] has no momentum_buffer", function()
    local a, b, o = fresh(F.runs[2])
    run_steps(F.runs[2], a, b, o, 1, 1)
    local s = o:state_dict()
    s.state[1] = {}
    o:load_state_dict(s)
  end)
end

---------------------------------------------------------------- options
TestOptions = {}

function TestOptions:testUnknownOptionsNameTheClosest()
  local p = qkv.ones(3):requires_grad_()
  fails("SGD: unknown option 'nesterow' (did you mean 'nesterov'?)", optim.SGD, {p}, {nesterow = true})
  fails("SGD: unknown option 'momentun' (did you mean 'momentum'?)", optim.SGD, {p}, {momentun = 0.9})
  fails("Adam: unknown option 'weight_decy' (did you mean 'weight_decay'?)", optim.Adam, {p}, {weight_decy = 0.1})
  fails("Adam: unknown option 'amsgard' (did you mean 'amsgrad'?)", optim.Adam, {p}, {amsgard = true})
  fails("Adam: unknown option 'foreach'", optim.Adam, {p}, {foreach = true})
  fails("Adam: unknown option 1 (options are named", optim.Adam, {p}, {0.01})
  fails("SGD: options must be a table, got number", optim.SGD, {p}, 0.1)
end

function TestOptions:testValuesAreChecked()
  local p = qkv.ones(3):requires_grad_()
  fails("SGD: nesterov needs a momentum and zero dampening, got momentum 0, dampening 0",
        optim.SGD, {p}, {nesterov = true})
  fails("SGD: nesterov needs a momentum and zero dampening, got momentum 0.9, dampening 0.1",
        optim.SGD, {p}, {nesterov = true, momentum = 0.9, dampening = 0.1})
  fails("SGD: option 'nesterov' must be a boolean, got number", optim.SGD, {p}, {nesterov = 1})
  fails("SGD: option 'dampening' must be a number in [0, 1], got 2", optim.SGD, {p}, {dampening = 2})
  fails("Adam: option 'lr' must be a number >= 0, got -1", optim.Adam, {p}, {lr = -1})
  fails("Adam: option 'amsgrad' must be a boolean, got string", optim.Adam, {p}, {amsgrad = "yes"})
  fails("Adam: option 'maximize' must be a boolean", optim.Adam, {p}, {maximize = 0})
  fails("Adam: option 'betas' must be two numbers in [0, 1)", optim.Adam, {p}, {betas = {0.9, 1}})
  fails("Adam: option 'decoupled_weight_decay' must be a boolean, got number", optim.Adam, {p},
        {decoupled_weight_decay = 1})
end

-- an option set on the optimizer after it was made (opt.lr = x, as
-- PyTorch's param_groups[0]["lr"] = x) is checked at each step, naming
-- step and the option, before anything moves; a name the optimizer does
-- not have is refused where it is set, naming the closest
function TestOptions:testOptionsSetLaterAreChecked()
  local p = qkv.ones(3, "float64"):requires_grad_()
  local opt = optim.SGD({p}, {lr = 0.1, momentum = 0.9})
  p.grad = qkv.ones(3, "float64")
  opt.lr = "x"
  local line = debug.getinfo(1, "l").currentline + 1
  local msg = fails("step: option 'lr' must be a number >= 0, got x", function() opt:step() end)
  lu.assertStrContains(msg, "test_optim.lua:" .. line .. ": ")
  lu.assertEquals(p:tolist(), {1, 1, 1}, "nothing moved")
  opt.lr = 0.1
  for _, bad in ipairs{{"momentum", 1, "a number in [0, 1), got 1"},
                       {"dampening", -1, "a number in [0, 1], got -1"},
                       {"weight_decay", "0", "a number >= 0, got 0"},
                       {"lr", 0 / 0, "a number >= 0, got"}, {"lr", -0.1, "a number >= 0, got -0.1"},
                       {"nesterov", "yes", "a boolean, got string"},
                       {"maximize", 1, "a boolean, got number"}} do
    local k, was = bad[1], opt[bad[1]]
    opt[k] = bad[2]
    fails("step: option '" .. k .. "' must be " .. bad[3], opt.step, opt)
    opt[k] = was
  end
  opt.nesterov, opt.dampening = true, 0.5
  fails("step: nesterov needs a momentum and zero dampening, got momentum 0.9, dampening 0.5", opt.step, opt)
  opt.nesterov, opt.dampening = false, 0
  lu.assertEquals(p:tolist(), {1, 1, 1}, "nothing moved")
  opt.lr = 0.5                                   -- a good value is used
  opt:step()
  lu.assertEquals(p:tolist(), {0.5, 0.5, 0.5})
  -- Adam's: betas, eps, amsgrad; betas set later are the ones it steps with
  local function adam_step(set, opts)
    local q = qkv.tensor({1, -2}, "float64"):requires_grad_()
    local a = optim.Adam({q}, opts)
    for k, v in pairs(set) do a[k] = v end
    q.grad = qkv.tensor({0.5, 0.25}, "float64")
    a:step()
    q.grad = qkv.tensor({-0.5, 1}, "float64")
    a:step()
    return q:tolist(), a
  end
  lu.assertEquals(adam_step({betas = {0.5, 0.9}, lr = 0.1}), adam_step({}, {betas = {0.5, 0.9}, lr = 0.1}))
  local _, a = adam_step({})
  for _, bad in ipairs{{"betas", {0.9, 1}, "two numbers in [0, 1)"}, {"betas", 0.9, "two numbers"},
                       {"eps", 0, "a number > 0, got 0"}, {"amsgrad", "no", "a boolean, got string"},
                       {"decoupled_weight_decay", 1, "a boolean, got number"}} do
    local k, was = bad[1], a[bad[1]]
    a[k] = bad[2]
    fails("step: option '" .. k .. "' must be " .. bad[3], a.step, a)
    a[k] = was
  end
  -- a name it does not have
  line = debug.getinfo(1, "l").currentline + 1
  msg = fails("SGD: unknown option 'momentun' (did you mean 'momentum'?)", function() opt.momentun = 0.5 end)
  lu.assertStrContains(msg, "test_optim.lua:" .. line .. ": ")
  lu.assertNil(rawget(opt, "momentun"))
  fails("AdamW: unknown option 'decoupled_weight_decay'",
        function() optim.AdamW({p}).decoupled_weight_decay = false end)
  fails("Adam: unknown option 'beta' (did you mean 'betas'?)", function() a.beta = {0.9, 0.9} end)
end

-- AdamW's errors name it; it has no decoupled_weight_decay flag (torch's
-- neither: it is always on)
function TestOptions:testAdamWOptions()
  local p = qkv.ones(3):requires_grad_()
  fails("AdamW: unknown option 'decoupled_weight_decay'", optim.AdamW, {p}, {decoupled_weight_decay = true})
  fails("AdamW: unknown option 'weight_decai' (did you mean 'weight_decay'?)", optim.AdamW, {p},
        {weight_decai = 0.1})
  fails("AdamW: option 'weight_decay' must be a number >= 0, got -0.1", optim.AdamW, {p}, {weight_decay = -0.1})
  fails("AdamW: option 'lr' must be a number >= 0, got fast", optim.AdamW, {p}, {lr = "fast"})
  fails("AdamW: option 'betas' must be two numbers in [0, 1)", optim.AdamW, {p}, {betas = {1, 0.9}})
  fails("AdamW: option 'eps' must be a number > 0, got 0", optim.AdamW, {p}, {eps = 0})
  fails("AdamW: params must be a list of tensors or a module, got nil", optim.AdamW)
  lu.assertEquals(optim.AdamW({p}).weight_decay, 1e-2)
  lu.assertEquals(optim.Adam({p}).weight_decay, 0)
end

---------------------------------------------------------------- parameters
TestParameters = {}

function TestParameters:testEachParameterOnce()
  local p, q = qkv.ones(3):requires_grad_(), qkv.ones(2):requires_grad_()
  fails("SGD: parameter 3 is parameter 1 again: each parameter may be listed once",
        optim.SGD, {p, q, p}, {lr = 0.1})
  fails("Adam: parameter 2 is parameter 1 again", optim.Adam, {{"a", p}, {"b", p}})
  local m = qkv.nn.Linear(2, 2)
  fails("SGD: parameter 3 is parameter 1 again", optim.SGD, {m.weight, m.bias, m.weight})
  fails("SGD: parameter 1 is the result of <MulBackward0>, not a leaf", optim.SGD, {p * 2})
end

-- p.grad is nil or a tensor that fits p
function TestParameters:testGradAssignmentIsChecked()
  local p = qkv.ones(3):requires_grad_()
  fails("grad: x.grad must be nil or a tensor, got a number", function() p.grad = 5 end)
  fails("grad: x.grad must be nil or a tensor, got a string", function() p.grad = "1" end)
  fails("grad: x.grad must be nil or a tensor, got a table", function() p.grad = {1, 2, 3} end)
  local on = p.device           -- the default device (make test runs it on both)
  fails("grad: x is float32 (3,) on " .. on .. " but the grad assigned is float32 (5,) on " .. on,
        function() p.grad = qkv.ones(5) end)
  fails("grad: x is float32 (3,) on " .. on .. " but the grad assigned is float64 (3,) on " .. on,
        function() p.grad = qkv.ones(3, "float64") end)
  if on == "cuda" then
    fails("grad: x is float32 (3,) on cuda but the grad assigned is float32 (3,) on cpu",
          function() p.grad = qkv.ones(3, "cpu") end)
  end
  local closed
  do
    local c <close> = qkv.ones(3)
    closed = c
  end
  fails("grad: x.grad must be nil or a tensor, got a closed tensor", function() p.grad = closed end)
  lu.assertNil(p.grad, "a refused assignment leaves .grad as it was")
  local g = qkv.full({3}, 2)
  p.grad = g
  lu.assertTrue(rawequal(p.grad, g))
  optim.SGD({p}, {lr = 0.5}):step()
  lu.assertEquals(p:tolist(), {0, 0, 0})
  p.grad = nil
  lu.assertNil(p.grad)
end

-- an optimizer made from a module steps that module's tensors; once they
-- were replaced it says so rather than step the old ones
function TestParameters:testReplacedModuleTensorsAreAnError()
  local m = qkv.nn.Linear(2, 1)
  local opt = optim.SGD(m, {lr = 0.1})
  m.weight = m.weight:detach():clone():requires_grad_()
  fails("step: the module's parameter 'weight' is not the tensor this optimizer was made with",
        opt.step, opt)
end

-- a tensor closed under the optimizer is an error naming step
function TestParameters:testClosedTensorsNameStep()
  local opt
  do
    local p <close> = qkv.ones(3):requires_grad_()
    opt = optim.SGD({p})
  end
  fails("step: parameter 1 is a closed tensor", opt.step, opt)
  local q = qkv.ones(2):requires_grad_()
  local opt2 = optim.Adam({q})
  do
    local g <close> = qkv.ones(2)
    q.grad = g
  end
  fails("step: the grad of parameter 1 is a closed tensor", opt2.step, opt2)
end

-- a method called with '.' says so, at the script's line, not "attempt
-- to index a nil value (local 'self')" inside optim.lua
function TestParameters:testDotCallsSaySo()
  local p = qkv.ones(2):requires_grad_()
  for _, make in ipairs{optim.SGD, optim.Adam, optim.AdamW} do
    local opt = make({p})
    local line = debug.getinfo(1, "l").currentline + 1
    local msg = fails("step: called with '.', use opt:step()", function() opt.step() end)
    lu.assertStrContains(msg, "test_optim.lua:" .. line .. ": ")
    fails("zero_grad: called with '.', use opt:zero_grad()", opt.zero_grad)
    fails("step: called on a tensor, not an optimizer (called with '.'?): use opt:step()", opt.step, p)
  end
end

---------------------------------------------------------------- grad mode
TestGradMode = {}

-- grad mode belongs to the coroutine: one that yields inside no_grad and
-- is never resumed leaves the rest of the program recording
function TestGradMode:testAbandonedCoroutineLeavesNothing()
  local p = qkv.ones(3):requires_grad_()
  local inside = {}
  local co = coroutine.create(function()
    qkv.no_grad(function()
      inside[1] = qkv.is_grad_enabled()
      coroutine.yield()
      inside[2] = (p * 2).requires_grad
    end)
  end)
  assert(coroutine.resume(co))
  lu.assertFalse(inside[1])
  lu.assertTrue(qkv.is_grad_enabled(), "after the yield")
  lu.assertTrue((p * 2).requires_grad, "ops record after the yield")
  assert(coroutine.resume(co))
  lu.assertFalse(inside[2], "resumed, the coroutine is in no_grad again")
  local abandoned = coroutine.create(function() qkv.no_grad(function() coroutine.yield() end) end)
  assert(coroutine.resume(abandoned))
  abandoned = nil
  collectgarbage()
  lu.assertTrue(qkv.is_grad_enabled())
  lu.assertTrue((p * 2).requires_grad)
  -- a coroutine that sets none follows the main thread
  qkv.no_grad(function()
    local gen = coroutine.wrap(function() coroutine.yield((p * 2).requires_grad) end)
    lu.assertFalse(gen())
  end)
  -- enable_grad inside a coroutine inside no_grad
  qkv.no_grad(function()
    local co2 = coroutine.wrap(function()
      return qkv.enable_grad(function() return (p * 2).requires_grad end)
    end)
    lu.assertTrue(co2())
    lu.assertFalse((p * 2).requires_grad)
  end)
end

os.exit(lu.LuaUnit.run(), true)
