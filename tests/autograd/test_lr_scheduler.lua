-- test_lr_scheduler.lua: qkv.optim.lr_scheduler (docs/autograd.md,
-- "Optimizers and schedulers") step for step against
-- torch.optim.lr_scheduler (tests/fixtures/optim/torch_lr_scheduler.lua,
-- written by torch_lr_scheduler.py there): StepLR, CosineAnnealingLR (past
-- T_max too), LambdaLR, LinearLR and SequentialLR, the optimizer's lr and
-- get_last_lr() after each of 12 steps; that the optimizer steps with the
-- scheduled lr; the required arguments as PyTorch's keywords too
-- (StepLR(opt, {step_size = 2})); and every error the arguments can cause.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local F = dofile("tests/fixtures/optim/torch_lr_scheduler.lua")

local fails = R.fails
local S = qkv.optim.lr_scheduler

-- the lambdas torch_lr_scheduler.py names
local LAMBDAS = {
  exp = function(e) return 0.95 ^ e end,
  warmup4 = function(e) return math.min(1.0, (e + 1) / 4) end,
  inverse = function(e) return 1 / (e + 1) end,
}

local function near(got, want, what)
  if type(got) ~= "number" or math.abs(got - want) > 1e-12 * math.max(1, math.abs(want)) then
    lu.fail(string.format("%s: %s, torch has %.17g", what, tostring(got), want))
  end
end

-- PyTorch's names of each class's required arguments after the optimizer
local REQUIRED = {StepLR = {"step_size"}, CosineAnnealingLR = {"T_max"}, LambdaLR = {"lr_lambda"},
                  LinearLR = {}}

