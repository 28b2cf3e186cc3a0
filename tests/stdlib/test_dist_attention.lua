-- test_dist_attention.lua: qkv.dist.ring_attention and ulysses_attention
-- (stdlib/qkv/dist/attention.lua). A world of one in this process (each
-- is qkv.attention there, gradients too; the argument errors), the rank
-- script dist/attention.lua alone, and on 2 and 4 ranks under Open MPI's
-- mpirun, where it checks every rank's block of the output and of the
-- gradients against qkv.attention on the whole sequence and prints "ok
-- <name>"; a rank that fails ends the job. There it also checks the
-- ring's layout (the zigzag under causal with even blocks, else the
-- blocks) and that the zigzag's work is even over the ranks. The ranks'
-- runs are skipped, with the reason, where mpirun or build/lib/qkv/mpi.so
-- is missing.
local lu = require "luaunit"
local shell = dofile("tests/helpers/shell.lua")
local mpi = dofile("tests/helpers/mpi.lua")
qkv.set_default_device("cpu")

local exe = arg and arg[-1] or "build/qkv"
local d = qkv.dist
local SCRIPT = "tests/stdlib/dist/attention.lua"

local function err(f, ...)
  local ok, e = pcall(f, ...)
  lu.assertFalse(ok)
  return tostring(e)
end

local function maxdiff(a, b) return (a - b):abs():max():item() end

TestDistAttentionWorldOfOne = {}

-- qkv.dist needs build/lib/qkv/mpi.so even for a world of one
function TestDistAttentionWorldOfOne:setUp()
  local ok, e = pcall(d.init)
  if not ok then lu.skip(tostring(e)) end
end

-- the gradients of (f(q, k, v) * G):sum() for copies of q, k, v
local function grads(f, q, k, v, G)
  local a, b, c = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
  local out = f(a, b, c)
  ;(out * G):sum():backward()
  return out, {a.grad, b.grad, c.grad}
end

function TestDistAttentionWorldOfOne:testEachIsAttention()
  qkv.manual_seed(3)
  local q = qkv.randn({2, 4, 6, 5}, "float64")
  local k = qkv.randn({2, 4, 3, 5}, "float64")
  local v = qkv.randn({2, 4, 3, 7}, "float64")
  local m = qkv.rand({6, 3}, "float64"):gt(0.4)
  m[2]:fill_(false)                              -- a query with no key
  local G = qkv.randn({2, 4, 6, 7}, "float64")
  for _, o in ipairs({{}, {causal = true}, {mask = m}, {mask = m, causal = true, scale = 0.25}}) do
    local want, wg = grads(function(a, b, c)
      return qkv.attention(a, b, c, {mask = o.mask, causal = o.causal, scale = o.scale, weights = false})
    end, q, k, v, G)
    for _, f in ipairs({d.ring_attention, d.ulysses_attention}) do
      local got, gg = grads(function(a, b, c) return f(a, b, c, o) end, q, k, v, G)
      lu.assertEquals(tostring(got.shape), "(2, 4, 6, 7)")
      lu.assertTrue(maxdiff(got, want) <= 1e-12)
      for i = 1, 3 do lu.assertTrue(maxdiff(gg[i], wg[i]) <= 1e-11, i) end
    end
  end
  -- the fully masked query gives zeros, not NaN
  local out = d.ring_attention(q, k, v, {mask = m})
  lu.assertEquals(out[1][1][2]:abs():max():item(), 0)
  lu.assertFalse(qkv.ne(out, out):any():item())          -- no NaN
end

function TestDistAttentionWorldOfOne:testNodes()
  local x = qkv.randn(1, 2, 3, 4, "float64"):requires_grad_()
  lu.assertEquals(tostring(d.ring_attention(x, x, x).grad_fn), "<RingAttentionBackward0>")
  lu.assertEquals(tostring(d.ulysses_attention(x, x, x).grad_fn), "<AllToAllBackward0>")
  lu.assertNil(qkv.no_grad(d.ring_attention, x, x, x).grad_fn)
  -- float32 too, the output in its dtype
  local y = qkv.randn(2, 3, 4)
  lu.assertEquals(d.ring_attention(y, y, y).dtype, "float32")
