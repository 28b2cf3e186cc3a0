-- test_clip_grad.lua: qkv.nn.clip_grad_norm_ (docs/autograd.md,
-- "Optimizers and schedulers") against torch.nn.utils.clip_grad_norm_
-- (tests/fixtures/optim/torch_clip_grad.lua, written by torch_clip_grad.py
-- there): the total norm it returns and the gradients it scales in place,
-- for norm types 2, 1, 3, 0.5 and math.huge, clipping and not, float64 to
-- 1e-12 and float32; a parameter without a grad left out; modules, pairs
-- and single tensors as params; a parameter held in two places (a tied
-- layer, a tied weight) counted and scaled once, as torch's parameters()
-- lists it; and its errors.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local F = dofile("tests/fixtures/optim/torch_clip_grad.lua")

local fails = R.fails
local clip = qkv.nn.clip_grad_norm_

local function near(got, want, rtol, what)
  if math.abs(got - want) > rtol * math.max(1, math.abs(want)) then
    lu.fail(string.format("%s: %.17g, torch has %.17g", what, got, want))
  end
end

local function near_all(t, want, rtol, what)
  local g, w = R.flatten(t:tolist()), R.flatten(want)
  lu.assertEquals(#g, #w, what)
  for i = 1, #w do near(g[i], w[i], rtol, what .. " element " .. i) end
end

---------------------------------------------------------------- PyTorch's values
TestAgainstTorch = {}

function TestAgainstTorch:testEveryConfiguration()
  lu.assertTrue(#F.runs >= 20)
  local clipped, kept = 0, 0
  for _, run in ipairs(F.runs) do
    local dt = run.dtype
    local rtol = dt == "float64" and 1e-12 or 1e-6
    local p = qkv.tensor(F.p, dt):requires_grad_()
    local q = qkv.tensor(F.q, dt):requires_grad_()
    local r = qkv.tensor(F.r, dt):requires_grad_()
    p.grad, q.grad = qkv.tensor(F.gp, dt), qkv.tensor(F.gq, dt)
    local total
    if run.norm_type then total = clip({p, q, r}, run.max_norm, run.norm_type)
    else total = clip({p, q, r}, run.max_norm) end
    local what = string.format("%s max_norm %g norm_type %s", dt, run.max_norm, tostring(run.norm_type))
    lu.assertTrue(qkv.is_tensor(total), what .. ": a tensor")
    lu.assertEquals(total.ndim, 0, what .. ": 0-d")
    lu.assertEquals(total.dtype, dt, what .. ": dtype")
    near(total:item(), run.total, rtol, what .. ": total norm")
    near_all(p.grad, run.gp, rtol, what .. ": p.grad")
    near_all(q.grad, run.gq, rtol, what .. ": q.grad")
    lu.assertNil(r.grad, what .. ": r has no grad")
    if p.grad:tolist()[1] ~= qkv.tensor(F.gp, dt):tolist()[1] then clipped = clipped + 1 else kept = kept + 1 end
  end
  lu.assertTrue(clipped >= 6 and kept >= 4, "the fixture clips and does not clip")
end

-- PyTorch's keywords: clip_grad_norm_(params, {max_norm =, norm_type =})
-- gives the positional form's total and gradients, bit for bit
function TestAgainstTorch:testKeywordsArePositions()
  for _, run in ipairs(F.runs) do
    local out = {}
    for form = 1, 2 do
      local p = qkv.tensor(F.p, run.dtype):requires_grad_()
      p.grad = qkv.tensor(F.gp, run.dtype)
      local total
      if form == 1 then total = clip({p}, run.max_norm, run.norm_type)
      else total = clip({p}, {max_norm = run.max_norm, norm_type = run.norm_type}) end
      out[form] = {total:item(), p.grad:tolist()}
    end
    lu.assertEquals(out[2], out[1], run.dtype .. " " .. run.max_norm)
  end
end

-- the same as a module, its parameters() and {name, tensor} pairs, and a
-- single tensor
function TestAgainstTorch:testParamsAsAModuleOrPairs()
  local run = F.runs[1]
  lu.assertEquals(run.dtype, "float64")
  local m = qkv.nn.Linear(3, 2, {dtype = "float64"})
  local function fill()
    -- weight is (out, in) = (2, 3): the transpose of the (3, 2) W it was
    m.weight.grad = qkv.tensor({{F.gq[1][1], F.gq[2][1], 0}, {F.gq[1][2], F.gq[2][2], 0}}, "float64")
    m.bias.grad = qkv.tensor({F.gp[1], F.gp[2]}, "float64")
  end
  fill()
  local want = clip({m.weight, m.bias}, 1.0):item()
  local gW, gb = m.weight.grad:tolist(), m.bias.grad:tolist()
  fill()
  lu.assertEquals(clip(m, 1.0):item(), want)
  lu.assertEquals(m.weight.grad:tolist(), gW)
  lu.assertEquals(m.bias.grad:tolist(), gb)
  fill()
  lu.assertEquals(clip(m:parameters(), 1.0):item(), want)
  lu.assertEquals(m.bias.grad:tolist(), gb)
  -- one tensor, and the options table in place of norm_type
  local p = qkv.tensor({3, 4}, "float64"):requires_grad_()
  p.grad = qkv.tensor({3, 4}, "float64")
  lu.assertEquals(clip(p, 1, {norm_type = 1}):item(), 7)
  near_all(p.grad, {3 / (7 + 1e-6), 4 / (7 + 1e-6)}, 1e-15, "one tensor")
  lu.assertEquals(clip(p, 1, math.huge, {error_if_nonfinite = true}):item(), 4 / (7 + 1e-6))
end

-- no gradient at all: torch's tensor(0.), nothing scaled; a float32 and a
-- float64 gradient: the total in float64
function TestAgainstTorch:testNoGradsAndMixedDtypes()
  local p = qkv.ones(3):requires_grad_()
  local total = clip({p}, 1)
  lu.assertEquals(total:item(), 0)
  lu.assertEquals(total.dtype, "float32")
  local a, b = qkv.ones(1):requires_grad_(), qkv.ones(1, "float64"):requires_grad_()
  a.grad, b.grad = qkv.full({1}, 3), qkv.full({1}, 4, "float64")
  total = clip({a, b}, 10)
  lu.assertEquals(total.dtype, "float64")
  lu.assertEquals(total:item(), 5)
end

-- a non-finite norm scales by it, as torch's, unless error_if_nonfinite
function TestAgainstTorch:testNonFinite()
  local p = qkv.tensor({1, 0 / 0}, "float64"):requires_grad_()
  p.grad = qkv.tensor({1, 0 / 0}, "float64")
  fails("clip_grad_norm_: the total norm of order 2 of the gradients is", clip, {p}, 1,
        {error_if_nonfinite = true})
  lu.assertEquals(p.grad:tolist()[1], 1, "an error scales nothing")
  local total = clip({p}, 1)
  lu.assertTrue(total:item() ~= total:item(), "nan")
  lu.assertTrue(p.grad:tolist()[1] ~= p.grad:tolist()[1], "scaled by nan")
  p.grad = qkv.tensor({1, 0 / 0}, "float64")
  local r = qkv.ones(1, "float64"):requires_grad_()
  r.grad = qkv.full({1}, 7, "float64")
  total = clip({p, r}, 1, math.huge)
  lu.assertTrue(total:item() ~= total:item(), "nan, also as the largest |g|")
  local q = qkv.tensor({1, math.huge}, "float64"):requires_grad_()
  q.grad = qkv.tensor({1, math.huge}, "float64")
  lu.assertEquals(clip({q}, 1):item(), math.huge)
  lu.assertEquals(q.grad:tolist()[1], 0, "scaled by 0")
end

---------------------------------------------------------------- shared
TestShared = {}

-- a Linear held twice in a Sequential (tied layers), and a weight that two
-- Linears hold: each tensor counted and scaled once, as torch's, whose
-- parameters() lists it once. The gradients are the fixture's, assigned
-- (weight is torch's (out, in), so it takes torch's gw as it is)
function TestShared:testTiedLayerAndTiedWeight()
  lu.assertEquals(#F.shared, 4)
  local nn = qkv.nn
  for _, run in ipairs(F.shared) do
    local what = string.format("max_norm %g norm_type %s", run.max_norm, tostring(run.norm_type))
    local lin = nn.Linear(3, 3, {dtype = "float64"})
    local m = nn.Sequential(lin, nn.Tanh(), lin)
    lin.weight.grad, lin.bias.grad = qkv.tensor(F.gw, "float64"), qkv.tensor(F.gb, "float64")
    local total = clip(m, run.max_norm, run.norm_type)
    near(total:item(), run.module.total, 1e-12, what .. ": tied layer's total")
    near_all(lin.weight.grad, run.module.gw, 1e-12, what .. ": tied layer's weight.grad")
    near_all(lin.bias.grad, run.module.gb, 1e-12, what .. ": tied layer's bias.grad")
    local a, b = nn.Linear(3, 3, {dtype = "float64"}), nn.Linear(3, 3, {dtype = "float64"})
    b.weight = a.weight
    a.weight.grad, a.bias.grad = qkv.tensor(F.gw, "float64"), qkv.tensor(F.gb, "float64")
    b.bias.grad = qkv.tensor(F.gb2, "float64")
    total = clip(nn.Sequential(a, b), run.max_norm, run.norm_type)
    near(total:item(), run.weight.total, 1e-12, what .. ": tied weight's total")
    near_all(a.weight.grad, run.weight.gw, 1e-12, what .. ": tied weight.grad")
    near_all(a.bias.grad, run.weight.gb, 1e-12, what .. ": a.bias.grad")
    near_all(b.bias.grad, run.weight.gb2, 1e-12, what .. ": b.bias.grad")
  end
end

-- a list that names a tensor twice counts it once too (torch's
-- clip_grad_norm_([p, q, p]) counts p twice and scales it twice, a total
-- sqrt(2) too big on a square norm); two parameters that hold one gradient
-- tensor count it for each and scale it once
function TestShared:testATensorListedTwice()
  local run = F.runs[1]
  lu.assertEquals(run.dtype, "float64")
  local p = qkv.tensor(F.p, "float64"):requires_grad_()
  local q = qkv.tensor(F.q, "float64"):requires_grad_()
  p.grad, q.grad = qkv.tensor(F.gp, "float64"), qkv.tensor(F.gq, "float64")
  near(clip({p, q, p}, run.max_norm):item(), run.total, 1e-12, "total")
  near_all(p.grad, run.gp, 1e-12, "p.grad")
  near_all(q.grad, run.gq, 1e-12, "q.grad")
  local a, b = qkv.ones(2, "float64"):requires_grad_(), qkv.ones(2, "float64"):requires_grad_()
  local g = qkv.tensor({3, 4}, "float64")
  a.grad, b.grad = g, g
  near(clip({a, b}, 1):item(), math.sqrt(50), 1e-15, "two parameters, one gradient")
  near_all(g, {3 / (math.sqrt(50) + 1e-6), 4 / (math.sqrt(50) + 1e-6)}, 1e-15, "scaled once")
end

---------------------------------------------------------------- errors
TestErrors = {}

function TestErrors:testArguments()
  local p = qkv.ones(2):requires_grad_()
  p.grad = qkv.ones(2)
  fails("clip_grad_norm_: max_norm must be a number >= 0 (math.huge clips nothing), got -1", clip, {p}, -1)
  fails("clip_grad_norm_: max_norm is missing: clip_grad_norm_(params, max_norm) or " ..
        "clip_grad_norm_(params, {max_norm = ...})", clip, {p})
  fails("clip_grad_norm_: max_norm is given twice, as an argument and as an option", clip, {p}, 1,
        {max_norm = 1})
  fails("clip_grad_norm_: max_norm must be a number >= 0 (math.huge clips nothing), got -1", clip, {p},
        {max_norm = -1})
  fails("clip_grad_norm_: max_norm must be a number >= 0 (math.huge clips nothing), got 1", clip, {p}, "1")
  fails("clip_grad_norm_: max_norm must be a number >= 0", clip, {p}, 0 / 0)
  fails("clip_grad_norm_: norm_type must be a number > 0, or math.huge for the largest |g|, got 0",
        clip, {p}, 1, 0)
  fails("clip_grad_norm_: norm_type must be a number > 0, or math.huge for the largest |g|, got inf",
        clip, {p}, 1, "inf")
  fails("clip_grad_norm_: norm_type must be a number > 0", clip, {p}, 1, -math.huge)
  fails("clip_grad_norm_: unknown option 'foreach'", clip, {p}, 1, 2, {foreach = true})
  fails("clip_grad_norm_: unknown option 'norm_typ' (did you mean 'norm_type'?)", clip, {p}, 1, {norm_typ = 1})
  fails("clip_grad_norm_: option 'error_if_nonfinite' must be a boolean, got number", clip, {p}, 1,
        {error_if_nonfinite = 1})
  fails("clip_grad_norm_: norm_type is given twice, as an argument and as an option", clip, {p}, 1, 2,
        {norm_type = 1})
  fails("clip_grad_norm_: parameters must be a module, a tensor or a list of tensors, got number", clip, 5, 1)
  fails("clip_grad_norm_: parameters[2] is a number, not a tensor", clip, {p, 5}, 1)
  fails("clip_grad_norm_: parameters[1] is a table, not a tensor", clip, {{"a", 1}}, 1)
  local closed
  do
    local c <close> = qkv.ones(2)
    closed = c
  end
  fails("clip_grad_norm_: parameters[2] is a closed tensor", clip, {p, closed}, 1)
  lu.assertEquals(p.grad:tolist(), {1, 1}, "a refused call scales nothing")
  local ok, msg = pcall(function() return clip({p}, -1) end)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "test_clip_grad.lua:", false, "the error names the script's line")
end

os.exit(lu.LuaUnit.run(), true)