-- the schedulers of a run made on opt, as the fixture lists them, and the
-- one to step (a SequentialLR over them when it has milestones); with
-- keywords, the required arguments come in the options table, as
-- StepLR(opt, {step_size = 2, gamma = 0.5})
local function make(run, opt, keywords)
  local made = {}
  for i, spec in ipairs(run.schedulers) do
    local args, opts = {opt}, {}
    for k, v in pairs(spec[3]) do opts[k] = v end
    for j, a in ipairs(spec[2]) do
      a = type(a) == "string" and LAMBDAS[a:match("^lambda:(.*)$")] or a
      if keywords then opts[REQUIRED[spec[1]][j]] = a else args[#args + 1] = a end
    end
    if next(opts) then args[#args + 1] = opts end
    made[i] = S[spec[1]](table.unpack(args))
  end
  if run.milestones then
    if keywords then return S.SequentialLR(opt, {schedulers = made, milestones = run.milestones}) end
    return S.SequentialLR(opt, made, run.milestones)
  end
  return made[1]
end

local function describe(run)
  local parts = {}
  for _, spec in ipairs(run.schedulers) do
    local kw = {}
    for k, v in pairs(spec[3]) do kw[#kw + 1] = k .. "=" .. tostring(v) end
    table.sort(kw)
    parts[#parts + 1] = spec[1] .. "(" .. table.concat(spec[2], ", ") ..
                        (#kw > 0 and ", {" .. table.concat(kw, ", ") .. "}" or "") .. ")"
  end
  return (run.milestones and "SequentialLR " or "") .. table.concat(parts, ", ")
end

---------------------------------------------------------------- PyTorch's schedules
TestAgainstTorch = {}

-- every run, its required arguments as positions and then as keywords
local function every_configuration(keywords)
  lu.assertTrue(#F.runs >= 16)
  local seen = {}
  for _, run in ipairs(F.runs) do
    seen[run.name] = true
    local p = qkv.zeros(2, "float64"):requires_grad_()
    local opt = qkv.optim.SGD({p}, {lr = F.lr})
    local sched = make(run, opt, keywords)
    lu.assertEquals(#run.lr, F.steps + 1)
    for s = 0, F.steps do
      if s > 0 then
        opt:step()
        sched:step()
      end
      local what = string.format("%s%s after %d steps", describe(run), keywords and " (keywords)" or "", s)
      near(opt.lr, run.lr[s + 1], what .. ": opt.lr")
      local last = sched:get_last_lr()
      lu.assertEquals(#last, 1, what .. ": get_last_lr() has one group")
      near(last[1], run.last[s + 1], what .. ": get_last_lr()[1]")
    end
  end
  for _, name in ipairs{"StepLR", "CosineAnnealingLR", "LambdaLR", "LinearLR", "SequentialLR"} do
    lu.assertTrue(seen[name], name)
  end
end

function TestAgainstTorch:testEveryConfiguration() every_configuration(false) end
function TestAgainstTorch:testEveryConfigurationByKeywords() every_configuration(true) end

-- every run stopped after 5 steps, its optimizer and scheduler saved as a
-- checkpoint (qkv.save) and loaded into new ones made with other
-- settings: the next 7 steps are torch's
function TestAgainstTorch:testResumedFromACheckpoint()
  local path = os.tmpname()
  for _, run in ipairs(F.runs) do
    local p = qkv.zeros(2, "float64"):requires_grad_()
    local opt = qkv.optim.SGD({p}, {lr = F.lr})
    local sched = make(run, opt)
    for _ = 1, 5 do opt:step(); sched:step() end
    qkv.save(path, {optim = opt:state_dict(), sched = sched:state_dict()})
    local ck = qkv.load(path)
    lu.assertEquals(ck.sched.last_epoch, 5)
    local p2 = qkv.zeros(2, "float64"):requires_grad_()
    local opt2 = qkv.optim.SGD({p2}, {lr = 7})
    local sched2 = make(run, opt2)
    opt2:load_state_dict(ck.optim)
    sched2:load_state_dict(ck.sched)
    for s = 6, F.steps do
      opt2:step()
      sched2:step()
      local what = string.format("%s resumed, after %d steps", describe(run), s)
      near(opt2.lr, run.lr[s + 1], what .. ": opt.lr")
      near(sched2:get_last_lr()[1], run.last[s + 1], what .. ": get_last_lr()[1]")
    end
  end
  os.remove(path)
  -- a state_dict that does not fit changes nothing
  local opt = qkv.optim.SGD({qkv.zeros(1):requires_grad_()}, {lr = 1})
  local sched = S.StepLR(opt, 2)
  local sd = sched:state_dict()
  sd.step_sise = 3
  fails("load_state_dict: unknown option 'step_sise' (did you mean 'step_size'?)", sched.load_state_dict, sched, sd)
  sd.step_sise = nil
  sd.base_lrs = {1, 2}
  fails("'base_lrs' must be a list of one number", sched.load_state_dict, sched, sd)
  sd.base_lrs = {1}
  sd.last_epoch = 1.5
  fails("'last_epoch' must be a whole number", sched.load_state_dict, sched, sd)
  lu.assertEquals(sched.last_epoch, 0)
  local seq = S.SequentialLR(opt, {S.StepLR(opt, 2), S.StepLR(opt, 3)}, {4})
  local ssd = seq:state_dict()
  ssd._schedulers[3] = ssd._schedulers[1]
  fails("'_schedulers' must be a list of 2 state_dicts", seq.load_state_dict, seq, ssd)
end

-- the schedules move: a run whose lr never changed would pass the
-- comparison above for a scheduler that does nothing
function TestAgainstTorch:testTheFixtureMoves()
  for _, run in ipairs(F.runs) do
    local moved = false
    for s = 2, #run.lr do moved = moved or run.lr[s] ~= run.lr[1] end
    lu.assertTrue(moved, describe(run))
  end
end

-- opt:step() uses opt.lr as the scheduler left it
function TestAgainstTorch:testTheOptimizerStepsWithTheScheduledLr()
  local p = qkv.zeros(1, "float64"):requires_grad_()
  local opt = qkv.optim.SGD({p}, {lr = 1})
  local sched = S.StepLR(opt, 1, {gamma = 0.5})
  local want = 0
  for _ = 1, 4 do
    p.grad = qkv.ones(1, "float64")
    want = want - opt.lr
    opt:step()
    sched:step()
  end
  lu.assertEquals(p:tolist(), {want})
  lu.assertEquals(want, -(1 + 0.5 + 0.25 + 0.125))
  lu.assertEquals(opt.lr, 0.0625)
  -- AdamW's decay uses it too
  local q = qkv.ones(1, "float64"):requires_grad_()
  local adamw = qkv.optim.AdamW({q}, {lr = 0.1, weight_decay = 1})
  S.LambdaLR(adamw, function() return 0.5 end)
  lu.assertEquals(adamw.lr, 0.05)
  q.grad = qkv.zeros(1, "float64")
  adamw:step()
  lu.assertEquals(q:tolist(), {0.95})
end

-- the first scheduler made on an optimizer sets opt.initial_lr, the base
-- of every later one, as torch's setdefault of group["initial_lr"]
function TestAgainstTorch:testInitialLr()
  local opt = qkv.optim.SGD({qkv.zeros(1):requires_grad_()}, {lr = 0.2})
  S.LinearLR(opt, {start_factor = 0.5})
  lu.assertEquals(opt.lr, 0.1)
  lu.assertEquals(opt.initial_lr, 0.2)
  local lam = S.LambdaLR(opt, function(e) return e + 1 end)
  lu.assertEquals(opt.lr, 0.2)
  lam:step()
  lu.assertEquals(opt.lr, 0.4)
end

---------------------------------------------------------------- errors
TestErrors = {}

local function optimizer()
  return qkv.optim.SGD({qkv.zeros(1):requires_grad_()}, {lr = 0.1})
end

function TestErrors:testTheOptimizerIsChecked()
  fails("StepLR: optimizer must be a qkv.optim optimizer, got nil", S.StepLR, nil, 2)
  fails("CosineAnnealingLR: optimizer must be a qkv.optim optimizer, got table", S.CosineAnnealingLR, {lr = 1}, 2)
  fails("LinearLR: optimizer must be a qkv.optim optimizer, got Linear", S.LinearLR, qkv.nn.Linear(1, 1))
  fails("LambdaLR: optimizer must be a qkv.optim optimizer, got number", S.LambdaLR, 0.1, function() return 1 end)
  fails("SequentialLR: optimizer must be a qkv.optim optimizer, got string", S.SequentialLR, "opt", {}, {})
  local opt = optimizer()
  opt.lr = "0.1"
  fails("StepLR: the optimizer's lr is a string, not a number", S.StepLR, opt, 2)
  local opt2 = optimizer()
  local sched = S.StepLR(opt2, 2)
  opt2.lr = nil
  fails("step: the optimizer's lr is a nil, not a number", sched.step, sched)
end

function TestErrors:testArgumentsAreChecked()
  local opt = optimizer()
  fails("StepLR: step_size must be a positive integer, got 0", S.StepLR, opt, 0)
  fails("StepLR: step_size must be a positive integer, got 2.5", S.StepLR, opt, 2.5)
  fails("StepLR: step_size is missing: StepLR(opt, step_size) or StepLR(opt, {step_size = ...})",
        S.StepLR, opt)
  fails("StepLR: option 'gamma' must be a number > 0, got -0.1", S.StepLR, opt, 2, {gamma = -0.1})
  fails("StepLR: option 'gamma' must be a number > 0, got 0.1", S.StepLR, opt, 2, {gamma = "0.1"})
  fails("StepLR: unknown option 'gama' (did you mean 'gamma'?)", S.StepLR, opt, 2, {gama = 0.5})
  fails("StepLR: unknown option 'last_epoch'", S.StepLR, opt, 2, {last_epoch = 3})
  fails("StepLR: options must be a table, got number", S.StepLR, opt, 2, 0.5)
  fails("CosineAnnealingLR: T_max must be a positive integer, got -1", S.CosineAnnealingLR, opt, -1)
  fails("CosineAnnealingLR: option 'eta_min' must be a number >= 0, got -0.01",
        S.CosineAnnealingLR, opt, 10, {eta_min = -0.01})
  fails("CosineAnnealingLR: unknown option 'eta_mn' (did you mean 'eta_min'?)",
        S.CosineAnnealingLR, opt, 10, {eta_mn = 1})
  fails("CosineAnnealingLR: unknown option 'eta_max'", S.CosineAnnealingLR, opt, 10, {eta_max = 1})
  fails("LambdaLR: lr_lambda must be a function of the epoch, got number", S.LambdaLR, opt, 0.5)
  fails("LinearLR: option 'start_factor' must be a number in (0, 1], got 0", S.LinearLR, opt, {start_factor = 0})
  fails("LinearLR: option 'start_factor' must be a number in (0, 1], got 2", S.LinearLR, opt, {start_factor = 2})
  fails("LinearLR: option 'end_factor' must be a number in [0, 1], got 1.5", S.LinearLR, opt, {end_factor = 1.5})
  fails("LinearLR: option 'total_iters' must be a positive integer, got 0", S.LinearLR, opt, {total_iters = 0})
  fails("LinearLR: unknown option 'warmup'", S.LinearLR, opt, {warmup = 5})
  fails("LinearLR: unknown option 'total_iter' (did you mean 'total_iters'?)", S.LinearLR, opt, {total_iter = 5})
  lu.assertEquals(opt.lr, 0.1, "a refused scheduler leaves the lr alone")
  lu.assertNil(rawget(opt, "initial_lr"), "and sets no initial_lr")
end

-- PyTorch's keywords for the required arguments: the same scheduler as the
-- positions give, given once, and named when missing
function TestErrors:testRequiredArgumentsAsKeywords()
  local function lrs(make_it)
    local opt = optimizer()
    local sched, out = make_it(opt), {}
    for _ = 1, 6 do
      sched:step()
      out[#out + 1] = opt.lr
    end
    return out
  end
  local f = function(e) return 1 / (e + 2) end
  for _, pair in ipairs{
    {function(o) return S.StepLR(o, 2, {gamma = 0.5}) end,
     function(o) return S.StepLR(o, {step_size = 2, gamma = 0.5}) end},
    {function(o) return S.CosineAnnealingLR(o, 4, {eta_min = 0.01}) end,
     function(o) return S.CosineAnnealingLR(o, {T_max = 4, eta_min = 0.01}) end},
    {function(o) return S.LambdaLR(o, f) end, function(o) return S.LambdaLR(o, {lr_lambda = f}) end},
    {function(o) return S.SequentialLR(o, {S.LinearLR(o), S.StepLR(o, 1)}, {2}) end,
     function(o) return S.SequentialLR(o, {schedulers = {S.LinearLR(o), S.StepLR(o, 1)}, milestones = {2}}) end},
  } do
    local a, b = lrs(pair[1]), lrs(pair[2])
    lu.assertEquals(b, a)
    lu.assertNotEquals(a[1], a[6], "the schedule moves")
  end
  local opt = optimizer()
  fails("StepLR: step_size is given twice, as an argument and as an option",
        S.StepLR, opt, 2, {step_size = 3})
  fails("CosineAnnealingLR: T_max is given twice, as an argument and as an option",
        S.CosineAnnealingLR, opt, 4, {T_max = 4})
  fails("LambdaLR: lr_lambda is given twice, as an argument and as an option",
        S.LambdaLR, opt, f, {lr_lambda = f})
  fails("StepLR: step_size is missing: StepLR(opt, step_size) or StepLR(opt, {step_size = ...})",
        S.StepLR, opt, {gamma = 0.5})
  fails("CosineAnnealingLR: T_max is missing: CosineAnnealingLR(opt, T_max) or "
        .. "CosineAnnealingLR(opt, {T_max = ...})", S.CosineAnnealingLR, opt, {eta_min = 0})
  fails("LambdaLR: lr_lambda is missing: LambdaLR(opt, lr_lambda) or LambdaLR(opt, {lr_lambda = ...})",
        S.LambdaLR, opt)
  fails("StepLR: unknown option 'stepsize' (did you mean 'step_size'?)", S.StepLR, opt, {stepsize = 2})
  fails("CosineAnnealingLR: unknown option 'T_mx' (did you mean 'T_max'?)",
        S.CosineAnnealingLR, opt, {T_mx = 4})
  fails("StepLR: step_size must be a positive integer, got 0", S.StepLR, opt, {step_size = 0})
  fails("LambdaLR: lr_lambda must be a function of the epoch, got number", S.LambdaLR, opt, {lr_lambda = 2})
  fails("StepLR: takes 1 argument after the optimizer and an options table, got 3",
        S.StepLR, opt, 2, {gamma = 0.5}, 3)
  fails("LinearLR: takes 0 arguments after the optimizer and an options table, got 2",
        S.LinearLR, opt, 3, {})
  lu.assertEquals(opt.lr, 0.1, "a refused scheduler leaves the lr alone")
end

function TestErrors:testStepAndLambda()
  local opt = optimizer()
  local sched = S.CosineAnnealingLR(opt, 10)
  fails("step: takes no argument (PyTorch's epoch argument is deprecated), got number", sched.step, sched, 3)
  fails("step: called with '.', use sched:step()", sched.step)
  fails("get_last_lr: called with '.', use sched:get_last_lr()", sched.get_last_lr)
  fails("step: called on a number, not a scheduler (called with '.'?): use sched:step()", sched.step, 3)
  fails("LambdaLR: lr_lambda(0) must return a number >= 0, got nil", S.LambdaLR, opt, function() end)
  local bad = S.LambdaLR(optimizer(), function(e) return 1 - e end)
  bad:step()
  fails("LambdaLR: lr_lambda(2) must return a number >= 0, got -1", bad.step, bad)
  local ok, msg = pcall(function() return S.LambdaLR(opt, function() return "x" end) end)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "test_lr_scheduler.lua:", false, "the error names the script's line")
  lu.assertStrContains(msg, "LambdaLR: lr_lambda(0) must return a number >= 0, got x")
end

function TestErrors:testSequentialLR()
  local opt = optimizer()
  local a, b = S.LinearLR(opt), S.CosineAnnealingLR(opt, 5)
  local other = S.StepLR(optimizer(), 2)
  fails("SequentialLR: schedulers must be a list of schedulers, got an empty table", S.SequentialLR, opt, {}, {})
  fails("SequentialLR: schedulers is missing: SequentialLR(opt, schedulers, milestones) or "
        .. "SequentialLR(opt, {schedulers = ...})", S.SequentialLR, opt)
  fails("SequentialLR: schedulers[2] is a number, not a scheduler", S.SequentialLR, opt, {a, 3}, {2})
  fails("SequentialLR: schedulers[2] (StepLR) steps another optimizer", S.SequentialLR, opt, {a, other}, {2})
  fails("SequentialLR: milestones must be a list of 1 epochs, one fewer than the schedulers, got 2 of them",
        S.SequentialLR, opt, {a, b}, {2, 4})
  fails("SequentialLR: milestones is missing: SequentialLR(opt, schedulers, milestones) or "
        .. "SequentialLR(opt, {milestones = ...})", S.SequentialLR, opt, {a, b})
  fails("SequentialLR: milestones[1] must be an integer >= 1 and above the one before, got 0",
        S.SequentialLR, opt, {a, b}, {0})
  fails("SequentialLR: milestones[2] must be an integer >= 1 and above the one before, got 3",
        S.SequentialLR, opt, {a, b, S.StepLR(opt, 2)}, {3, 3})
  local seq = S.SequentialLR(opt, {a, b}, {5})
  fails("SequentialLR: schedulers[1] is a SequentialLR: list its schedulers instead",
        S.SequentialLR, opt, {seq, b}, {2})
  fails("step: takes no argument, got number", seq.step, seq, 1)
  fails("step: called on a CosineAnnealingLR, not a SequentialLR (called with '.'?): use sched:step()",
        seq.step, b)
end

os.exit(lu.LuaUnit.run(), true)