end

function TestDistAttentionWorldOfOne:testBadArguments()
  local t = qkv.zeros(2, 3, 4, "float64")
  local R, U = d.ring_attention, d.ulysses_attention
  lu.assertStrContains(err(R, 5, t, t), "dist.ring_attention: bad argument #1 (q: qkv.Tensor expected, got number)")
  lu.assertStrContains(err(U, t, "k", t), "dist.ulysses_attention: bad argument #2 (k: qkv.Tensor expected, got string)")
  local c
  do
    local z <close> = qkv.zeros(2, 2)
    c = z
  end
  lu.assertStrContains(err(R, t, t, c), "dist.ring_attention: bad argument #3 (v is a closed tensor)")
  lu.assertStrContains(err(R, qkv.zeros(4, "float64"), t, t),
    "dist.ring_attention: bad argument #1 (q must be (..., n_q, d), at least 2-D, got (4,))")
  lu.assertStrContains(err(U, t, qkv.zeros(3, 4), t),
    "dist.ulysses_attention: bad argument #2 (k must be (..., H, n_k, d), at least 3-D, got (3, 4))")
  lu.assertStrContains(err(R, t, qkv.zeros(2, 3, 5, "float64"), t),
    "dist.ring_attention: q (2, 3, 4) and k (2, 3, 5) must have the same d (4 ≠ 5)")
  lu.assertStrContains(err(R, t, t, qkv.zeros(2, 2, 4, "float64")),
    "dist.ring_attention: k (2, 3, 4) and v (2, 2, 4) must hold the same keys (n_k/P 3 ≠ 2)")
  lu.assertStrContains(err(R, t, qkv.zeros(3, 3, 4, "float64"), qkv.zeros(3, 3, 4, "float64")),
    "dist.ring_attention: the batch dims of q (2, 3, 4), k (3, 3, 4) and v (3, 3, 4) do not broadcast")
  lu.assertStrContains(err(R, t, t, t, {casual = true}),
    "dist.ring_attention: unknown option 'casual' (it has causal, mask, scale)")
  lu.assertStrContains(err(U, t, t, t, {weights = false}),
    "dist.ulysses_attention: unknown option 'weights' (it has causal, mask, scale)")
  lu.assertStrContains(err(R, t, t, t, true), "dist.ring_attention: options must be a table, got boolean")
  lu.assertStrContains(err(R, t, t, t, {causal = 1}), "option 'causal' must be a boolean, got number")
  lu.assertStrContains(err(R, t, t, t, {scale = "1"}), "option 'scale' must be a number, got string")
  lu.assertStrContains(err(R, t, t, t, {mask = {1}}), "option 'mask' must be a tensor, got table")
  lu.assertStrContains(err(R, t, t, t, {mask = qkv.ones(3, 2, "bool")}),
    "dist.ring_attention: mask (3, 2) must be this rank's rows of the global mask, broadcastable " ..
    "to (..., n_q/P, n_k) = (..., 3, 3) (1 ranks)")
  -- PyTorch's additive float mask is not taken as qkv's (true or 1 = may attend)
  local additive = qkv.where(qkv.causal(3, 3), 0.0, -math.huge):double()
  for name, f in pairs({ring_attention = R, ulysses_attention = U}) do
    lu.assertStrContains(err(f, t, t, t, {mask = additive}), "dist." .. name .. ": mask is "
      .. "float64 (3, 3) with values other than 0 and 1 (from -inf to 0.0)")
    lu.assertStrContains(err(f, t, t, t, {mask = qkv.zeros(3, 3, "float64")}),
      "dist." .. name .. ": mask is float64 (3, 3) and all 0")
  end
  lu.assertStrContains(err(U, t, t, t, {mask = qkv.ones(3, 3, 3, "bool")}),
    "dist.ulysses_attention: mask (3, 3, 3): its heads (dim -3, 3) must be q's (2) or 1")
  lu.assertStrContains(err(U, t, qkv.zeros(1, 3, 4, "float64"), t),
    "dist.ulysses_attention: bad argument #2 (k (1, 3, 4): its heads (dim -3, 1) must be q's (2)")
  local h = qkv.zeros(2, 3, 4, "float16")
  lu.assertStrContains(err(R, h, h, h), "dist.ring_attention: q, k and v must be float32 or " ..
    "float64, one dtype (the fused kernel's, with its log-sum-exps), got float16, float16 and float16")
  lu.assertStrContains(err(R, t, t:float(), t), "got float64, float32 and float64")
  -- ulysses takes what attention takes
  lu.assertEquals(U(h, h, h).dtype, "float16")
  -- the error points at the caller's line
  lu.assertStrContains(err(R, t, t, t, {casual = true}), "test_dist_attention.lua:")
  lu.assertStrContains(err(U, t, t, t, {casual = true}), "test_dist_attention.lua:")
