-- test_grad_scaler.lua: qkv.amp.GradScaler (docs/mixed-precision.md)
-- step for step against torch.amp.GradScaler (tests/fixtures/amp/
-- torch_grad_scaler.lua, written by torch_grad_scaler.py there): a small
-- float32 model trained 12 steps with a float16 loss whose gradient
-- overflows, an inf loss and a NaN gradient injected, and two optimizers on
-- one scaler (one skipped without the other, unscale_ by hand, a scale
-- that is not a power of two, update(new_scale)): the scale and growth
-- tracker exactly, the skipped steps exactly, the parameters to 1e-6. Then
-- the reciprocal's float32 rounding, state_dict through qkv.save and
-- qkv.load, a disabled scaler, and every misuse PyTorch refuses.
local lu = require "luaunit"
local F = dofile("tests/fixtures/amp/torch_grad_scaler.lua")

local GradScaler = qkv.amp.GradScaler

-- the error f raises, which must contain each of the plain strings given
local function fails(f, ...)
  local ok, err = pcall(f)
  lu.assertFalse(ok, "expected an error")
  err = tostring(err)
  for _, s in ipairs{...} do
    lu.assertStrContains(err, s)
  end
  return err
end

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

local function flat(t, out)
  out = out or {}
  if type(t) ~= "table" then out[#out + 1] = t; return out end
  for _, v in ipairs(t) do flat(v, out) end
  return out
end

local function assertNear(got, want, tol, what)
  local g, w = flat(got), flat(want)
  lu.assertEquals(#g, #w, what)
  for i = 1, #w do
    if not (math.abs(g[i] - w[i]) <= tol) then
      lu.fail(string.format("%s: element %d is %.9g, torch has %.9g", what, i, g[i], w[i]))
    end
  end
end

-- the fixture's model: Linear(4, 3) -> tanh -> Linear(3, 2), MSE loss
local function model()
  local p = {}
  for _, k in ipairs{"w1", "b1", "w2", "b2"} do p[k] = qkv.tensor(F[k]):requires_grad_() end
  p.list = {p.w1, p.b1, p.w2, p.b2}
  local x, y = qkv.tensor(F.x), qkv.tensor(F.y)
  function p.loss()
    local h = (x:matmul(p.w1:t()) + p.b1):tanh()
    return qkv.nn.mse_loss(h:matmul(p.w2:t()) + p.b2, y)
  end
  return p
end

local function snapshot(list)
  local out = {}
  for i, t in ipairs(list) do out[i] = t:tolist() end
  return out
end

local function same(a, b)
  local fa, fb = flat(a), flat(b)
  for i = 1, #fa do if fa[i] ~= fb[i] then return false end end
  return true
end

local function check_step(what, scaler, run_step, p, got_skipped)
  lu.assertEquals(scaler:get_scale(), run_step.scale, what .. ": scale")
  lu.assertEquals(scaler:_get_growth_tracker(), run_step.tracker, what .. ": growth tracker")
  lu.assertEquals(got_skipped, run_step.skipped, what .. ": skipped")
  for i, t in ipairs(p.list) do
    assertNear(t:tolist(), run_step.params[i], 1e-6, what .. ": parameter " .. i)
  end
end

---------------------------------------------------------------- PyTorch's runs
TestAgainstTorch = {}

-- one SGD optimizer, a float16 loss: its gradient is the scale in float16,
-- inf from 2^16 on
function TestAgainstTorch:test_half_loss_overflow_inf_and_nan()
  local run = F.half
  local p = model()
  local opt = qkv.optim.SGD(p.list, {lr = 0.1, momentum = 0.9})
  local opts = {}
  for k, v in pairs(run.opts) do opts[k] = v end
  local scaler = GradScaler("cpu", opts)
  for s, want in ipairs(run.steps) do
    local what = "half run, step " .. s
    opt:zero_grad()
    local loss = p.loss()
    if s == run.inf_loss then loss = loss * math.huge end
    local scaled = scaler:scale(loss:half())
    lu.assertEquals(scaled.dtype, "float32", what .. ": a 0-d float16 loss scales to float32")
    if want.scaled == math.huge then lu.assertEquals(scaled:item(), math.huge)
    else assertNear(scaled:item(), want.scaled, 1e-6 * want.scaled, what .. ": scaled loss") end
    scaled:backward()
    if s == run.nan[1] then p[run.nan[2]].grad[run.nan[3]][run.nan[4]] = 0 / 0 end
    local before = snapshot(p.list)
    lu.assertNil(scaler:step(opt))
    local skipped = same(before, snapshot(p.list))
    scaler:update()
    if want.loss ~= math.huge then assertNear(loss:item(), want.loss, 1e-6, what .. ": loss") end
    check_step(what, scaler, want, p, skipped)
  end
  lu.assertEquals(scaler:state_dict(), run.state_dict)
end

-- two optimizers on one scaler: a NaN in one's gradients skips that one
-- only, and update backs off for both
function TestAgainstTorch:test_two_optimizers_unscale_and_new_scale()
  local run = F.two
  local p = model()
  local opt1 = qkv.optim.Adam({p.w1, p.b1}, {lr = 0.01})
  local opt2 = qkv.optim.SGD({p.w2, p.b2}, {lr = 0.05})
  local scaler = GradScaler{device = "cpu", init_scale = run.opts.init_scale,
                            growth_factor = run.opts.growth_factor,
                            backoff_factor = run.opts.backoff_factor,
                            growth_interval = run.opts.growth_interval}
  lu.assertEquals(scaler:get_scale(), run.opts.init_scale, "init_scale as given before the first scale()")
  for s, want in ipairs(run.steps) do
    local what = "two-optimizer run, step " .. s
    opt1:zero_grad(); opt2:zero_grad()
    local loss = p.loss()
    scaler:scale(loss):backward()
    if s == run.nan[1] then p[run.nan[2]].grad[run.nan[3]][run.nan[4]] = 0 / 0 end
    if s == run.inf[1] then p[run.inf[2]].grad[run.inf[3]] = math.huge end
    if s % 2 == 1 then scaler:unscale_(opt1); scaler:unscale_(opt2) end
    local before = snapshot(p.list)
    scaler:step(opt1)
    scaler:step(opt2)
    local after = snapshot(p.list)
    local skipped = {same({before[1], before[2]}, {after[1], after[2]}),
                     same({before[3], before[4]}, {after[3], after[4]})}
    if s == run.new_scale[1] then scaler:update(run.new_scale[2]) else scaler:update() end
    assertNear(loss:item(), want.loss, 1e-6, what .. ": loss")
    check_step(what, scaler, want, p, skipped)
  end
  lu.assertEquals(scaler:state_dict(), run.state_dict)
end

---------------------------------------------------------------- numerics
TestNumerics = {}

-- the gradients times the float32 reciprocal of the scale (taken in
-- double), whatever the gradient's dtype: 1/3 is not what a float64
-- gradient gets
function TestNumerics:test_reciprocal_is_float32()
  local w = qkv.tensor({1, 2}, "float64"):requires_grad_()
  local v = qkv.tensor({1, 2}):requires_grad_()
  local opt = qkv.optim.SGD({w, v}, {lr = 0})
  local scaler = GradScaler("cpu", {init_scale = 3})
  scaler:scale(w:sum() + v:sum():double()):backward()
  lu.assertEquals(w.grad:tolist(), {3, 3})
  scaler:unscale_(opt)
  local r = f32(1 / 3)
  lu.assertNotEquals(r, 1 / 3)
  lu.assertEquals(w.grad:tolist(), {3 * r, 3 * r})
  lu.assertEquals(v.grad:tolist(), {f32(3 * r), f32(3 * r)})
end

-- the scale is stored in float32: init_scale and a new scale are rounded
-- once scale() has run, and a growth past float32's range is not taken
function TestNumerics:test_scale_in_float32()
  local w = qkv.tensor({1}):requires_grad_()
  local opt = qkv.optim.SGD({w}, {lr = 0})
  local scaler = GradScaler("cpu", {init_scale = 0.1, growth_interval = 1})
  lu.assertEquals(scaler:get_scale(), 0.1)
  scaler:scale(w:sum()):backward()
  lu.assertEquals(scaler:get_scale(), f32(0.1))
  scaler:step(opt); scaler:update()
  lu.assertEquals(scaler:get_scale(), f32(f32(0.1) * 2))
  scaler:update(2.0 ^ 127)
  lu.assertEquals(scaler:get_scale(), 2.0 ^ 127)
  opt:zero_grad()
  scaler:scale(w:sum() * 0):backward()
  scaler:step(opt); scaler:update()
  lu.assertEquals(scaler:get_scale(), 2.0 ^ 127, "a growth to inf is not taken")
  lu.assertEquals(scaler:_get_growth_tracker(), 0)
  scaler:update(qkv.tensor(3.3, "float32", "cpu"))
  lu.assertEquals(scaler:get_scale(), f32(3.3))
  scaler:update(qkv.tensor({5.5}, "float64", "cpu"))
  lu.assertEquals(scaler:get_scale(), 5.5)
end

-- scale's outputs: PyTorch's product by a 0-d float32 tensor
function TestNumerics:test_scale_outputs()
  local scaler = GradScaler("cpu", {init_scale = 4})
  local a, b = qkv.tensor({1, 2}), qkv.tensor(3, "float64")
  local out = scaler:scale({a, {b, qkv.tensor({1, 2}, "float16")}})
  lu.assertEquals(out[1]:tolist(), {4, 8})
  lu.assertEquals(out[2][1]:item(), 12)
  lu.assertEquals(out[2][1].dtype, "float64")
  lu.assertEquals(out[2][2].dtype, "float16", "a float16 tensor of dims keeps its dtype")
  lu.assertEquals(scaler:scale(qkv.tensor(2, "bfloat16")).dtype, "float32", "a 0-d bfloat16 becomes float32")
  lu.assertEquals(scaler:scale(qkv.tensor({1, 2}, "int64")).dtype, "float32")
  lu.assertEquals(#scaler:scale({}), 0)
  -- gradients flow through the product
  local x = qkv.tensor({1, 2}):requires_grad_()
  scaler:scale((x * x):sum()):backward()
  lu.assertEquals(x.grad:tolist(), {8, 16})
end

-- an inf in one gradient is found whatever else is there, and every
-- gradient is unscaled all the same (PyTorch does)
function TestNumerics:test_found_inf_and_skip()
  local w = qkv.tensor({1, 2}):requires_grad_()
  local u = qkv.tensor({5}):requires_grad_()
  local opt = qkv.optim.SGD({w, u}, {lr = 1})
  local scaler = GradScaler("cpu", {init_scale = 8, backoff_factor = 0.3})
  scaler:scale(w:sum() + u:sum()):backward()
  u.grad[1] = -math.huge
  scaler:unscale_(opt)
  lu.assertEquals(w.grad:tolist(), {1, 1})
  lu.assertNil(scaler:step(opt))
  lu.assertEquals(w:tolist(), {1, 2}, "skipped")
  scaler:update()
  lu.assertNotEquals(f32(8 * 0.3), 8 * 0.3)
  lu.assertEquals(scaler:get_scale(), f32(8 * 0.3), "backed off in float32")
end

---------------------------------------------------------------- state_dict
TestStateDict = {}

function TestStateDict:test_keys_and_before_scale()
  local scaler = GradScaler("cpu", {init_scale = 100, growth_interval = 7})
  local sd = scaler:state_dict()
  lu.assertEquals(sd, {scale = 100.0, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 7,
                       _growth_tracker = 0})
  lu.assertEquals(math.type(sd.growth_interval), "integer")
  local other = GradScaler("cpu")
  other:load_state_dict({scale = 0.1, growth_factor = 3, backoff_factor = 0.25, growth_interval = 5,
                         _growth_tracker = 2})
  lu.assertEquals(other:get_scale(), 0.1, "init_scale as loaded until scale() runs")
  lu.assertEquals(other:get_growth_factor(), 3)
  lu.assertEquals(other:get_backoff_factor(), 0.25)
  lu.assertEquals(other:get_growth_interval(), 5)
  lu.assertEquals(other:_get_growth_tracker(), 2)
  other:scale(qkv.tensor(1))
  lu.assertEquals(other:get_scale(), f32(0.1))
  lu.assertEquals(other:_get_growth_tracker(), 2)
end

-- saved with qkv.save mid-run and loaded into a fresh scaler, the run goes
-- on as the original's
function TestStateDict:test_round_trip_through_save()
  local function train(scaler, w, opt, steps)
    local scales = {}
    for s = 1, steps do
      opt:zero_grad()
      local loss = (w * w):sum()
      if s % 3 == 0 then loss = loss * math.huge end
      scaler:scale(loss):backward()
      scaler:step(opt)
      scaler:update()
      scales[s] = scaler:get_scale()
    end
    return scales
  end
  local w = qkv.tensor({1, 2}):requires_grad_()
  local opt = qkv.optim.SGD({w}, {lr = 0.01})
  local scaler = GradScaler("cpu", {init_scale = 1000.5, growth_factor = 3, growth_interval = 2})
  train(scaler, w, opt, 4)
  local path = os.tmpname()
  qkv.save(path, {scaler = scaler:state_dict(), opt = opt:state_dict(), w = w:detach()})
  local back = qkv.load(path)
  os.remove(path)
  lu.assertEquals(back.scaler, scaler:state_dict())
  lu.assertEquals(math.type(back.scaler.growth_interval), "integer")
  local want = train(scaler, w, opt, 5)
  local w2 = back.w:clone():requires_grad_()
  local opt2 = qkv.optim.SGD({w2}, {lr = 0.01})
  opt2:load_state_dict(back.opt)
  local scaler2 = GradScaler("cpu")
  scaler2:load_state_dict(back.scaler)
  lu.assertEquals(train(scaler2, w2, opt2, 5), want)
  lu.assertEquals(w2:tolist(), w:tolist())
end

---------------------------------------------------------------- disabled
TestDisabled = {}

function TestDisabled:test_everything_passes_through()
  local scaler = GradScaler{enabled = false}        -- "cuda" by default: no GPU needed when disabled
  lu.assertFalse(scaler:is_enabled())
  local w = qkv.tensor({1, 2}):requires_grad_()
  local opt = qkv.optim.SGD({w}, {lr = 0.5})
  local loss = (w * w):sum()
  lu.assertTrue(rawequal(scaler:scale(loss), loss))
  local list = {loss}
  lu.assertTrue(rawequal(scaler:scale(list), list))
  loss:backward()
  scaler:unscale_(opt)
  lu.assertEquals(w.grad:tolist(), {2, 4}, "unscale_ does nothing")
  scaler:step(opt)
  lu.assertEquals(w:tolist(), {0, 0}, "step steps")
  scaler:update()
  scaler:update(5)
  lu.assertEquals(scaler:get_scale(), 1.0)
  lu.assertEquals(scaler:state_dict(), {})
  scaler:load_state_dict({})
  lu.assertEquals(scaler:get_scale(), 1.0)
  -- an enabled scaler refuses a disabled one's state
  fails(function() GradScaler("cpu"):load_state_dict(scaler:state_dict()) end,
        "GradScaler:load_state_dict", "empty", "disabled")
end

---------------------------------------------------------------- errors
TestErrors = {}

local function setup(opts)
  local w = qkv.tensor({1, 2}):requires_grad_()
  local opt = qkv.optim.SGD({w}, {lr = 0.1})
  local scaler = GradScaler("cpu", opts)
  return scaler, opt, w
end

function TestErrors:test_stages()
  local scaler, opt, w = setup()
  fails(function() scaler:step(opt) end, "GradScaler:step", "did not use scaler:scale")
  fails(function() scaler:unscale_(opt) end, "GradScaler:unscale_", "did not use scaler:scale")
  fails(function() scaler:update() end, "GradScaler:update", "did not use scaler:scale")
  scaler:scale((w * w):sum()):backward()
  scaler:unscale_(opt)
  fails(function() scaler:unscale_(opt) end,
        "GradScaler:unscale_: unscale_() has already been called on this optimizer since the last update()")
  scaler:step(opt)
  fails(function() scaler:unscale_(opt) end, "GradScaler:unscale_: unscale_() is being called after step()")
  fails(function() scaler:step(opt) end, "GradScaler:step: step() has already been called since the last update()")
  scaler:update()
  fails(function() scaler:update() end, "GradScaler:update: no inf checks were recorded prior to update()")
  opt:zero_grad()
  fails(function() scaler:step(opt) end, "GradScaler:step: no inf checks were recorded for this optimizer")
  fails(function() scaler:step(opt, function() end) end, "closure use is not currently supported")
  fails(function() scaler:step(w) end, "GradScaler:step: optimizer must be a qkv.optim optimizer, got a tensor")
  fails(function() scaler:unscale_({}) end, "GradScaler:unscale_: optimizer must be a qkv.optim optimizer")
  fails(function() scaler.step(opt) end, "step: called on", "scaler:step()")
  fails(function() scaler.get_scale() end, "get_scale: called with '.', use scaler:get_scale()")
end

-- PyTorch refuses float16 gradients; none is changed before the refusal
function TestErrors:test_fp16_gradients()
  local w = qkv.tensor({1, 2}):requires_grad_()
  local h = qkv.tensor({1, 2}, "float16"):requires_grad_()
  local opt = qkv.optim.SGD({w, h}, {lr = 0.1})
  local scaler = GradScaler("cpu", {init_scale = 4})
  scaler:scale((w * w):sum() + h:float():sum()):backward()
  lu.assertEquals(h.grad.dtype, "float16")
  fails(function() scaler:unscale_(opt) end, "GradScaler:unscale_: Attempting to unscale FP16 gradients",
        "parameter 2")
  lu.assertEquals(w.grad:tolist(), {8, 16}, "unchanged")
  fails(function() scaler:step(opt) end, "GradScaler:step: Attempting to unscale FP16 gradients")
  lu.assertEquals(w:tolist(), {1, 2})
end

function TestErrors:test_scale_arguments()
  local scaler = setup()
  fails(function() scaler:scale(1.5) end, "GradScaler:scale", "must be a tensor or a list of tensors",
        "outputs is number")
  fails(function() scaler:scale({qkv.ones(1), {qkv.ones(1), "x"}}) end, "outputs[2][2] is string")
  local c = qkv.ones(2)
  do local _ <close> = c end
  fails(function() scaler:scale(c) end, "GradScaler:scale: outputs is a closed tensor")
end

function TestErrors:test_update_new_scale()
  local scaler, opt, w = setup()
  scaler:scale(w:sum()):backward()
  scaler:step(opt)
  fails(function() scaler:update("2") end, "GradScaler:update: new_scale should be a number or a 1-element float tensor")
  fails(function() scaler:update(qkv.ones(2)) end, "1-element", "float32 (2,)")
  fails(function() scaler:update(qkv.ones(1):requires_grad_()) end, "requires grad")
  fails(function() scaler:update(qkv.tensor({2}, "int64")) end, "int64")
  if qkv.cuda_available() then
    fails(function() scaler:update(qkv.tensor({2}, "float32", "cuda")) end, "on cpu", "got float32 (1,) on cuda")
  end
  lu.assertEquals(scaler:get_scale(), 65536, "a refused new_scale changes nothing")
end

function TestErrors:test_making()
  fails(function() GradScaler("cpu", {init_scal = 2}) end, "GradScaler: unknown option 'init_scal'",
        "did you mean 'init_scale'")
  fails(function() GradScaler{device = "cpu", growth_intervall = 2} end, "did you mean 'growth_interval'")
  fails(function() GradScaler("cpu", {growth_factor = 1}) end, "growth factor must be a number > 1.0")
  fails(function() GradScaler("cpu", {backoff_factor = 1}) end, "backoff factor must be a number in (0, 1)")
  fails(function() GradScaler("cpu", {growth_interval = 0}) end, "growth interval must be a whole number >= 1")
  fails(function() GradScaler("cpu", {growth_interval = 1.5}) end, "growth interval")
  fails(function() GradScaler("cpu", {init_scale = -1}) end, "init_scale must be a number > 0")
  fails(function() GradScaler("cpu", {enabled = 1}) end, "option 'enabled' must be a boolean")
  fails(function() GradScaler("tpu") end, "GradScaler: device must be \"cpu\" or \"cuda\", got tpu")
  fails(function() GradScaler("cpu", {device = "cpu"}) end, "device is given twice")
  fails(function() GradScaler("cpu", 5) end, "options must be a table")
  if not qkv.cuda_available() then
    fails(function() GradScaler() end, "GradScaler: device \"cuda\"", "no GPU", "GradScaler(\"cpu\")")
  else
    lu.assertTrue(GradScaler():is_enabled())
  end
end

function TestErrors:test_setters_and_load_state_dict()
  local scaler = setup()
  scaler:set_growth_factor(4); lu.assertEquals(scaler:get_growth_factor(), 4)
  scaler:set_backoff_factor(0.125); lu.assertEquals(scaler:get_backoff_factor(), 0.125)
  scaler:set_growth_interval(9); lu.assertEquals(scaler:get_growth_interval(), 9)
  fails(function() scaler:set_growth_factor(0.5) end, "GradScaler:set_growth_factor", "> 1.0")
  fails(function() scaler:set_backoff_factor("x") end, "GradScaler:set_backoff_factor")
  fails(function() scaler:set_growth_interval(-3) end, "GradScaler:set_growth_interval")
  local good = {scale = 8.0, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 3, _growth_tracker = 1}
  local function with(k, v)
    local sd = {}
    for key, x in pairs(good) do sd[key] = x end
    sd[k] = v
    return sd
  end
  fails(function() scaler:load_state_dict(with("scal", 8)) end, "unknown", "'scal'", "did you mean 'scale'")
  fails(function() scaler:load_state_dict(with("scale", nil)) end, "the state_dict has no 'scale'")
  fails(function() scaler:load_state_dict(with("scale", "big")) end, "'scale' must be a number > 0")
  fails(function() scaler:load_state_dict(with("_growth_tracker", 1.5)) end, "'_growth_tracker' must be a whole number")
  fails(function() scaler:load_state_dict(with("growth_factor", 0.9)) end, "growth factor")
  fails(function() scaler:load_state_dict(5) end, "the state_dict must be a table")
  lu.assertEquals(scaler:get_scale(), 65536, "a refused state changes nothing")
  lu.assertEquals(scaler:get_growth_interval(), 9)
end

os.exit(lu.LuaUnit.run())
