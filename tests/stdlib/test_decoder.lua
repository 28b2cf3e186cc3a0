-- test_decoder.lua: the pieces of a decoder besides attention and rope:
-- nn.SwiGLU against its formula in float64, nn.KVCache (prefill and
-- decode steps through nn.MultiHeadAttention equal the whole sequence
-- recomputed), qkv.multinomial and qkv.sample against the laws they draw
-- from (frequencies over many draws, within 5 standard deviations, seeded),
-- and their errors.
local lu = require "luaunit"
local nn = qkv.nn

qkv.set_default_device("cpu")
qkv.manual_seed(4900)

-- got within tol of want (the shapes equal): tests/helpers/variants_ref.lua's
local near = dofile("tests/helpers/variants_ref.lua").near

local function fails(f, want, what)
  local ok, err = pcall(f)
  lu.assertFalse(ok, what .. ": no error")
  lu.assertStrContains(tostring(err), want, false, what)
end

-- the share of draws equal to each of 1..C
local function shares(draws, C)
  local t, n = draws:reshape(-1):tolist(), draws:numel()
  local c = {}
  for i = 1, C do c[i] = 0 end
  for _, x in ipairs(t) do c[x] = c[x] + 1 end
  for i = 1, C do c[i] = c[i] / n end
  return c, n
end

