-- test_attention.lua: qkv.attention(Q, K, V [, opts]) (README "Attention
-- primitives") against a float64 plain-loop reference in Lua
-- (tests/helpers/attn_ref.lua) on random shapes and data from a fixed-seed Lua RNG:
-- both returns (out, weights), every mask shape, causal, fully masked rows,
-- huge logits, float64; then the fused path (weights = false) against the
-- unfused one, also at N = 2048; seed 001's worked examples; bad inputs.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")

math.randomseed(20250613)
local T, close, exact, fails, sstr = R.T, R.close, R.exact, R.fails, R.sstr

local function cat(a, ...) local r = R.copy(a) for _, v in ipairs{...} do r[#r + 1] = v end return r end
local function with(opts, k, v) local r = {} for a, b in pairs(opts) do r[a] = b end r[k] = v return r end
local function rbool(shape, p)
  local d = {} for i = 1, R.numel(shape) do d[i] = math.random() < (p or 0.6) end
  return qkv.tensor(R.nest(d, shape))
end

---------------------------------------------------------------- the cases

-- each case: name, opts for qkv.attention (mask a tensor, causal, scale)
-- and Q, K, V (tensors); the reference reads the tensors back with tolist
local CASES = {}
local function case(name, opts, Q, K, V)
  CASES[#CASES + 1] = {name = name .. " " .. Q.dtype, Q = Q, K = K, V = V, opts = opts}
end
local function rt(shape, dt, lo, hi) return (R.mk(shape, dt, lo, hi)) end

-- random Q (qs), K (ks), V (vs) of one dtype
local function rqkv(qs, ks, vs, dt) return rt(qs, dt), rt(ks, dt), rt(vs, dt) end

-- a true self-attention: Q, K, V projected from one X
local function selfqkv(n, dm, dk, dv, dt)
  local X = rt({n, dm}, dt)
  return qkv.project(X, rt({dm, dk}, dt)), qkv.project(X, rt({dm, dk}, dt)),
         qkv.project(X, rt({dm, dv}, dt), rt({dv}, dt))
end

-- Q scaled by 1e3 and K by 10 (scores ~1e4..1e5) with every row's two
-- largest scores at least 50 apart, so that float32 rounding of the scores
-- (~1e-2 here) cannot move weight
local function hugeqkv(nq, nk, d, dt)
  for _ = 1, 100 do
    local Q, K, V = rqkv({nq, d}, {nk, d}, {nk, d}, dt)
    Q, K = Q * 1e3, K * 10
    local S, ok, big = R.scores(T(Q), T(K)), true, 0
    for i = 0, nq - 1 do
      local a, b = -math.huge, -math.huge
      for j = 1, nk do
        local v = S.data[i * nk + j]
        if v > a then a, b = v, a elseif v > b then b = v end
      end
      ok = ok and a - b > 50
      big = math.max(big, math.abs(a))
    end
    if ok and big > 3e4 then return Q, K, V end
  end
  error("test bug: no well-separated huge scores")
end

for _, dt in ipairs{"float32", "float64"} do
  case("self", {}, selfqkv(5, 6, 4, 4, dt))
  case("cross n_q 3 n_k 7", {}, rqkv({3, 5}, {7, 5}, {7, 5}, dt))
  case("d_v ≠ d_k", {}, rqkv({4, 3}, {6, 3}, {6, 7}, dt))
  case("n_q = 1", {}, rqkv({1, 4}, {5, 4}, {5, 3}, dt))
  case("n_k = 1", {}, rqkv({4, 4}, {1, 4}, {1, 3}, dt))
  case("n_q = n_k = 1", {}, rqkv({1, 4}, {1, 4}, {1, 2}, dt))
  case("batch, heads", {}, rqkv({2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 3}, dt))
  case("K, V broadcast", {}, rqkv({2, 3, 4, 5}, {6, 5}, {6, 3}, dt))
  case("K per head, V per batch", {}, rqkv({2, 3, 4, 5}, {3, 6, 5}, {2, 1, 6, 3}, dt))
  case("Q broadcast", {}, rqkv({4, 5}, {2, 6, 5}, {2, 6, 3}, dt))
  do -- non-contiguous: Q (2, 4, 5) from (4, 2, 5), K (2, 6, 5) from (2, 5, 6), V expanded
    local q, k, v = rt({4, 2, 5}, dt), rt({2, 5, 6}, dt), rt({1, 6, 3}, dt)
    case("non-contiguous", {}, q:transpose(1, 2), k:transpose(2, 3), v:expand(2, 6, 3))
    case("transposed 2-D", {causal = true}, rt({5, 4}, dt):t(), rt({5, 6}, dt):t(), rt({3, 6}, dt):t())
  end
  do -- every mask shape
    local Q, K, V = rqkv({3, 4, 5}, {3, 6, 5}, {3, 6, 4}, dt)
    case("padding mask", {mask = qkv.padding({6, 2, 4})}, Q, K, V)
    case("padding mask, n given", {mask = qkv.padding({5, 1, 3}, 6)}, Q, K, V)
    case("causal mask (n_q, n_k)", {mask = qkv.causal(4, 6)}, Q, K, V)
    case("0/1 float mask", {mask = rbool({3, 4, 6}):to(dt)}, Q, K, V)
    case("0/1 int64 mask", {mask = rbool({4, 6}):to("int64")}, Q, K, V)
    case("mask + causal", {mask = qkv.padding({6, 2, 4}), causal = true}, Q, K, V)
    case("non-contiguous mask", {mask = rbool({6, 4}):t()}, Q, K, V)
    case("expanded per-head mask", {mask = rbool({1, 4, 6}):expand(3, 4, 6)}, Q, K, V)
    case("fully masked rows", {mask = qkv.padding({0, 3, 6})}, Q, K, V)
    case("fully masked rows (row mask)", {mask = qkv.tensor{{1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0},
         {0, 1, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}}}, Q, K, V)
    local Q4, K4, V4 = rqkv({2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 4}, dt)
    case("per-head mask", {mask = rbool({2, 3, 4, 6})}, Q4, K4, V4)
    case("padding (B, 1, 1, n) on heads", {mask = qkv.padding({3, 6}):unsqueeze(2)}, Q4, K4, V4)
    case("per-head + causal", {mask = rbool({2, 3, 4, 6}, 0.8), causal = true}, Q4, K4, V4)
  end
  case("causal n_q = n_k", {causal = true}, rqkv({2, 5, 4}, {2, 5, 4}, {2, 5, 3}, dt))
  case("causal n_q < n_k", {causal = true}, rqkv({2, 3, 4}, {2, 7, 4}, {2, 7, 3}, dt))
  case("causal n_q > n_k (leading rows empty)", {causal = true}, rqkv({6, 4}, {3, 4}, {3, 2}, dt))
  case("causal 1 token vs cache", {causal = true}, rqkv({2, 1, 4}, {2, 5, 4}, {2, 5, 4}, dt))
  case("causal = false", {causal = false}, rqkv({4, 4}, {4, 4}, {4, 4}, dt))
  case("huge logits", {}, hugeqkv(5, 7, 6, dt))
  case("huge logits, causal", {causal = true}, hugeqkv(6, 6, 4, dt))
  case("scale 0.1", {scale = 0.1}, rqkv({4, 5}, {6, 5}, {6, 3}, dt))
  case("scale -2", {scale = -2}, rqkv({4, 5}, {6, 5}, {6, 3}, dt))
  case("scale 0 (uniform)", {scale = 0}, rqkv({4, 5}, {6, 5}, {6, 3}, dt))
end

local function reference(c)
  local ro = {scale = c.opts.scale, causal = c.opts.causal}
  if c.opts.mask then ro.mask = T(c.opts.mask) end
  return R.attention(T(c.Q), T(c.K), T(c.V), ro)
end

---------------------------------------------------------------- unfused

TestAttention = {}

function TestAttention:testAgainstReference()
  for _, c in ipairs(CASES) do
    local out, w = qkv.attention(c.Q, c.K, c.V, c.opts)
    local ro, rw, rs = reference(c)
    lu.assertEquals(out.dtype, c.Q.dtype, c.name)
    lu.assertEquals(w.dtype, c.Q.dtype, c.name)
    close(out, ro, nil, c.name .. ": out")
    close(w, rw, nil, c.name .. ": weights")
    -- masked entries are exactly 0; rows sum to 1, or are all 0 when fully masked
    local wd, n, tol = T(w).data, rw.shape[#rw.shape], R.TOL[c.Q.dtype]
    for r = 0, #wd // n - 1 do
      local sum, empty = 0, true
      for j = r * n + 1, r * n + n do
        sum = sum + wd[j]
        if rs.data[j] == -math.huge then
          if wd[j] ~= 0 then lu.fail(string.format("%s: masked weight %d is %s", c.name, j, wd[j])) end
        else empty = false end
      end
      if empty then
        lu.assertEquals(sum, 0, c.name .. ": fully masked row " .. r)
        local od, dv = T(out).data, ro.shape[#ro.shape]
        for j = r * dv + 1, (r + 1) * dv do
          lu.assertEquals(od[j], 0, c.name .. ": out of a fully masked row " .. r)
        end
      elseif math.abs(sum - 1) > 4 * tol then
        lu.fail(string.format("%s: row %d sums to %.17g", c.name, r, sum))
      end
    end
  end
end

function TestAttention:testDefaults()
  local Q, K, V = rqkv({3, 4}, {5, 4}, {5, 2}, "float32")
  local o1, w1 = qkv.attention(Q, K, V)
  local o2, w2 = qkv.attention(Q, K, V, {})
  local o3, w3 = qkv.attention(Q, K, V, {weights = true, causal = false, scale = 0.5})
  exact(o1, o2, "no opts vs {}"); exact(w1, w2, "weights")
  local ro, rw = R.attention(T(Q), T(K), T(V), {scale = 0.5})
  close(o3, ro, nil, "explicit defaults"); close(w3, rw, nil, "explicit defaults: weights")
  lu.assertEquals(select("#", qkv.attention(Q, K, V)), 2)
end

-- the unfused path composed of the primitives gives the same numbers
function TestAttention:testEqualsPrimitives()
  local Q, K, V = rqkv({2, 3, 4, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, "float32")
  local m = qkv.padding({5, 3}):unsqueeze(2)
  local out, w = qkv.attention(Q, K, V, {mask = m, causal = true})
  local S = qkv.mask(qkv.mask(qkv.scores(Q, K), m), qkv.causal(4, 5))
  local W = qkv.softmax(S)
  close(w, W, 1e-6, "weights vs primitives")
  close(out, W:matmul(V), 1e-6, "out vs primitives")
end

-- V's batch dims widen the output: a mask shaped like the output's batch
-- must be treated the same by both paths (as if Q were expanded to it)
function TestAttention:testMaskOverVBatchDims()
  local Q, K, V = rqkv({4, 5}, {6, 5}, {2, 6, 3}, "float32")
  local m = qkv.padding({6, 2}):expand(2, 4, 6)
  local ok_u, u = pcall(qkv.attention, Q, K, V, {mask = m})
  local ok_f, f = pcall(qkv.attention, Q, K, V, {mask = m, weights = false})
  local ref = R.attention(T(Q:expand(2, 4, 5)), T(K), T(V), {mask = T(m)})
  if ok_u then close(u, ref, nil, "unfused") end
  if ok_f then close(f, ref, nil, "fused") end
  lu.assertEquals(ok_u, ok_f, "the paths disagree; unfused: " .. (ok_u and "ok" or u) ..
                  "; fused: " .. (ok_f and "ok" or f))
end

---------------------------------------------------------------- fused

TestFused = {}

function TestFused:testEqualsUnfused()
  for _, c in ipairs(CASES) do
    local n = select("#", qkv.attention(c.Q, c.K, c.V, with(c.opts, "weights", false)))
    lu.assertEquals(n, 1, c.name .. ": fused returns one value")
    local f = qkv.attention(c.Q, c.K, c.V, with(c.opts, "weights", false))
    local u = qkv.attention(c.Q, c.K, c.V, c.opts)
    lu.assertEquals(f.dtype, c.Q.dtype, c.name)
    close(f, u, nil, c.name .. ": fused vs unfused")
    close(f, (reference(c)), nil, c.name .. ": fused vs reference")
  end
end

local function big(causal)
  qkv.seed(2048)
  local Q, K, V = qkv.randn(1, 2, 2048, 64), qkv.randn(1, 2, 2048, 64), qkv.randn(1, 2, 2048, 64)
  local opts = {causal = causal}
  local u = qkv.attention(Q, K, V, opts)
  local f = qkv.attention(Q, K, V, with(opts, "weights", false))
  lu.assertEquals(R.shape(f), {1, 2, 2048, 64})
  close(f, u, 1e-5, "N = 2048" .. (causal and " causal" or ""))
end

-- sizes off likely tile edges, d up to 256, d_v ≠ d_k, V broadcast, head
-- views, and masks that leave whole leading tiles of a row at -inf
function TestFused:testTilesAndMasks()
  qkv.seed(77)
  local function cmp(name, Q, K, V, opts)
    local u = qkv.attention(Q, K, V, opts)
    close(qkv.attention(Q, K, V, with(opts, "weights", false)), u, nil, name)
  end
  for _, dt in ipairs{"float32", "float64"} do
    for _, s in ipairs{{1, 1, 1}, {130, 257, 40}, {257, 130, 17}, {64, 64, 64},
                       {65, 129, 128}, {3, 300, 200}, {33, 97, 256}} do
      local nq, nk, d = s[1], s[2], s[3]
      local Q, K, V = qkv.randn({2, nq, d}, dt), qkv.randn({2, nk, d}, dt), qkv.randn({nk, d + 3}, dt)
      local name = dt .. " " .. sstr(s)
      local late = qkv.arange(nk):ge(nk - 5)          -- only the last 5 keys visible
      local pad = qkv.padding({math.max(1, nk // 3), 0}, nk)
      cmp(name, Q, K, V, {})
      cmp(name .. " causal", Q, K, V, {causal = true})
      cmp(name .. " last keys only", Q, K, V, {mask = late})
      cmp(name .. " padding, one empty", Q, K, V, {mask = pad})
      cmp(name .. " padding + causal", Q, K, V, {mask = pad, causal = true, scale = 0.3})
    end
  end
  local x = qkv.randn(1, 300, 128)                   -- heads: non-contiguous (1, 2, 300, 64)
  local H = qkv.heads(x, 2)
  cmp("heads views", H, H, H, {causal = true})
  cmp("heads views, K/V narrowed", H, H:narrow(3, 11, 200), H:narrow(3, 101, 200), {})
end

-- the fused float32 path against the float64 reference where the wide
-- (AVX-512) blocks have edges: d_k = 72, d_v whose last block of 64 holds
-- 1, 2 or 4 vectors of 16, n_q off multiples of 16 and 32, n_k = 1, two key
-- tiles, two query tiles, causal with n_q > n_k (leading rows empty) and a
-- mask that empties rows
function TestFused:testWideBlockEdges()
  local pad = qkv.padding({0, 7}, 45)
  local cases = {
    {"n_k 1", {50, 1, 72, 61}, {}},
    {"causal n_q > n_k", {40, 23, 72, 125}, {causal = true}},
    {"two key tiles, causal", {23, 100, 16, 96}, {causal = true}},
    {"mask + causal, empty rows", {37, 45, 72, 80}, {mask = pad, causal = true}},
    {"two query tiles, causal", {400, 30, 8, 17}, {causal = true}},
    {"two query tiles", {390, 7, 72, 1}, {scale = 0.05}},
  }
  for _, c in ipairs(cases) do
    local nq, nk, dk, dv = table.unpack(c[2])
    local Q, K, V = rqkv({2, nq, dk}, {2, nk, dk}, {2, nk, dv}, "float32")
    local f = qkv.attention(Q, K, V, with(c[3], "weights", false))
    local ro = {scale = c[3].scale, causal = c[3].causal}
    if c[3].mask then ro.mask = T(c[3].mask) end
    close(f, (R.attention(T(Q), T(K), T(V), ro)), nil, c[1] .. " " .. sstr(c[2]))
  end
end

-- each query's log-sum-exp of its kept, scaled scores, which the fused
-- forward leaves for the backward (qkv._attention_lse), against float64
-- built from the primitives: masks, causal with n_q > n_k and n_q < n_k,
-- rows with no key (-inf), two query and two key tiles, n_k = 0; and the
-- backward given it equal to the backward that computes its own
function TestFused:testLogSumExp()
  local pad = qkv.padding({0, 7}, 45)
  local cases = {
    {"plain", {50, 61, 72, 16}, {}},
    {"causal n_q > n_k", {40, 23, 72, 25}, {causal = true}},
    {"causal n_q < n_k, two key tiles", {23, 300, 16, 9}, {causal = true}},
    {"mask + causal, empty rows", {37, 45, 8, 8}, {mask = pad, causal = true}},
    {"two query tiles", {400, 30, 8, 17}, {causal = true, scale = 0.05}},
    {"no keys", {5, 0, 4, 3}, {}},
  }
  for _, dt in ipairs{"float32", "float64"} do
    for _, c in ipairs(cases) do
      local nq, nk, dk, dv = table.unpack(c[2])
      local what = ("%s %s %s"):format(c[1], sstr(c[2]), dt)
      local Q, K, V = qkv.randn({2, nq, dk}, dt), qkv.randn({2, nk, dk}, dt), qkv.randn({2, nk, dv}, dt)
      local scale = c[3].scale or 1 / math.sqrt(dk)
      local m = c[3].mask
      local out, lse = qkv._attention_lse(Q, K, V, m, c[3].causal, scale)
      lu.assertEquals(lse.dtype, dt)
      lu.assertEquals(R.shape(lse), {2, nq})
      close(out, qkv.attention(Q, K, V, {mask = m, causal = c[3].causal, scale = scale,
                                         weights = false}), nil, what .. " out")
      -- float64 from the primitives
      local S = Q:double():matmul(K:double().mT) * scale
      local keep = qkv.ones(nq, nk, "bool")
      if c[3].causal then keep = keep:logical_and(qkv.ones(nq, nk, "bool"):tril(nk - nq)) end
      if m then keep = keep:logical_and(m) end
      S = S:masked_fill(keep:logical_not(), -1 / 0)
      for b = 1, 2 do
        for i = 1, nq do
          local row, mx = S[b][i]:tolist(), -1 / 0
          for _, x in ipairs(row) do mx = math.max(mx, x) end
          local want = -1 / 0
          if mx > -1 / 0 then
            local sum = 0
            for _, x in ipairs(row) do sum = sum + math.exp(x - mx) end
            want = mx + math.log(sum)
          end
          local got = lse[b][i]
          if want == -1 / 0 then lu.assertEquals(got, want, what .. " row " .. i)
          else
            lu.assertTrue(math.abs(got - want) <= (dt == "float32" and 2e-5 or 1e-12) * math.max(1, math.abs(want)),
                          ("%s [%d][%d]: %.17g vs %.17g"):format(what, b, i, got, want))
          end
        end
      end
      -- the backward given lse, and computing its own
      local g = qkv.randn(R.shape(out), dt)
      local a = {qkv._attention_backward(Q, K, V, out, g, m, c[3].causal, scale, lse)}
      local e = {qkv._attention_backward(Q, K, V, out, g, m, c[3].causal, scale)}
      for i = 1, 3 do close(a[i], e[i], dt == "float32" and 1e-5 or 1e-12, what .. " grad " .. i) end
    end
  end
  -- what does not fit
  local Q = qkv.randn(3, 4)
  local out, lse = qkv._attention_lse(Q, Q, Q, nil, false, 0.5)
  fails("_attention_backward: lse (4,) must be what _attention_lse gave with out (3, 4)",
        qkv._attention_backward, Q, Q, Q, out, out, nil, false, 0.5, qkv.zeros(4))
  fails("_attention_backward: lse (3,) must be", qkv._attention_backward, Q, Q, Q, out, out,
        nil, false, 0.5, lse:double())
  fails("_attention_lse: Q (3, 4), K (3, 4) and V (3, 4) must be one float dtype",
        qkv._attention_lse, Q, Q, Q:double(), nil, false, 0.5)
  fails("_attention_lse: Q (3, 4), K (3, 4) and V (3, 4) must be one float dtype",
        qkv._attention_lse, Q:int(), Q:int(), Q:int(), nil, false, 0.5)
  -- the halves: out in their dtype, lse in float32, as float32 gives them
  -- on the same (rounded) inputs within the halves' rounding of P
  for _, dt in ipairs{"bfloat16", "float16"} do
    local q, k, v = qkv.randn(2, 3, 37, 64):to(dt), qkv.randn(2, 3, 50, 64):to(dt),
                    qkv.randn(2, 3, 50, 64):to(dt)
    local m = qkv.ones(37, 50, "bool")
    m:narrow(1, 1, 3):fill_(false)                          -- three rows with no key
    local o, l = qkv._attention_lse(q, k, v, m, true, 0.125)
    lu.assertEquals({o.dtype, l.dtype, R.shape(l)}, {dt, "float32", {2, 3, 37}})
    local o32, l32 = qkv._attention_lse(q:float(), k:float(), v:float(), m, true, 0.125)
    close(l, l32, 1e-5, dt .. " lse")
    close(o:float(), o32, dt == "bfloat16" and 2e-2 or 3e-3, dt .. " out")
    lu.assertEquals(l[2][3][3], -1 / 0, dt .. ": a row with no key")
    lu.assertEquals(o[2][3][3]:float():abs():sum():item(), 0, dt .. ": its out")
  end
end

-- the float32 backward given the forward's log-sum-exps (with AVX-512: its
-- five products in registers, vm/cpu/attention_bwd_avx512.c) against the
-- float64 one, element by element: head sizes that take each strip of that
-- kernel (1 to 4 vectors, a short last vector, two strips), query and key
-- counts that end tiles of 128 and 64 short, causal with n_q > n_k (queries
-- with no key) and n_q < n_k, d_k ~= d_v
function TestFused:testBackwardAgainstFloat64()
  qkv.seed(5)
  local cases = {
    {1, 1, 1, 1, false}, {7, 5, 3, 16, true}, {63, 65, 16, 16, true}, {129, 64, 32, 24, false},
    {130, 200, 48, 64, true}, {64, 129, 64, 80, true}, {200, 130, 128, 33, true},
    {33, 33, 130, 17, false}, {40, 23, 16, 16, true},
  }
  for _, c in ipairs(cases) do
    local nq, nk, dk, dv, causal = table.unpack(c)
    local what = ("nq %d nk %d dk %d dv %d%s"):format(nq, nk, dk, dv, causal and " causal" or "")
    local Q, K, V = qkv.randn({2, nq, dk}, "float64"), qkv.randn({2, nk, dk}, "float64"),
                    qkv.randn({2, nk, dv}, "float64")
    local g, scale = qkv.randn({2, nq, dv}, "float64"), 1 / math.sqrt(dk)
    local o, lse = qkv._attention_lse(Q, K, V, nil, causal, scale)
    local want = {qkv._attention_backward(Q, K, V, o, g, nil, causal, scale, lse)}
    local o32, lse32 = qkv._attention_lse(Q:float(), K:float(), V:float(), nil, causal, scale)
    local got = {qkv._attention_backward(Q:float(), K:float(), V:float(), o32, g:float(), nil,
                                         causal, scale, lse32)}
    for i = 1, 3 do
      lu.assertEquals(got[i].dtype, "float32")
      local err = (got[i]:double() - want[i]):abs():max():item()
      local size = math.max(1, want[i]:abs():max():item())
      lu.assertTrue(err <= 2e-5 * size, ("%s grad %d: max error %.3g (largest %.3g)"):format(what, i, err, size))
    end
  end
end

-- scale 0 with a mask tensor (the BLAS backward): the scores are 0, computed
-- as q k^T then times 0 as the forward does, and gemm's alpha 0 leaves no
-- garbage in the fresh score tile.  oneDNN's sgemm with alpha = beta = 0
-- on one thread computed 0 * C, so the NaN that a backward with a NaN
-- gradient left in its freed tiles came back as NaN in the next one's dV;
-- one thread, so that each backward gets the tiles the last one freed
function TestFused:testBackwardScaleZeroAfterNaN()
  qkv.seed(13)
  local was = qkv.get_num_threads()
  qkv.set_num_threads(1)
  local nq, nk, d, dv = 97, 300, 16, 8
  local m = qkv.rand(2, nq, nk):gt(0.5)
  local q, k, v = qkv.randn(2, nq, d), qkv.randn(2, nk, d), qkv.randn(2, nk, dv)
  local g = qkv.randn(2, nq, dv)
  local want = {qkv._attention_backward(q:double(), k:double(), v:double(),
                                        qkv.attention(q:double(), k:double(), v:double(),
                                                      {mask = m, scale = 0, weights = false}),
                                        g:double(), m, false, 0)}
  local o = qkv.attention(q, k, v, {mask = m, scale = 0, weights = false})
  local bad = qkv.full({2, nq, dv}, 0 / 0)
  local ok, err = pcall(function()
    for round = 1, 8 do
      qkv._attention_backward(q, k, v, o, bad, m, false, 0.25)      -- NaN in its tiles
      local got = {qkv._attention_backward(q, k, v, o, g, m, false, 0)}
      for i = 1, 3 do close(got[i], want[i], 1e-5, ("round %d grad %d"):format(round, i)) end
    end
  end)
  qkv.set_num_threads(was)
  if not ok then error(err, 0) end
end

-- the backward reads q, k, v, o and dO by rows where they lie: heads'
-- transposed views, a K shared by every head (batch stride 0), an O and dO
-- with rows further apart than their width, and a V whose rows are all one
-- row (stride 0, copied first) give what contiguous copies give, on the
-- register path (float32, no mask: the same bits) and the BLAS one
function TestFused:testBackwardReadsRowsWhereTheyLie()
  qkv.seed(9)
  local B, n, h, d = 2, 37, 3, 16
  for _, c in ipairs{{"float32"}, {"float32", true}, {"float64"}} do
    local dt, masked = c[1], c[2]
    local x = qkv.randn({B, n, h * 3, d}, dt)
    local Q = x:narrow(3, 1, h):transpose(2, 3)              -- (B, h, n, d), rows h*3*d apart
    local K = qkv.randn({B, 1, n, d}, dt):expand(B, h, n, d)
    local V = qkv.randn({B, h, 1, d}, dt):expand(B, h, n, d)
    local m = masked and qkv.rand(n, n):gt(0.3) or nil
    local o, lse = qkv._attention_lse(Q, K, V, m, true, 0.25)
    local g = qkv.randn({B, n, h, d}, dt):transpose(2, 3)
    local o2 = o:transpose(2, 3):contiguous():transpose(2, 3)
    local got = {qkv._attention_backward(Q, K, V, o2, g, m, true, 0.25, lse)}
    local want = {qkv._attention_backward(Q:contiguous(), K:contiguous(), V:contiguous(), o, g:contiguous(),
                                          m, true, 0.25, lse)}
    for i = 1, 3 do
      local what = ("%s%s grad %d"):format(dt, masked and " masked" or "", i)
      if dt == "float32" and not masked then
        lu.assertTrue(qkv.eq(got[i], want[i]):all():item(), what .. ": not the same bits")
      else
        close(got[i], want[i], dt == "float64" and 1e-12 or 1e-5, what)
      end
    end
  end
end

-- float32's kernels flush subnormals to zero on x86 (vm/cpu/vexp.h's
-- qkv_ftz_on: a subnormal weight cost a microcode assist per instruction):
-- a weight of e^-100 on the only nonzero value gives 0, and its gradient 0,
-- where float64 keeps 3.7e-44; a normal result is untouched
function TestFused:testFloat32FlushesSubnormals()
  local p = io.popen("uname -m")
  local m = p:read("a")
  local x86 = m:match("x86") ~= nil or m:match("i%d86") ~= nil
  p:close()
  -- the CPU's kernels (the suites' device pass makes the GPU the default:
  -- its kernels keep subnormals)
  local Q, K, V = qkv.tensor({{1}}):cpu(), qkv.tensor({{0}, {-100}}):cpu(), qkv.tensor({{0}, {1}}):cpu()
  local want = math.exp(-100) / (1 + math.exp(-100))
  local o64 = qkv.attention(Q:double(), K:double(), V:double(), {scale = 1, weights = false})
  lu.assertTrue(math.abs(o64[1][1] - want) <= 1e-15 * want)
  local o, lse = qkv._attention_lse(Q, K, V, nil, false, 1)
  local dq, dk, dv = qkv._attention_backward(Q, K, V, o, qkv.ones(1, 1):cpu(), nil, false, 1, lse)
  lu.assertEquals(dv[1][1], 1.0)
  if x86 then
    lu.assertEquals(o[1][1], 0.0)
    lu.assertEquals(dv[2][1], 0.0)
  else
    lu.assertTrue(o[1][1] > 0 and dv[2][1] > 0)
  end
  -- 2^-120 in V is normal, and so is its output
  local o2 = qkv.attention(Q, K:narrow(1, 1, 1), qkv.tensor({{2 ^ -120}}):cpu(), {weights = false})
  lu.assertEquals(o2[1][1], 2 ^ -120)
end

function TestFused:testLargeN() big(false) end
function TestFused:testLargeNCausal() big(true) end

---------------------------------------------------------------- seed 001

TestSeed001 = {}

local function M(t) return qkv.tensor(t) end
local WQ = {{1, 0}, {0, 1}, {1, 0}, {0, 1}}
local WK = {{0, 1}, {1, 0}, {0, 1}, {1, 0}}

function TestSeed001:testSelfAttention()
  local X = M{{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 1, 1}}
  local Q, K, V = qkv.project(X, M(WQ)), qkv.project(X, M(WK)), qkv.project(X, M(WQ))
  exact(Q, T(M{{2, 0}, {0, 2}, {2, 2}}), "Q")
  exact(K, T(M{{0, 2}, {2, 0}, {2, 2}}), "K")
  exact(V, T(M{{2, 0}, {0, 2}, {2, 2}}), "V")
  local a, b = 4 / math.sqrt(2), 8 / math.sqrt(2)
  local S = {shape = {3, 3}, data = {0, a, a, a, 0, a, a, a, b}}
  close(qkv.scores(Q, K), S, nil, "scaled scores")
  local rw = R.softmax(S)
  local out, w = qkv.attention(Q, K, V)
  close(w, rw, nil, "weights")
  close(out, R.matmul(rw, T(V)), nil, "out")
  -- the numbers README prints (the seed's 0.106 / 0.447 are not a softmax of these scores)
  local e = {0.0287, 0.4856, 0.4856, 0.4856, 0.0287, 0.4856, 0.0529, 0.0529, 0.8943}
  for i, v in ipairs(T(w).data) do lu.assertAlmostEquals(v, e[i], 5e-5) end
  for i, v in ipairs(rw.data) do lu.assertAlmostEquals(v, e[i], 5e-5) end
  local eo = {1.0287, 1.9426, 1.9426, 1.0287, 1.8943, 1.8943}
  for i, v in ipairs(T(out).data) do lu.assertAlmostEquals(v, eo[i], 1e-4) end
  -- float64 and the fused path
  local o64, w64 = qkv.attention(Q:to("float64"), K:to("float64"), V:to("float64"))
  close(w64, rw, 1e-12, "float64 weights")
  close(o64, R.matmul(rw, T(V)), 1e-12, "float64 out")
  close(qkv.attention(Q, K, V, {weights = false}), out, nil, "fused")
end

function TestSeed001:testCrossAttention()
  -- the seed's "Cross-Attention Example": W_Q = W_K = W_V, X_q 2x4, X_kv 3x4
  local Xq = M{{1, 0, 1, 0}, {0, 1, 0, 1}}
  local Xkv = M{{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 1, 1}}
  local W = M(WQ)
  local Q, K, V = qkv.project(Xq, W), qkv.project(Xkv, W), qkv.project(Xkv, W)
  exact(Q, T(M{{2, 0}, {0, 2}}), "Q")
  exact(K, T(M{{2, 0}, {0, 2}, {2, 2}}), "K")
  exact(V, T(M{{2, 0}, {0, 2}, {2, 2}}), "V")
  local a = 4 / math.sqrt(2)
  local S = {shape = {2, 3}, data = {a, 0, a, 0, a, a}}
  close(qkv.scores(Q, K), S, nil, "scaled scores")
  -- softmax of (2.83, 0, 2.83) is (0.4856, 0.0287, 0.4856), not the seed's (0.5, 0, 0.5)
  local rw = R.softmax(S)
  local out, w = qkv.attention(Q, K, V)
  lu.assertEquals(R.shape(w), {2, 3})
  close(w, rw, nil, "weights")
  close(out, R.matmul(rw, T(V)), nil, "out")
  lu.assertAlmostEquals(T(w).data[1], 0.4856, 5e-5)
  lu.assertAlmostEquals(T(w).data[2], 0.0287, 5e-5)
  local o64, w64 = qkv.attention(Q:to("float64"), K:to("float64"), V:to("float64"))
  close(w64, rw, 1e-12, "float64 weights")
  close(o64, R.matmul(rw, T(V)), 1e-12, "float64 out")
end

---------------------------------------------------------------- errors

TestAttentionErrors = {}
local function O(...) return qkv.ones(...) end

function TestAttentionErrors:testShapes()
  for _, wts in ipairs{true, false} do
    local o = {weights = wts}
    fails({"attention", "(5, 4)", "(6, 4)", "n_k 5 ≠ 6"}, qkv.attention, O(3, 4), O(5, 4), O(6, 4), o)
    local ok, msg = pcall(qkv.attention, O(3, 4), O(5, 3), O(5, 3), o)
    lu.assertFalse(ok)
    lu.assertEquals(msg, "attention: Q is (3, 4) but K is (5, 3): d_k 4 ≠ 3")
    fails({"attention", "broadcast"}, qkv.attention, O(2, 3, 4), O(3, 5, 4), O(3, 5, 4), o)
    fails({"attention", "broadcast"}, qkv.attention, O(2, 3, 4), O(5, 4), O(3, 5, 4), o)
    fails({"attention", "mask", "(4, 4)", "(3, 5)"}, qkv.attention, O(3, 4), O(5, 4), O(5, 4),
          with(o, "mask", qkv.causal(4)))
    fails({"attention", "mask", "(2, 1, 5)", "(3, 3, 5)"}, qkv.attention, O(3, 3, 4), O(3, 5, 4),
          O(3, 5, 4), with(o, "mask", qkv.padding({5, 2})))
    fails({"attention", "V"}, qkv.attention, O(3, 4), O(5, 4), O(5), o)
  end
end

function TestAttentionErrors:testOptions()
  local Q, K, V = O(3, 4), O(5, 4), O(5, 4)
  fails({"attention", "causal", "boolean"}, qkv.attention, Q, K, V, {causal = 1})
  fails({"attention", "causal", "boolean"}, qkv.attention, Q, K, V, {causal = "yes"})
  fails({"attention", "weights", "boolean"}, qkv.attention, Q, K, V, {weights = 0})
  fails({"attention", "mask", "tensor"}, qkv.attention, Q, K, V, {mask = 1})
  fails({"attention", "mask", "tensor"}, qkv.attention, Q, K, V, {mask = {{true}}})
  fails({"attention", "unknown option", "casual"}, qkv.attention, Q, K, V, {casual = true})
  fails({"attention", "table"}, qkv.attention, Q, K, V, 5)
end

-- README: every error names the function
function TestAttentionErrors:testScaleNotANumber()
  local Q, K, V = O(3, 4), O(5, 4), O(5, 4)
  fails({"attention", "scale", "number"}, qkv.attention, Q, K, V, {scale = "big"})
  fails({"attention", "scale", "number"}, qkv.attention, Q, K, V, {scale = {}})
end

function TestAttentionErrors:testDtypes()
  local Q, K, V = O(3, 4), O(5, 4), O(5, 4)
  for _, wts in ipairs{true, false} do
    local o = {weights = wts}
    fails({"attention", "V", "float32", "float64"}, qkv.attention, Q, K, V:to("float64"), o)
    fails({"attention", "K", "float32", "float64"}, qkv.attention, Q, K:to("float64"), V, o)
    fails({"attention", "float64", "float32"}, qkv.attention, Q:to("float64"), K, V, o)
    fails({"attention", "int64"}, qkv.attention, Q:to("int64"), K:to("int64"), V:to("int64"), o)
  end
  fails({"qkv.Tensor expected", "attention"}, qkv.attention, Q, K, {{1}})
  fails({"qkv.Tensor expected", "attention"}, qkv.attention, 1, K, V)
  fails({"qkv.Tensor expected", "attention"}, qkv.attention, Q, nil, V)
end

os.exit(lu.LuaUnit.run(), true)
