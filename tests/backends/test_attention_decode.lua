-- test_attention_decode.lua: the fused attention's decode kernel
-- (vm/cpu/attention_decode.c: up to 8 queries, float32, bfloat16 or
-- float16, d_k and d_v multiples of 8, on 16 lanes where the CPU has
-- AVX-512 and they are multiples of 16, no mask) against a float64
-- reference made of plain tensor ops (matmul, masked_fill, softmax): query
-- and key counts around its 8-key steps, causal with n_q > 1 and n_q > n_k, keys split
-- across threads and merged, views as a KV cache and heads give them,
-- NaN, scores far apart, the log-sum-exps autograd reads (gradients against
-- float64 autograd), and a grouped-query decode step from a bfloat16 cache.
-- On a CPU without AVX2 the same calls take the general path: the values
-- asserted are the same.
local lu = require "luaunit"

qkv.manual_seed(4901)

-- the reference: softmax(q k^T / sqrt(d) [causal, aligned to the last
-- key]) v in float64; a row with no key gives 0
local function ref(q, k, v, causal)
  q, k, v = q:double(), k:double(), v:double()
  local nq, nk = q.shape[#q.shape - 1], k.shape[#k.shape - 1]
  local s = q:matmul(k:transpose(-2, -1)) * (1 / math.sqrt(q.shape[#q.shape]))
  if causal then
    local keep = qkv.ones(nq, nk, "bool"):tril(nk - nq)
    s = s:masked_fill(keep:logical_not(), -math.huge)
  end
  local w = qkv.softmax(s, -1)
  return w:masked_fill(w:ne(w), 0):matmul(v)
end

local function allnan(t) return t:ne(t):all():item() end

local TOL = {float32 = 1e-5, bfloat16 = 1.6e-2, float16 = 2e-3}

local function near(got, want, tol, what)
  lu.assertEquals(got.shape, want.shape, what .. ": shape")
  local d = (got:double() - want):abs():max():item()
  lu.assertTrue(d <= tol, ("%s: max |got - want| = %.3g > %.3g"):format(what, d, tol))
end

local function check(q, k, v, causal, what)
  local dt = q.dtype
  local got = qkv.attention(q, k, v, {causal = causal, weights = false})
  lu.assertEquals(got.dtype, dt, what .. ": dtype")
  near(got, ref(q, k, v, causal), TOL[dt], what)
end

TestDecode = {}

function TestDecode:testShapes()
  for _, dt in ipairs{"float32", "bfloat16", "float16"} do
    for _, nq in ipairs{1, 3, 4, 5, 8} do
      for _, nk in ipairs{1, 7, 8, 9, 64, 300} do
        for _, d in ipairs{{8, 8}, {64, 64}, {128, 128}, {16, 40}, {48, 80}} do
          for _, causal in ipairs{false, true} do
            local q = qkv.randn(2, nq, d[1]):to(dt)
            local k, v = qkv.randn(2, nk, d[1]):to(dt), qkv.randn(2, nk, d[2]):to(dt)
            check(q, k, v, causal, ("%s nq %d nk %d d %d/%d causal %s"):format(dt, nq, nk, d[1], d[2],
                                                                            tostring(causal)))
          end
        end
      end
    end
  end
end

function TestDecode:testCausalRowsWithNoKey()
  -- n_q 4 > n_k 2: queries 1 and 2 keep no key (aligned to the last key)
  local q, k, v = qkv.randn(1, 4, 16), qkv.randn(1, 2, 16), qkv.randn(1, 2, 16)
  local got = qkv.attention(q, k, v, {causal = true, weights = false})
  lu.assertEquals(got[{1, {1, 2}}]:abs():max():item(), 0)
  near(got, ref(q, k, v, true), 1e-5, "rows with no key")
end

function TestDecode:testSplitsAcrossThreads()
  local was = qkv.get_num_threads()
  -- one batch item (fewer than the threads): its keys split and merged
  for _, threads in ipairs{1, 2, 4} do
    qkv.set_num_threads(threads)
    for _, dt in ipairs{"float32", "bfloat16", "float16"} do
      local q = qkv.randn(1, 4, 64):to(dt)
      local k, v = qkv.randn(1, 5000, 64):to(dt), qkv.randn(1, 5000, 64):to(dt)
      check(q, k, v, false, dt .. " one item, " .. threads .. " threads")
      check(q, k, v, true, dt .. " one item causal, " .. threads .. " threads")
      -- three items on 2 threads: two splits each
      local q3, k3, v3 = qkv.randn(3, 2, 32), qkv.randn(3, 1500, 32), qkv.randn(3, 1500, 32)
      check(q3:to(dt), k3:to(dt), v3:to(dt), false, dt .. " three items, " .. threads .. " threads")
    end
  end
  -- a split whose every key is past the causal limit leaves nothing: n_q 8
  -- against 1100 keys, the first query keeps 1093 of them
  qkv.set_num_threads(4)
  local q, k, v = qkv.randn(1, 8, 16), qkv.randn(1, 1100, 16), qkv.randn(1, 1100, 16)
  check(q, k, v, true, "causal splits")
  qkv.set_num_threads(was)
end

function TestDecode:testViews()
  -- a cache's filled part (rows of a longer buffer), heads transposed out
  -- of (B, n, H, d), K and V broadcast over the batch
  local buf = qkv.randn(2, 3, 100, 32)
  local k, v = buf:narrow(3, 1, 70), buf:narrow(3, 11, 70)
  check(qkv.randn(2, 3, 1, 32), k, v, true, "cache views")
  local x = qkv.randn(2, 90, 3, 32)
  check(qkv.randn(2, 3, 4, 32), x:transpose(2, 3), x:transpose(2, 3), false, "heads transposed")
  local kb, vb = qkv.randn(1, 1, 50, 32), qkv.randn(1, 1, 50, 32)
  check(qkv.randn(2, 3, 2, 32), kb:expand(2, 3, 50, 32), vb:expand(2, 3, 50, 32), false, "broadcast")
  -- bfloat16 views
  local b16 = buf:to("bfloat16")
  check(qkv.randn(2, 3, 1, 32):to("bfloat16"), b16:narrow(3, 1, 70), b16:narrow(3, 11, 70), true,
        "bfloat16 cache views")
end

function TestDecode:testNaNAndFarScores()
  local was = qkv.get_num_threads()
  qkv.set_num_threads(2)
  local q, k, v = qkv.randn(1, 3, 16), qkv.randn(1, 2000, 16), qkv.randn(1, 2000, 16)
  -- a NaN in one query: its row is NaN, the others are not
  local qn = q:clone()
  qn[{1, 2, 5}] = 0 / 0
  local got = qkv.attention(qn, k, v, {weights = false})
  lu.assertTrue(allnan(got[{1, 2}]), "the NaN query's row")
  near(got[{1, {1, 1}}], ref(q, k, v)[{1, {1, 1}}], 1e-5, "the other rows")
  -- a NaN in one key far into the keys (another split): every row is NaN
  local kn = k:clone()
  kn[{1, 1900, 3}] = 0 / 0
  lu.assertTrue(allnan(qkv.attention(q, kn, v, {weights = false})), "a NaN key")
  -- causal: a NaN in the last key spoils only the last query's row (the
  -- others do not keep it)
  local q3, kc, vc = qkv.randn(1, 3, 16), k:narrow(2, 1, 10):clone(), v:narrow(2, 1, 10)
  kc[{1, 10, 1}] = 0 / 0
  local oc = qkv.attention(q3, kc, vc, {causal = true, weights = false})
  lu.assertTrue(allnan(oc[{1, 3}]), "the row that keeps the NaN key")
  near(oc:narrow(2, 1, 2), ref(q3, kc, vc, true):narrow(2, 1, 2), 1e-5, "the rows before it")
  -- scores up to ~1e3 apart, the largest ones late: the running max grows
  -- step after step and o is rescaled each time
  local ks = qkv.randn(1, 2000, 16) * qkv.linspace(0.01, 30, 2000):view(1, 2000, 1)
  check(q, ks, v, false, "growing scores")
  qkv.set_num_threads(was)
end

function TestDecode:testLogSumExpForTheBackward()
  -- autograd's forward keeps the log-sum-exps; the backward reads them
  for _, nk in ipairs{9, 3000} do
    local q64, k64, v64 = qkv.randn(2, 4, 32, "float64"), qkv.randn(2, nk, 32, "float64"),
                          qkv.randn(2, nk, 32, "float64")
    local g = qkv.randn(2, 4, 32, "float64")
    local function grads(q, k, v, fused)
      q, k, v = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
      local o = fused and qkv.attention(q, k, v, {causal = true, weights = false}) or ref(q, k, v, true)
      o:backward(g:to(o.dtype))
      return {q.grad, k.grad, v.grad}
    end
    local want = grads(q64, k64, v64, false)
    local got = grads(q64:float(), k64:float(), v64:float(), true)
    for i, name in ipairs{"dq", "dk", "dv"} do near(got[i], want[i], 1e-4, name .. " nk " .. nk) end
  end
end

function TestDecode:testGroupedDecodeFromABfloat16Cache()
  -- H 8 query heads on H_kv 2 cached heads: the step folds each group's 4
  -- heads into one call's rows
  local cache = qkv.nn.KVCache(1, 2, 600, 64, {dtype = "bfloat16"})
  local K, V = cache:update(qkv.randn(1, 2, 513, 64):to("bfloat16"), qkv.randn(1, 2, 513, 64):to("bfloat16"))
  local q = qkv.randn(1, 8, 1, 64):to("bfloat16")
  local got = qkv.attention(q, K, V, {enable_gqa = true, causal = true, weights = false})
  lu.assertEquals(got.dtype, "bfloat16")
  near(got, ref(q, K:repeat_interleave(4, 2), V:repeat_interleave(4, 2), true), 1.6e-2, "GQA bfloat16")
end

os.exit(lu.LuaUnit.run())