-- each share within 5 standard deviations of p
local function law(draws, p, what)
  local c, n = shares(draws, #p)
  for i, pi in ipairs(p) do
    local sd = math.sqrt(pi * (1 - pi) / n)
    lu.assertTrue(math.abs(c[i] - pi) <= 5 * sd + 1e-12,
                  ("%s: category %d drawn %.4f of %d times, law %.4f"):format(what, i, c[i], n, pi))
  end
end

TestSwiGLU = {}

function TestSwiGLU:testFormula()
  local m = nn.SwiGLU(6, 10, {dtype = "float64"})
  local x = qkv.randn(2, 3, 6, "float64")
  -- each Linear's weight is PyTorch's (d_out, d_in): x W is x weight^T
  local a, b = x:matmul(m.gate_proj.weight:t()), x:matmul(m.up_proj.weight:t())
  local want = ((a / ((-a):exp() + 1)) * b):matmul(m.down_proj.weight:t())
  near(m(x), want, 1e-12, "SwiGLU")
  lu.assertNil(m.gate_proj.bias, "no bias by default")
  local names = {}
  for name in m:named_parameters() do names[#names + 1] = name end
  table.sort(names)
  lu.assertEquals(names, {"down_proj.weight", "gate_proj.weight", "up_proj.weight"})
  lu.assertTrue(qkv.test.gradcheck(function(t) return m(t) end, {x}))
  lu.assertNotNil(nn.SwiGLU(4, 8, {bias = true}).up_proj.bias, "bias = true")
  fails(function() return m(qkv.randn(2, 5, "float64")) end, "SwiGLU: x (2, 5) must end in dim = 6", "dim")
  fails(function() return nn.SwiGLU(4, 8, {biass = true}) end, "SwiGLU: unknown option 'biass' (did you mean 'bias'?)", "option")
end

TestKVCache = {}

function TestKVCache:testPrefillAndDecodeEqualTheWholeSequence()
  local B, n, d, h = 2, 12, 16, 4
  local mha = nn.MultiHeadAttention(d, h)
  local x = qkv.randn(B, n, d)
  local full = mha(x, {causal = true, weights = false})
  local cache = nn.KVCache(B, h, 32, d // h)
  -- prefill 8 tokens, then 4 decode steps of one token
  local got = {mha(x:narrow(2, 1, 8), {cache = cache, causal = true, weights = false})}
  lu.assertEquals(cache.length, 8)
  for t = 9, n do
    got[#got + 1] = mha(x:narrow(2, t, 1), {cache = cache, causal = true, weights = false})
    lu.assertEquals(cache:get_seq_length(), t)
  end
  near(qkv.cat(got, 2), full, 1e-6, "prefill + decode")
  -- weights = true: the weights of the last step cover every key
  cache:reset()
  lu.assertEquals(cache.length, 0)
  mha(x:narrow(2, 1, 11), {cache = cache, causal = true})
  local out, w = mha(x:narrow(2, 12, 1), {cache = cache, causal = true})
  lu.assertEquals(w.shape, {B, h, 1, 12})
  near(out, full:narrow(2, 12, 1), 1e-6, "the last step with weights")
end

function TestKVCache:testUpdateReturnsViews()
  local c = nn.KVCache(1, 2, 5, 3, {dtype = "float64"})
  local k, v = qkv.randn(1, 2, 2, 3, "float64"), qkv.randn(1, 2, 2, 3, "float64")
  local K, V = c:update(k, v)
  near(K, k, 0, "keys")
  near(V, v, 0, "values")
  local k2, v2 = qkv.randn(1, 2, 3, 3, "float64"), qkv.randn(1, 2, 3, 3, "float64")
  K, V = c:update(k2, v2)
  near(K, qkv.cat({k, k2}, 3), 0, "keys after two updates")
  near(V, qkv.cat({v, v2}, 3), 0, "values after two updates")
  c.k[{1, 1, 1, 1}] = 42                      -- a view of the cache, no copy
  lu.assertEquals(K[{1, 1, 1, 1}], 42)
  lu.assertStrContains(tostring(c), "KVCache(batch=1, heads=2, max_len=5, head_dim=3, length=5, dtype=float64)")
end

function TestKVCache:testErrors()
  local c = nn.KVCache(2, 2, 4, 3)
  local k = qkv.randn(2, 2, 3, 3)
  c:update(k, k)
  fails(function() return c:update(k, k) end, "KVCache: 3 tokens after the 3 it holds pass max_len = 4", "max_len")
  fails(function() return c:update(qkv.randn(2, 3, 1, 3), qkv.randn(2, 3, 1, 3)) end,
        "KVCache: k (2, 3, 1, 3) must be (batch, heads, n, head_dim) = (2, 2, n, 3)", "shape")
  fails(function() return c:update(k:double(), k:double()) end, "KVCache: k is float64 on cpu, the cache float32 on cpu", "dtype")
  fails(function() return c:update(k:narrow(3, 1, 1), k:narrow(3, 1, 2)) end,
        "KVCache: k (2, 2, 1, 3) and v (2, 2, 2, 3) hold different numbers of tokens", "lengths")
  fails(function() return nn.KVCache(2, 2, 0, 3) end, "KVCache: max_len must be a positive integer, got 0", "max_len 0")
  fails(function() return nn.KVCache(2, 2, 4, 3, {dtype = "float32", size = 3}) end, "KVCache: unknown option 'size'", "option")
  fails(function() return nn.KVCache(2, 2, 4, 3, {dtype = "int64"}) end,
        "KVCache: dtype must be 'float32', 'float64', 'float16' or 'bfloat16', got int64", "dtype")
  local h = nn.KVCache(1, 2, 4, 3, {dtype = "bfloat16"})     -- the halves are caches too
  local kh = qkv.randn(1, 2, 1, 3):to("bfloat16")
  lu.assertEquals(h:update(kh, kh).dtype, "bfloat16")
  fails(function() return h:update(k:narrow(1, 1, 1):narrow(3, 1, 1), kh) end,
        "KVCache: k is float32 on cpu, the cache bfloat16 on cpu", "bfloat16 cache")
  local mha = nn.MultiHeadAttention(8, 2)
  fails(function() return mha(qkv.randn(1, 3, 8), {cache = {}}) end,
        "MultiHeadAttention: opts.cache must be an nn.KVCache, got table", "not a cache")
  local ok, why = qkv.cuda_available()
  if ok then
    local g = nn.KVCache(1, 2, 4, 3, {device = "cuda"})
    fails(function() return g:update(qkv.randn(1, 2, 1, 3), qkv.randn(1, 2, 1, 3)) end,
          "KVCache: k is float32 on cpu, the cache float32 on cuda", "device")
  else
    lu.assertNotNil(why)
  end
end

TestSampling = {}

function TestSampling:testMultinomialWithReplacement()
  local p = {0.1, 0.2, 0.0, 0.7}
  local probs = qkv.tensor(p, "float64")
  local d = qkv.multinomial(probs, 20000, {replacement = true})
  lu.assertEquals(d.dtype, "int64")
  lu.assertEquals(d.shape, {20000})
  law(d, p, "with replacement")
  -- weights need not sum to 1; rows at once
  local w = qkv.tensor({{1, 2, 0, 7}, {5, 0, 5, 0}}, "float32")
  local r = qkv.multinomial(w, 20000, {replacement = true})
  lu.assertEquals(r.shape, {2, 20000})
  law(r[1], p, "row 1")
  law(r[2], {0.5, 0, 0.5, 0}, "row 2")
  -- weights whose sum overflows, subnormal ones, a vocabulary's worth of
  -- categories: every draw a category above 0 (1e308 twice drew category
  -- 3 of 2; {0, 5e-324, 0} drew 4 of 3), by the same law
  local big = qkv.multinomial(qkv.tensor({1e308, 0, 1e308}, "float64"), 4000, {replacement = true})
  law(big, {0.5, 0, 0.5}, "sums that overflow")
  lu.assertEquals(qkv.multinomial(qkv.tensor({0, 5e-324, 0}, "float64"), 50, {replacement = true})
                    :eq(2):all():item(), true, "a subnormal weight")
  local V = 30522
  local wide = qkv.zeros(V, "float64")
  wide[7] = 1
  wide[V] = 3
  law(qkv.multinomial(wide, 4000, {replacement = true}):eq(V):long() + 1, {0.25, 0.75}, "30522 categories")
end

function TestSampling:testMultinomialWithoutReplacement()
  -- pairs (first, second) from (0.5, 0.3, 0.2): P(i, j) = p_i p_j / (1 - p_i)
  local p = {0.5, 0.3, 0.2}
  local R = 30000
  local probs = qkv.tensor({p}, "float64"):expand(R, 3):contiguous()
  local d = qkv.multinomial(probs, 2)
  lu.assertEquals(d.shape, {R, 2})
  lu.assertTrue(d[{{}, 1}]:ne(d[{{}, 2}]):all():item(), "distinct draws")
  local pair = (d[{{}, 1}] - 1) * 3 + d[{{}, 2}]            -- 1..9
  local want = {}
  for i = 1, 3 do
    for j = 1, 3 do want[(i - 1) * 3 + j] = i == j and 0 or p[i] * p[j] / (1 - p[i]) end
  end
  law(pair, want, "pairs without replacement")
  -- all of them: a permutation of the categories above 0
  local all = qkv.multinomial(qkv.tensor({0.2, 0, 0.5, 0.3}), 3)
  local s = all:tolist()
  table.sort(s)
  lu.assertEquals(s, {1, 3, 4})
  -- no rows: no draws, an empty (0, n) as torch's (the fuzzer found it an error)
  local none = qkv.multinomial(qkv.zeros(0, 3), 2, {replacement = true})
  lu.assertEquals(none.shape, {0, 2})
  lu.assertEquals(none.dtype, "int64")
end

-- with a GPU (or the suites' fake device) as the default device: the
-- draws' uniforms come from the CPU whatever the default, the result is
-- on the logits' device
function TestSampling:testOnTheDefaultDevice()
  local ok, why = qkv.cuda_available()
  if not ok then lu.skip("needs CUDA: " .. tostring(why)) end
  qkv.set_default_device("cuda")
  local fine, err = pcall(function()
    local l = qkv.tensor({{0, 5, 0}, {4, 0, 0}}, "float32")
    lu.assertEquals(l.device, "cuda")
    -- top_p 0.9 keeps each row's one likely token (p ~ 0.987 and 0.964)
    local s = qkv.sample(l, {temperature = 1, top_k = 2, top_p = 0.9})
    lu.assertEquals(s.device, "cuda")
    lu.assertEquals(s:cpu():tolist(), {2, 1})
    local m = qkv.multinomial(qkv.tensor({0, 1, 0}), 2, {replacement = true})
    lu.assertEquals({m.device, m:cpu():tolist()}, {"cuda", {2, 2}})
    lu.assertEquals(qkv.multinomial(qkv.tensor({0, 1, 3}), 2):cpu():sort():tolist(), {2, 3})
  end)
  qkv.set_default_device("cpu")
  if not fine then error(err, 0) end
end

function TestSampling:testSample()
  local R = 20000
  local logits = qkv.tensor({{0, math.log(3)}}, "float64"):expand(R, 2):contiguous()
  law(qkv.sample(logits), {0.25, 0.75}, "temperature 1")
  local a, b = 1, math.sqrt(3)
  law(qkv.sample(logits, {temperature = 2}), {a / (a + b), b / (a + b)}, "temperature 2")
  -- greedy, top_k = 1, a tiny top_p: the largest logit
  local l = qkv.tensor({{0.1, 2.0, -1.0, 1.9}, {3.0, 3.0, 0.0, 1.0}})
  lu.assertEquals(qkv.sample(l, {temperature = 0}):tolist(), {2, 1})
  lu.assertEquals(qkv.sample(l:narrow(1, 1, 1), {top_k = 1}):tolist(), {2})   -- ties all stay, as HF's
  lu.assertEquals(qkv.sample(l:narrow(1, 1, 1), {top_p = 0.01}):tolist(), {2})
  -- top_k = 2 of 4, and top_p = 0.7 of (0.5, 0.3, 0.2): the rest renormalised
  local lk = qkv.tensor({{math.log(0.1), math.log(0.2), math.log(0.3), math.log(0.4)}}):expand(R, 4):contiguous()
  law(qkv.sample(lk, {top_k = 2}), {0, 0, 3 / 7, 4 / 7}, "top_k")
  local lp = qkv.tensor({{math.log(0.2), math.log(0.5), math.log(0.3)}}):expand(R, 3):contiguous()
  law(qkv.sample(lp, {top_p = 0.7}), {0, 0.625, 0.375}, "top_p")
  law(qkv.sample(lp, {top_k = 2, top_p = 0.5}), {0, 1, 0}, "top_k then top_p")
  -- shapes: (V) gives one token, (B, T, V) gives (B, T)
  local one = qkv.sample(qkv.tensor({0, 5, 0}), {temperature = 0})
  lu.assertEquals(one:dim(), 0)
  lu.assertEquals(one:item(), 2)
  lu.assertEquals(qkv.sample(qkv.randn(2, 3, 7)).shape, {2, 3})
end

function TestSampling:testSeeded()
  local w = qkv.tensor({0.2, 0.3, 0.5})
  qkv.manual_seed(7)
  local a = qkv.multinomial(w, 50, {replacement = true})
  qkv.manual_seed(7)
  local b = qkv.multinomial(w, 50, {replacement = true})
  lu.assertEquals(a:tolist(), b:tolist())
end

function TestSampling:testErrors()
  local w = qkv.tensor({0.2, 0.8})
  fails(function() return qkv.multinomial(qkv.tensor({-1, 2}), 1) end,
        "multinomial: probs must be finite and >= 0, got (2,)", "negative")
  fails(function() return qkv.multinomial(qkv.tensor({0, 0}), 1) end, "multinomial: a row of probs (2,) sums to 0", "zeros")
  fails(function() return qkv.multinomial(qkv.tensor({1, 0 / 0}), 1) end, "multinomial: probs must be finite", "NaN")
  fails(function() return qkv.multinomial(w, 3) end,
        "multinomial: 3 samples without replacement from a row with 2 categories above 0 (probs (2,))", "too many")
  fails(function() return qkv.multinomial(qkv.tensor({1, 2}, "int64"), 1) end,
        "multinomial: probs must be a floating tensor (C) or (R, C), got int64 (2,)", "dtype")
  fails(function() return qkv.multinomial(w, 0) end, "multinomial: num_samples must be an integer >= 1, got 0", "n")
  fails(function() return qkv.multinomial(w, 1, {replace = true}) end,
        "multinomial: unknown option 'replace'", "option")
  fails(function() return qkv.multinomial(w, 1, {replacement = 1}) end,
        "multinomial: option 'replacement' must be a boolean, got number", "replacement")
  local l = qkv.randn(2, 5)
  fails(function() return qkv.sample(l, {temperature = -1}) end, "sample: temperature must be a number >= 0, got -1", "t")
  fails(function() return qkv.sample(l, {top_k = 0}) end, "sample: top_k must be an integer >= 1, got 0", "k")
  fails(function() return qkv.sample(l, {top_p = 1.5}) end, "sample: top_p must be a number in (0, 1], got 1.5", "p")
  fails(function() return qkv.sample(l, {topk = 3}) end, "sample: unknown option 'topk' (did you mean 'top_k'?)", "option")
  fails(function() return qkv.sample(qkv.tensor({1, 0 / 0})) end, "sample: logits (2,) hold NaN", "NaN")
  -- a row with no distribution, as PyTorch's multinomial refuses it: all
  -- -inf drew token V + 1, a +inf (or an overflow over the temperature)
  -- token 1; temperature 0 takes the largest
  local ninf = qkv.tensor({{1, 2, 3}, {-math.huge, -math.huge, -math.huge}})
  fails(function() return qkv.sample(ninf) end, "sample: a row of logits (2, 3) gives no distribution", "-inf")
  fails(function() return qkv.sample(ninf, {top_k = 1}) end, "gives no distribution", "-inf top_k")
  fails(function() return qkv.sample(qkv.tensor({0, math.huge, 1})) end, "gives no distribution", "+inf")
  fails(function() return qkv.sample(qkv.tensor({1, 2, 3}, "float64"), {temperature = 1e-309}) end,
        "gives no distribution", "over a tiny temperature")
  lu.assertEquals(qkv.sample(qkv.tensor({0, math.huge, 1}), {temperature = 0}):item(), 2)
  fails(function() return qkv.sample(qkv.ones({2}, "int64")) end, "sample: logits must be a floating tensor", "dtype")
  local closed
  do local t <close> = qkv.rand(3); closed = t end
  fails(function() return qkv.sample(closed) end, "sample: logits must be a floating tensor (..., V), got a closed tensor", "closed")
  fails(function() return qkv.multinomial(closed, 1) end, "multinomial: probs must be a floating tensor (C) or (R, C), got a closed tensor", "closed")
end

os.exit(lu.LuaUnit.run(), true)
