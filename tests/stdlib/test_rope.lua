-- test_rope.lua: qkv.rope and qkv.nn.RotaryEmbedding (stdlib/qkv/rope.lua)
-- against Hugging Face's two forms as PyTorch computes them
-- (tests/fixtures/nn/torch_rope.lua, written by torch_rope.py: LLaMA's
-- rotate_half and GPT-J's rotate_every_two, position_ids from 0), against
-- a float64 reference written here pair by pair with math.cos and
-- math.sin, the relative-position property, gradcheck, the device, and
-- the errors.
local lu = require "luaunit"
local T = dofile("tests/fixtures/nn/torch_rope.lua")

qkv.set_default_device("cpu")
qkv.manual_seed(49)

-- got within tol of want (the shapes equal): tests/helpers/variants_ref.lua's
local near = dofile("tests/helpers/variants_ref.lua").near

-- the reference: x (B, H, n, d) float64, pos a Lua list per batch item of
-- n positions from 1 (or one list for all), pairs (k, k + d/2) or (2k, 2k + 1)
local function reference(x, pos, base, interleaved)
  local X = x:tolist()
  local d = x:size(4)
  for b, xb in ipairs(X) do
    local pb = type(pos[1]) == "table" and pos[b] or pos
    for _, xh in ipairs(xb) do
      for i, row in ipairs(xh) do
        local r = {}
        for k = 0, d // 2 - 1 do
          local a = (pb[i] - 1) * base ^ (-2 * k / d)
          local u, w = k + 1, k + 1 + d // 2
          if interleaved then u, w = 2 * k + 1, 2 * k + 2 end
          r[u] = row[u] * math.cos(a) - row[w] * math.sin(a)
          r[w] = row[w] * math.cos(a) + row[u] * math.sin(a)
        end
        xh[i] = r
      end
    end
  end
  return qkv.tensor(X, "float64")
end

TestRope = {}

function TestRope:testHuggingFaceForms()
  for c, F in ipairs(T) do
    local x = qkv.tensor(F.x, "float64")
    local pos = qkv.tensor(F.pos, "int64") + 1           -- PyTorch's position_ids + 1
    local what = ("case %d (d %d, base %g)"):format(c, F.d, F.base)
    near(qkv.rope(x, pos, {base = F.base}), qkv.tensor(F.llama, "float64"), 1e-12, what .. " llama")
    near(qkv.rope(x, pos, {base = F.base, interleaved = true}), qkv.tensor(F.gptj, "float64"), 1e-12,
         what .. " gpt-j")
    local m = qkv.nn.RotaryEmbedding(F.d, {base = F.base, max_len = 200})
    near(m(x, pos), qkv.tensor(F.llama, "float64"), 1e-12, what .. " RotaryEmbedding")
    local mi = qkv.nn.RotaryEmbedding(F.d, {base = F.base, max_len = 200, interleaved = true})
    near(mi(x, pos), qkv.tensor(F.gptj, "float64"), 1e-12, what .. " RotaryEmbedding interleaved")
    -- float32 x: Hugging Face's angles in float32, ours in float64, both
    -- rounded to float32 (positions here are at most 104)
    local x32 = x:float()
    local got = qkv.rope(x32, pos, {base = F.base})
    lu.assertEquals(got.dtype, "float32")
    near(got, qkv.tensor(F.llama32, "float64"), 2e-5, what .. " llama float32")
    near(qkv.rope(x32, pos, {base = F.base, interleaved = true}), qkv.tensor(F.gptj32, "float64"), 2e-5,
         what .. " gpt-j float32")
    near(m(x32, pos), qkv.tensor(F.llama32, "float64"), 2e-5, what .. " RotaryEmbedding float32")
  end
end

function TestRope:testReference()
  local x = qkv.randn(2, 3, 6, 10, "float64")
  for _, inter in ipairs{false, true} do
    for _, base in ipairs{10000, 7.5} do
      local o = {base = base, interleaved = inter}
      local what = ("base %g interleaved %s"):format(base, tostring(inter))
      -- a first position: 1, ..., n and 40, ..., 45
      near(qkv.rope(x, 1, o), reference(x, {1, 2, 3, 4, 5, 6}, base, inter), 1e-13, what .. " from 1")
      near(qkv.rope(x, 40, o), reference(x, {40, 41, 42, 43, 44, 45}, base, inter), 1e-13, what .. " from 40")
      -- (n) for all, (B, n) per batch item, (1, n) broadcast
      local p = {3, 1, 4, 1, 5, 9}
      near(qkv.rope(x, qkv.tensor(p, "int64"), o), reference(x, p, base, inter), 1e-13, what .. " (n)")
      local pb = {{3, 1, 4, 1, 5, 9}, {2, 7, 1, 8, 2, 8}}
      near(qkv.rope(x, qkv.tensor(pb, "int32"), o), reference(x, pb, base, inter), 1e-13, what .. " (B, n)")
      near(qkv.rope(x, qkv.tensor({p}, "int64"), o), reference(x, p, base, inter), 1e-13, what .. " (1, n)")
      -- (n, d) and (B, n, d): the same rotation of each row
      local x3 = x:select(2, 2)
      near(qkv.rope(x3, qkv.tensor(pb, "int64"), o), reference(x, pb, base, inter):select(2, 2), 1e-13,
           what .. " x (B, n, d)")
      near(qkv.rope(x3:select(1, 1), 5, o), reference(x, {5, 6, 7, 8, 9, 10}, base, inter)[{1, 2}], 1e-13,
           what .. " x (n, d)")
    end
  end
end

function TestRope:testRelativePositions()
  -- q . k after rope depends on the positions' difference alone: the
  -- property rope is for
  local q, k = qkv.randn(1, 1, 1, 16, "float64"), qkv.randn(1, 1, 1, 16, "float64")
  for _, inter in ipairs{false, true} do
    local o = {interleaved = inter}
    local function dot(pq, pk) return (qkv.rope(q, pq, o) * qkv.rope(k, pk, o)):sum():item() end
    lu.assertAlmostEquals(dot(5, 3), dot(12, 10), 1e-12)
    lu.assertAlmostEquals(dot(1, 1), (q * k):sum():item(), 1e-12)   -- position 1 turns by 0
    lu.assertTrue(math.abs(dot(5, 3) - dot(5, 4)) > 1e-6, "another difference, another dot")
  end
end

function TestRope:testDecodeStepEqualsFullSequence()
  -- rotating the last token alone at position n equals the full sequence's last row
  local x = qkv.randn(2, 4, 9, 8)
  local m = qkv.nn.RotaryEmbedding(8, {max_len = 16})
  for _, f in ipairs{function(t, p) return qkv.rope(t, p) end, function(t, p) return m(t, p) end} do
    local full = f(x, 1)
    local last = f(x:narrow(3, 9, 1), 9)
    near(last, full:narrow(3, 9, 1), 1e-6, "decode step")
  end
end

-- an integer position reads cos and sin from tables kept per (d, base,
-- dtype, device) up to 8192 positions: the same values, bit for bit, as
-- the angles made for a positions tensor, before and after the tables
-- grow, at their end and past it (computed)
function TestRope:testKeptTablesGiveTheComputedValues()
  local t = qkv.test
  for _, dt in ipairs{"float32", "float64", "bfloat16"} do
    local x = qkv.randn(1, 2, 3, 12):to(dt)
    local function both(p, base)
      local o = base and {base = base} or nil
      t.assertTensorEqual(qkv.rope(x, p, o), qkv.rope(x, qkv.arange(p, p + 3, "int64"), o))
    end
    both(5)
    both(1000)                 -- the tables grow
    both(5)
    both(8190)                 -- the last positions kept
    both(8191)                 -- past them
    both(100000)
    both(7, 500)               -- another base: other tables
  end
end

function TestRope:testGradcheck()
  local x = qkv.randn(2, 2, 4, 6, "float64")
  local pos = qkv.tensor({{1, 2, 3, 4}, {9, 3, 2, 7}}, "int64")
  local m = qkv.nn.RotaryEmbedding(6, {max_len = 10})
  for _, inter in ipairs{false, true} do
    lu.assertTrue(qkv.test.gradcheck(function(a) return qkv.rope(a, pos, {interleaved = inter}) end, {x}))
  end
  lu.assertTrue(qkv.test.gradcheck(function(a) return m(a, pos) end, {x}))
  -- the gradient is the inverse rotation of the output's gradient
  local xr = x:clone():requires_grad_()
  local g = qkv.randn(2, 2, 4, 6, "float64")
  qkv.rope(xr, pos):backward(g)
  local back = reference(g, {{1, 0, -1, -2}, {-7, -1, 0, -5}}, 10000, false)  -- angles negated
  near(xr.grad, back, 1e-12, "gradient")
end

function TestRope:testDtypesAndDevice()
  local x = qkv.randn(2, 3, 5, 8)
  local want = qkv.rope(x:double(), 3)
  for _, dt in ipairs{"float16", "bfloat16"} do
    local got = qkv.rope(x:to(dt), 3)
    lu.assertEquals(got.dtype, dt)
    near(got, want, dt == "float16" and 1e-2 or 6e-2, dt)
  end
  local ok, why = qkv.cuda_available()
  if not ok then lu.skip("the device part needs the CUDA device: " .. tostring(why)) end
  local m = qkv.nn.RotaryEmbedding(8)
  local xc = x:cuda()
  local got = qkv.rope(xc, qkv.tensor({3, 4, 5, 6, 7}, "int64"))
  lu.assertEquals(got.device, "cuda")
  near(got:cpu(), want, 1e-5, "cuda rope")
  near(m(xc, 3):cpu(), want, 1e-5, "cuda RotaryEmbedding")
end

local function fails(f, want, what)
  local ok, err = pcall(f)
  lu.assertFalse(ok, what .. ": no error")
  lu.assertStrContains(tostring(err), want, false, what)
end

function TestRope:testErrors()
  local x = qkv.randn(2, 3, 5, 8)
  fails(function() return qkv.rope(x:narrow(-1, 1, 7), 1) end,
        "rope: x's last size d = 7 must be even (features turn in pairs), x is (2, 3, 5, 7)", "odd d")
  fails(function() return qkv.rope(x, qkv.tensor({1, 2, 3}, "int64")) end,
        "rope: positions (3,) do not match x (2, 3, 5, 8): they need n = 5", "positions' length")
  fails(function() return qkv.rope(x, 0) end, "rope: positions count from 1, got 0", "position 0")
  fails(function() return qkv.rope(x, qkv.tensor({1, 2, 0, 3, 4}, "int64")) end,
        "rope: positions count from 1, got 0", "a position 0 in a tensor")
  fails(function() return qkv.rope(x, qkv.tensor({1, 2, 3, 4, 5})) end,
        "rope: positions must be an integer >= 1 or an integer tensor (n) or (B, n), got float32 (5,)",
        "float positions")
  fails(function() return qkv.rope(x, 1.5) end, "rope: positions must be an integer", "a float position")
  fails(function() return qkv.rope(x, qkv.ones({3, 5}, "int64")) end,
        "rope: positions (3, 5) are (B, n), and x (2, 3, 5, 8) must be (B, ..., n, d) with that B", "B")
  fails(function() return qkv.rope(x:select(1, 1):select(1, 1), qkv.ones({1, 5}, "int64")) end,
        "rope: positions (1, 5) are (B, n)", "(B, n) positions for x (n, d)")
  fails(function() return qkv.rope(qkv.ones({5, 8}, "int64"), 1) end,
        "rope: x must be a floating tensor (..., n, d), got int64 (5, 8)", "integer x")
  fails(function() return qkv.rope("x", 1) end, "rope: x must be a tensor (..., n, d), got string", "x")
  fails(function() return qkv.rope(x, 1, {bas = 3}) end,
        "rope: unknown option 'bas' (did you mean 'base'?)", "option")
  fails(function() return qkv.rope(x, 1, {base = 0}) end, "rope: base must be a number > 0, got 0", "base")
  fails(function() return qkv.rope(x, 1, {interleaved = 1}) end,
        "rope: option 'interleaved' must be a boolean, got number", "interleaved")
  local m = qkv.nn.RotaryEmbedding(8, {max_len = 16})
  fails(function() return m(x, 13) end, "RotaryEmbedding: positions 13 to 17 pass max_len = 16", "max_len")
  fails(function() return m(x, qkv.tensor({1, 2, 3, 4, 17}, "int64")) end,
        "RotaryEmbedding: position 17 passes max_len = 16", "max_len in a tensor")
  fails(function() return m(x:narrow(-1, 1, 6), 1) end,
        "RotaryEmbedding: x (2, 3, 5, 6) has d = 6, not the dim = 8 it was made for", "dim")
  fails(function() return qkv.nn.RotaryEmbedding(7) end, "RotaryEmbedding: dim = 7 must be even", "odd dim")
  fails(function() return qkv.nn.RotaryEmbedding(8, {maxlen = 3}) end,
        "RotaryEmbedding: unknown option 'maxlen' (did you mean 'max_len'?)", "its options")
  fails(function() return qkv.nn.RotaryEmbedding(8, {max_len = 0}) end, "RotaryEmbedding: max_len", "max_len 0")
  local closed
  do local t <close> = qkv.randn(5, 8); closed = t end
  fails(function() return qkv.rope(closed, 1) end, "rope: x must be a tensor (..., n, d), got a closed tensor", "closed x")
  do local t <close> = qkv.ones({5}, "int64"); closed = t end
  fails(function() return qkv.rope(x, closed) end, "rope: positions must be an integer >= 1 or an integer tensor (n) or (B, n), got a closed tensor", "closed positions")
  -- the process goes on
  lu.assertEquals(qkv.rope(x, 1).shape, x.shape)
end

os.exit(lu.LuaUnit.run(), true)
