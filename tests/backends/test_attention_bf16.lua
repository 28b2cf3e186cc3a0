-- test_attention_bf16.lua: the fused attention (weights = false) in
-- bfloat16 on the CPU against the float64 reference of
-- tests/helpers/attn_ref.lua, to DESIGN's 5e-3 for half paths. On a CPU
-- with AMX this is the tile-unit kernel (vm/cpu/attention_amx.c), which
-- rounds the probabilities to bfloat16 for their product; elsewhere, and
-- under QKV_CPU=avx512, the dispatch computes in float32 and rounds once.
-- The cases take the kernel's edges: n_q and n_k off its blocks of 16 and
-- 64 and its query tiles of 384, d_k off its chunks of 32 (odd: no paired
-- loads), d_v off 16, causal both ways round, masks that empty rows,
-- negative and small scales, strided and transposed operands, K and V
-- broadcast over Q's batch, NaN in one query. A child under QKV_CPU=avx512
-- gives the float32 path's values for the same inputs: both must be within
-- the tolerance, and on a CPU whose flags list AMX they must differ, which
-- says that the tile kernel ran.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")
local shell = dofile("tests/helpers/shell.lua")
qkv.set_default_device("cpu")

local exe = arg and arg[-1] or "build/qkv"
local T, close = R.T, R.close
local TOL = 5e-3

-- the reference on the bfloat16 inputs' own values, in float64
local function check(name, Q, K, V, opts)
  local o = {weights = false}
  for k, v in pairs(opts) do o[k] = v end
  local got = qkv.attention(Q, K, V, o)
  lu.assertEquals(got.dtype, "bfloat16", name)
  local ro = {scale = opts.scale, causal = opts.causal, mask = opts.mask and T(opts.mask)}
  close(got, (R.attention(T(Q), T(K), T(V), ro)), TOL, name)
  return got
end

local function rnd(...) return qkv.randn(...):bfloat16() end

TestAttentionBf16 = {}

function TestAttentionBf16:testShapesAgainstFloat64()
  qkv.seed(5)
  local pad = qkv.padding({0, 7}, 45)
  local cases = {
    {"one query, one key", {1, 1, 1, 1}, {}},
    {"small", {5, 7, 16, 16}, {}},
    {"blocks' edges", {17, 65, 32, 17}, {}},
    {"d_k 1 (odd)", {33, 65, 1, 3}, {}},
    {"d_k 72, d_v 125, causal n_q > n_k", {40, 23, 72, 125}, {causal = true}},
    {"causal n_k > n_q", {23, 100, 16, 96}, {causal = true}},
    {"mask + causal, empty rows", {37, 45, 72, 80}, {mask = pad, causal = true}},
    {"negative scale", {30, 70, 64, 64}, {scale = -0.2}},
    {"small scale, d_k 128", {20, 150, 128, 40}, {scale = 0.05}},
    {"two query tiles, causal", {400, 90, 32, 16}, {causal = true}},
  }
  for _, c in ipairs(cases) do
    local nq, nk, dk, dv = table.unpack(c[2])
    check(c[1] .. " " .. R.sstr(c[2]), rnd(2, nq, dk), rnd(2, nk, dk), rnd(2, nk, dv), c[3])
  end
end

function TestAttentionBf16:testViewsAndBroadcasts()
  qkv.seed(6)
  local x = rnd(1, 150, 128)
  local H = qkv.heads(x, 2)                           -- (1, 2, 150, 64), rows 128 apart
  check("heads views, causal", H, H, H, {causal = true})
  check("K, V narrowed", H, H:narrow(3, 11, 100), H:narrow(3, 31, 100), {})
  -- features not adjacent: q, k and v transposed
  local Qt, Kt, Vt = rnd(24, 50), rnd(24, 70), rnd(40, 70)
  check("transposed operands", Qt:t(), Kt:t(), Vt:t(), {scale = 0.3})
  -- K and V of one batch for Q's 2 x 3, a mask for every batch
  local m = qkv.rand(20, 33):gt(0.4)
  check("K, V and mask broadcast", rnd(2, 3, 20, 24), rnd(33, 24), rnd(33, 8), {mask = m})
end

function TestAttentionBf16:testNaNStaysInItsQuery()
  qkv.seed(7)
  local Q, K, V = rnd(19, 32), rnd(40, 32), rnd(40, 16)
  Q[3][5] = 0 / 0
  local got = check("NaN in query 3", Q, K, V, {})
  local rows = got:float():ne(got:float()):any(2):tolist()
  for i = 1, 19 do lu.assertEquals(rows[i], i == 3, "row " .. i) end
end

-- the same inputs through the float32 path in a child process
function TestAttentionBf16:testTileKernelRanAndAgreesWithFloat32()
  local dir = shell.tmpdir()
  local code = [[
    qkv.seed(8)
    local Q, K, V = qkv.randn(2, 100, 64):bfloat16(), qkv.randn(2, 150, 64):bfloat16(),
                    qkv.randn(2, 150, 48):bfloat16()
    qkv.save(DIR .. "/q.npy", Q) qkv.save(DIR .. "/k.npy", K) qkv.save(DIR .. "/v.npy", V)
    qkv.save(DIR .. "/" .. NAME .. ".npy", qkv.attention(Q, K, V, {weights = false, causal = true}))
  ]]
  local function run(env, name)
    local out, rc = shell.sh(env .. shell.quote(exe) .. " -e " ..
                             shell.quote(("DIR, NAME = %q, %q\n"):format(dir, name) .. code))
    lu.assertEquals(rc, 0, out)
    return qkv.load(dir .. "/" .. name .. ".npy")
  end
  -- (QKV_CPU empty: the default even when the suite runs under a cap)
  local tiles, f32 = run("QKV_CPU= ", "default"), run("QKV_CPU=avx512 ", "f32")
  local Q, K, V = qkv.load(dir .. "/q.npy"), qkv.load(dir .. "/k.npy"), qkv.load(dir .. "/v.npy")
  os.execute("rm -rf " .. shell.quote(dir))
  local ref = R.attention(T(Q), T(K), T(V), {causal = true})
  close(tiles, ref, TOL, "default")
  close(f32, ref, TOL, "QKV_CPU=avx512")
  if shell.has_amx() then
    lu.assertFalse(qkv.eq(tiles, f32):all():item(),
                   "AMX is listed but the bfloat16 attention gave the float32 path's bits")
  end
end

function TestAttentionBf16:testTrainsThroughTheFusedForward()
  -- the backward runs in float32 from the bfloat16 forward's inputs
  qkv.seed(9)
  local Q = qkv.randn(2, 30, 32):bfloat16():requires_grad_()
  local K, V = rnd(2, 40, 32), rnd(2, 40, 16)
  local out = qkv.attention(Q, K, V, {weights = false, causal = true})
  out:sum():backward()
  local Qd = Q:detach():double():requires_grad_()
  qkv.attention(Qd, K:double(), V:double(), {weights = false, causal = true}):sum():backward()
  lu.assertEquals(Q.grad.dtype, "bfloat16")
  close(Q.grad, Qd.grad, 2e-2, "dQ")
end
