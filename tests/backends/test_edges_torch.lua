-- test_edges_torch.lua: NaN, ±inf, huge and tiny values and empty dims
-- through softmax, attention (both paths), gelu, the reductions, matmul and
-- nn.MultiHeadAttention, against PyTorch's answers for the same inputs
-- (tests/fixtures/edges/torch_edges.lua, written once by torch_edges.py
-- with Debian's python3-torch; this suite needs no torch). Where qkv
-- differs on purpose (docs/numerics.md) the test asserts
-- qkv's behaviour and that PyTorch's recorded answer is the one docs/numerics.md
-- says it is.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local F = dofile("tests/fixtures/edges/torch_edges.lua")

local DT = {"float32", "float64"}
local T, isnan, close = R.T, R.isnan, R.close

-- a reference array as a tensor (dtype nil: masks, bool); empty shapes
-- through zeros, which nested tables cannot spell
local function mk(A, dt)
  if R.numel(A.shape) == 0 then return qkv.zeros(A.shape, dt or "bool") end
  return qkv.tensor(R.nest(A.data, A.shape), dt)
end

-- the number of rows (along the last dim) of a reference array, and their length
local function rows_of(A)
  local s, n = A.shape, 1
  for i = 1, #s - 1 do n = n * s[i] end
  return n, s[#s]
end

-- PyTorch's weights with qkv's documented difference applied: a row whose
-- scores are all -inf is NaN in PyTorch (checked here) and zeros in qkv
local function zero_allinf(W, allinf, what)
  local out, nrows, n = R.copy(W.data), rows_of(W)
  lu.assertEquals(#allinf, nrows, what .. ": rows")
  for r = 1, nrows do
    for j = (r - 1) * n + 1, r * n do
      if allinf[r] == 1 then
        lu.assertNaN(W.data[j], what .. ": PyTorch on an all -inf row")
        out[j] = 0
      end
    end
  end
  return {shape = W.shape, data = out}
end

local function any(t) for _, v in ipairs(t) do if v == 1 then return true end end return false end

---------------------------------------------------------------- softmax

TestTorchSoftmax = {}

function TestTorchSoftmax:testEveryCase()
  for _, c in ipairs(F.softmax) do
    for _, dt in ipairs(DT) do
      local what = "softmax " .. c.name .. " " .. dt
      local ref = c[dt]
      local y = qkv.softmax(mk(c.x, dt))
      lu.assertEquals(y.dtype, dt, what)
      close(y, zero_allinf(ref.y, ref.allinf, what), nil, what)
    end
  end
end

-- docs/numerics.md's table rows, spelled out
function TestTorchSoftmax:testDocumentedRows()
  local function find(name)
    for _, c in ipairs(F.softmax) do if c.name == name then return c end end
  end
  local t = find("all -inf").float32.y.data
  lu.assertNaN(t[1])                               -- PyTorch: NaN
  lu.assertEquals(qkv.softmax(qkv.tensor{-math.huge, -math.huge}):tolist(), {0, 0})
  t = find("+inf").float64.y.data                  -- both: the row is NaN
  for i = 1, 3 do lu.assertNaN(t[i]) end
  t = find("+-1e30").float32.y.data                -- both: finite
  lu.assertEquals(t, {1, 0, 0})
end

---------------------------------------------------------------- attention

TestTorchAttention = {}

-- the options a case runs with: its mask, or causal = true (also run with
-- the mask the fixture spelled out for PyTorch), and scale
local function option_sets(c)
  local sets = {}
  local mask = c.mask and mk(c.mask) or nil
  sets[1] = {mask = mask, scale = c.scale}
  if c.causal then sets[2] = {causal = true, scale = c.scale} end
  return sets
end

-- a NaN in V at a key of weight 0: the matmul of the composed path gives
-- 0·NaN = NaN (as PyTorch); the fused kernel skips some such keys
local HIDDEN_V = {["NaN in V of a masked key"] = true,
                  ["NaN in V of a causally hidden key"] = true}

-- out with V's NaN rows zeroed: what a kernel that skips the key gives
local function dropped(c, dt)
  local V = R.map(c.V, function(v) return isnan(v) and 0 or v end)
  local opts = {mask = c.mask, scale = c.scale}
  local Q, K = R.T(mk(c.Q, dt)), R.T(mk(c.K, dt))
  return (R.attention(Q, K, R.T(mk(V, dt)), opts))
end

local function check_fused(c, dt, opts, out, what)
  local o = {mask = opts.mask, causal = opts.causal, scale = opts.scale, weights = false}
  local f = qkv.attention(mk(c.Q, dt), mk(c.K, dt), mk(c.V, dt), o)
  lu.assertEquals(f.dtype, dt, what)
  if not HIDDEN_V[c.name] then
    close(f, R.T(out), nil, what .. " fused = composed")
    return
  end
  -- each value: NaN (the key was multiplied by 0) or the key left out
  local got, alt = R.T(f).data, dropped(c, dt).data
  for i, v in ipairs(got) do
    if not isnan(v) then
      lu.assertAlmostEquals(v, alt[i], 1e-5 * math.abs(alt[i]) + 1e-6,
                            what .. " fused, element " .. i)
    end
  end
end

function TestTorchAttention:testEveryCase()
  for _, c in ipairs(F.attention) do
    for _, dt in ipairs(DT) do
      local ref = c[dt]
      local base = "attention " .. c.name .. " " .. dt
      local w_ref = zero_allinf(ref.w, ref.allinf, base)
      -- a zero row of weights gives a zero row of output (0·x, as matmul)
      local out_ref = any(ref.allinf) and R.matmul(w_ref, R.T(mk(c.V, dt))) or ref.out
      for k, opts in ipairs(option_sets(c)) do
        local what = base .. (k == 2 and " (causal = true)" or "")
        local out, w = qkv.attention(mk(c.Q, dt), mk(c.K, dt), mk(c.V, dt), opts)
        lu.assertEquals(out.dtype, dt, what)
        lu.assertEquals(w.dtype, dt, what)
        close(w, w_ref, nil, what .. " weights")
        close(out, out_ref, nil, what .. " out")
        check_fused(c, dt, opts, out, what)
      end
    end
  end
end

-- every all-masked row of the fixture: PyTorch NaN, qkv zeros in both paths
function TestTorchAttention:testMaskedRowsZeroInBothPaths()
  local seen = 0
  for _, c in ipairs(F.attention) do
    if any(c.float32.allinf) and R.numel(c.K.shape) > 0 then
      for _, dt in ipairs(DT) do
        for _, opts in ipairs(option_sets(c)) do
          local out, w = qkv.attention(mk(c.Q, dt), mk(c.K, dt), mk(c.V, dt), opts)
          opts.weights = false
          local f = qkv.attention(mk(c.Q, dt), mk(c.K, dt), mk(c.V, dt), opts)
          local nrows, n = rows_of(R.T(w))
          local dv = c.V.shape[2]
          for r = 1, nrows do
            if c[dt].allinf[r] == 1 then
              seen = seen + 1
              for j = 1, n do lu.assertEquals(w[r][j], 0, c.name) end
              for j = 1, dv do
                lu.assertEquals(out[r][j], 0, c.name)
                lu.assertEquals(f[r][j], 0, c.name .. " fused")
              end
            end
          end
        end
      end
    end
  end
  lu.assertTrue(seen >= 10, "masked rows checked: " .. seen)
end

---------------------------------------------------------------- gelu, reductions, matmul

TestTorchElementwise = {}

-- element by element (one norm over values from 1e-30 to 1e30 would hide
-- every small one), against PyTorch and against the exact x·Φ(x): qkv's
-- erfc form keeps its digits for negative x, where PyTorch's 1 + erf(x/√2)
-- cancels (docs/numerics.md), so below -2 only the exact value is the reference
function TestTorchElementwise:testGelu()
  for _, dt in ipairs(DT) do
    local y = qkv.gelu(mk(F.gelu.x, dt))
    lu.assertEquals(y.dtype, dt)
    local got, torch, tol = T(y).data, F.gelu[dt].data, R.TOL[dt]
    for i, x in ipairs(F.gelu.x.data) do
      local g, what = got[i], string.format("gelu(%g) %s", x, dt)
      local want = (x >= -2 or not R.isfin(x)) and torch[i] or R.gelu1(x)
      if isnan(want) then lu.assertNaN(g, what)
      elseif not R.isfin(want) then lu.assertEquals(g, want, what)
      else lu.assertAlmostEquals(g, want, tol * math.abs(want) + 1e-300, what) end
    end
  end
  -- PyTorch's float32 gelu(-5) is the cancelled -1.490e-6 (exact -1.4333e-6)
  local x5 = F.gelu.x.data[8]
  lu.assertEquals(x5, -5)
  lu.assertTrue(math.abs(F.gelu.float32.data[8] / R.gelu1(x5) - 1) > 0.03, "PyTorch's cancellation")
  lu.assertNaN(F.gelu.float32.data[2], "PyTorch: gelu(-inf) is NaN (-inf · 0)")
end

function TestTorchElementwise:testReductions()
  for _, c in ipairs(F.reduce) do
    for _, dt in ipairs(DT) do
      for op, want in pairs(c[dt]) do
        local what = op .. " of " .. c.name .. " " .. dt
        local x = mk(c.x, dt)
        if want == "error" then
          R.fails({op, "empty"}, function() return x[op](x) end)
        elseif dt == "float32" and c.name == "near float32 max"
               and (op == "mean" or op == "var" or op == "std") then
          -- documented: float32 sums accumulate in double, so the mean of
          -- {3e38, 3e38} is 3e38 (PyTorch: inf) and the spread 0
          lu.assertEquals(want, math.huge, "PyTorch: " .. what)
          local got = x[op](x):item()
          lu.assertAlmostEquals(got, op == "mean" and 3e38 or 0, 1e32, what)
        else
          local got = x[op](x):item()
          if isnan(want) then lu.assertNaN(got, what)
          elseif not R.isfin(want) then lu.assertEquals(got, want, what)
          else lu.assertAlmostEquals(got, want, 1e-6 * math.abs(want), what) end
        end
      end
    end
  end
end

function TestTorchElementwise:testMatmul()
  for _, c in ipairs(F.matmul) do
    for _, dt in ipairs(DT) do
      local y = qkv.matmul(mk(c.a, dt), mk(c.b, dt))
      lu.assertEquals(y.dtype, dt)
      close(y, c[dt], nil, "matmul " .. c.name .. " " .. dt)
    end
  end
end

---------------------------------------------------------------- nn.MultiHeadAttention

TestTorchMHA = {}

-- the fixture's weights loaded into qkv's module (as a state_dict), in dt
-- (load copies into the module's own tensors, converting as copy_ does, so
-- the module is made dt first)
local function mha(dt)
  local m = qkv.nn.MultiHeadAttention(4, 2):to(dt)
  local sd = {}
  for name, A in pairs(F.mha.W) do sd[name] = mk(A, dt) end
  return m:load(sd)
end

-- batch 1 (2 of 3 keys) agrees with torch.nn.MultiheadAttention; batch 2
-- (padding length 0) is NaN there and zeros here, in both paths
function TestTorchMHA:testPaddingAgainstTorch()
  local c = F.mha
  for _, dt in ipairs(DT) do
    local m, x = mha(dt), mk(c.x, dt)
    local pad = qkv.padding(c.lengths, 3)
    local out, w = m(x, {mask = pad})
    local fused = m(x, {mask = pad, weights = false})
    lu.assertEquals(out.dtype, dt)
    local o_ref, w_ref = c[dt].out, c[dt].w
    local half_o, half_w = #o_ref.data // 2, #w_ref.data // 2
    local first_o = {shape = {3, 4}, data = table.move(o_ref.data, 1, half_o, 1, {})}
    local first_w = {shape = {2, 3, 3}, data = table.move(w_ref.data, 1, half_w, 1, {})}
    close(out[1], first_o, nil, dt .. " out, batch 1")
    close(w[1], first_w, nil, dt .. " weights, batch 1")
    close(fused[1], first_o, nil, dt .. " fused, batch 1")
    for i = half_o + 1, #o_ref.data do lu.assertNaN(o_ref.data[i], "PyTorch, batch 2") end
    for i = half_w + 1, #w_ref.data do lu.assertNaN(w_ref.data[i], "PyTorch, batch 2") end
    lu.assertEquals(out[2]:abs():max():item(), 0, dt .. " out, batch 2")
    lu.assertEquals(w[2]:abs():max():item(), 0, dt .. " weights, batch 2")
    lu.assertEquals(fused[2]:abs():max():item(), 0, dt .. " fused, batch 2")
  end
end

function TestTorchMHA:testFixtureVersion()
  lu.assertStrContains(F.torch, "1.13")
end