end

function TestDistAttentionWorldOfOne:testRankScriptAlone()
  local out, code = shell.exe(exe, SCRIPT)
  lu.assertEquals(code, 0, out)
  local oks = mpi.oks(out)
  lu.assertEquals(oks["done"], 1, out)
  lu.assertEquals(oks["ring causal dk"], 1, out)
  lu.assertEquals(oks["ulysses mask dq"], 1, out)
end

TestDistAttentionRanks = {}

function TestDistAttentionRanks:setUp() mpi.need(lu, exe) end

local function ranks(n)
  local out, code = mpi.run(exe, n, SCRIPT, 300)
  local want = {"ring blocks differ", "ring blocks differ named", "ulysses blocks differ",
                "ring options differ", "ring mask values differ", "ulysses mask values differ",
                "ulysses heads", "ring dtype", "ring mask batch dims", "ring no graph",
                "ulysses no graph", "done"}
  for _, case in ipairs({"plain", "causal", "mask", "mask causal", "nq=2nk causal",
                         "nk=2nq causal", "nq=2nk", "key mask", "scale", "float32"}) do
    for _, which in ipairs({"ring", "ulysses"}) do
      for _, part in ipairs({"out", "dq", "dk", "dv"}) do
        want[#want + 1] = which .. " " .. case .. " " .. part
      end
    end
  end
  local ring = {"nk=3nq causal mask", "2-D", "k broadcast", "zigzag", "zigzag off", "zigzag mask",
                "zigzag nk=2nq", "zigzag nk=2nq off", "zigzag nq=2nk", "zigzag nq=2nk off",
                "odd blocks", "odd keys", "plain even"}
  for _, case in ipairs(ring) do
    for _, part in ipairs({"out", "dq", "dk", "dv"}) do want[#want + 1] = "ring " .. case .. " " .. part end
  end
  -- the ring's layout, its backward's work the forward's, and how even
  for _, case in ipairs({"causal", "mask causal", "nq=2nk causal", "nk=2nq causal",
                         "nk=3nq causal mask", "scale", "2-D", "float32", "zigzag", "zigzag off",
                         "zigzag mask", "zigzag nk=2nq", "zigzag nk=2nq off", "zigzag nq=2nk",
                         "zigzag nq=2nk off", "odd blocks", "odd keys", "plain even"}) do
    want[#want + 1] = "ring " .. case .. " layout"
    want[#want + 1] = "ring " .. case .. " backward work"
    want[#want + 1] = "ring " .. case .. " work total"
  end
  for _, case in ipairs({"mask causal", "nk=2nq causal", "nk=3nq causal mask", "zigzag",
                         "zigzag mask", "zigzag nk=2nq", "plain even"}) do
    want[#want + 1] = "ring " .. case .. " balanced"
  end
  want[#want + 1] = "ring zigzag off unbalanced"
  want[#want + 1] = "ring zigzag nk=2nq off unbalanced"
  want[#want + 1] = "ring zigzag calls"
  want[#want + 1] = "zigzag nq=2nk spread"
  mpi.check(lu, out, code, n, want)
end

function TestDistAttentionRanks:testOn2() ranks(2) end
function TestDistAttentionRanks:testOn4() ranks(4) end

os.exit(lu.LuaUnit.run(), true)
