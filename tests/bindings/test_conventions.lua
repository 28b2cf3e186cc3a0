-- test_conventions.lua: attention's argument conventions as a PyTorch user
-- brings them (README "Masks: which polarity"): a mask that broadcasts
-- the scores to more batch dims gives a result with those dims, in
-- qkv.mask, both paths of qkv.attention and the modules alike, and never
-- changes (n_q, n_k); key_padding_mask (true = padding) and is_causal;
-- MultiHeadAttention called as mha(query, key, value); a misspelt tensor
-- field is an error naming the closest name. Values against the float64
-- reference of tests/helpers/attn_ref.lua.
local lu = require "luaunit"
local R = dofile("tests/helpers/attn_ref.lua")

math.randomseed(20261124)
local T, close, fails = R.T, R.close, R.fails

local function rt(...) return (R.mk({...}, "float32")) end
local function rbool(shape, p)
  local d = {}
  for i = 1, R.numel(shape) do d[i] = math.random() < (p or 0.6) end
  return qkv.tensor(R.nest(d, shape))
end
local function with(opts, k, v)
  local r = {}
  for a, b in pairs(opts) do r[a] = b end
  r[k] = v
  return r
end

-- the reference, with Q expanded to the batch dims the mask brings
local function reference(Q, K, V, opts, batch)
  local qs = {}
  for i, s in ipairs(batch) do qs[i] = s end
  qs[#qs + 1], qs[#qs + 2] = Q:size(-2), Q:size(-1)
  local ro = {causal = opts.causal}
  if opts.mask then ro.mask = T(opts.mask) end
  return R.attention(T(Q:expand(table.unpack(qs))), T(K), T(V), ro)
end

---------------------------------------------------------------- masks broadcast
TestMaskBroadcast = {}

-- unbatched (3, 5) scores with a padding mask (1, 1, 5), a batch of
-- lengths (3, 1, 5) and a per-head mask (2, 1, 3, 5): the result has the
-- mask's leading dims, in both paths, as PyTorch's attn_mask gives them
function TestMaskBroadcast:testLeadingDimsFromTheMask()
  local Q, K, V = rt(3, 4), rt(5, 4), rt(5, 2)
  local cases = {
    {qkv.padding({3}, 5), {1}},
    {qkv.padding({3, 5, 1}, 5), {3}},
    {rbool({2, 1, 3, 5}, 0.7), {2, 1}},
    {rbool({4, 1, 5}):narrow(1, 2, 2), {2}},        -- a view
  }
  for _, c in ipairs(cases) do
    local m, batch = c[1], c[2]
    for _, causal in ipairs{false, true} do
      local opts = {mask = m, causal = causal}
      local what = R.sstr(R.shape(m)) .. (causal and " causal" or "")
      local rout, rw = reference(Q, K, V, opts, batch)
      local out, w = qkv.attention(Q, K, V, opts)
      lu.assertEquals(R.shape(out), rout.shape, what)
      close(out, rout, nil, what .. ": out")
      close(w, rw, nil, what .. ": weights")
      close(qkv.attention(Q, K, V, with(opts, "weights", false)), rout, nil, what .. ": fused")
    end
    local S = qkv.scores(Q, K)
    local masked = qkv.mask(S, m)
    local es = {table.unpack(batch)}
    es[#es + 1], es[#es + 2] = 3, 5
    local Se = S:expand(table.unpack(es))
    lu.assertEquals(masked.shape, Se.shape)
    R.exact(masked, R.mask(T(Se), T(m)), "mask " .. R.sstr(R.shape(m)))
  end
end

-- a size-1 batch dim of the scores widens to the mask's
function TestMaskBroadcast:testSizeOneBatchDimsWiden()
  local Q, K, V = rt(1, 3, 4), rt(1, 5, 4), rt(5, 2)
  local m = rbool({4, 1, 5}, 0.7)
  local rout = reference(Q, K, V, {mask = m}, {4})
  close(qkv.attention(Q, K, V, {mask = m}), rout, nil, "unfused")
  close(qkv.attention(Q, K, V, {mask = m, weights = false}), rout, nil, "fused")
end

-- the mask never changes n_q or n_k, and batch dims must still agree
function TestMaskBroadcast:testRefused()
  local Q, K, V = rt(3, 4), rt(5, 4), rt(5, 2)
  for _, wts in ipairs{true, false} do
    local o = {weights = wts}
    local msg = fails("attention", qkv.attention, Q, K, V, with(o, "mask", qkv.ones(4, 5)))
    lu.assertEquals(msg, "attention: mask of shape (4, 5) does not broadcast to the " ..
                         "scores' shape (3, 5)")
    fails("attention: mask of shape (3, 1, 7) does not broadcast to the scores' shape (3, 5)",
          qkv.attention, Q, K, V, with(o, "mask", qkv.ones(3, 1, 7)))
    -- one query row: a mask with 3 rows would widen n_q
    fails("attention: mask of shape (3, 5) does not broadcast to the scores' shape (1, 5)",
          qkv.attention, rt(1, 4), K, V, with(o, "mask", qkv.ones(3, 5)))
    fails("attention: mask of shape (2, 1, 5) does not broadcast to the scores' shape (3, 3, 5)",
          qkv.attention, rt(3, 3, 4), K, V, with(o, "mask", qkv.padding({5, 2})))
  end
  fails("mask: mask of shape (3, 5) does not broadcast to the scores' shape (1, 5)",
        qkv.mask, qkv.ones(1, 5), qkv.ones(3, 5))
  fails("mask: mask of shape (2, 3) does not broadcast to the scores' shape (5,)",
        qkv.mask, qkv.ones(5), qkv.ones(2, 3))
  lu.assertEquals(qkv.mask(qkv.ones(5), qkv.ones(2, 5)).shape, {2, 5})
end

---------------------------------------------------------------- key_padding_mask
TestKeyPadding = {}

-- PyTorch's polarity: true = this key is padding. It equals the mask in
-- qkv's polarity (true = may attend) that qkv.padding makes
function TestKeyPadding:testEqualsThePaddingMask()
  local Q, K, V = rt(3, 4, 6), rt(3, 5, 6), rt(3, 5, 2)
  local lengths = {5, 2, 4}
  local keep = qkv.padding(lengths, 5)
  local kpm = keep:squeeze(2):eq(false)                        -- (3, 5)
  lu.assertEquals(kpm.shape, {3, 5})
  for _, causal in ipairs{false, true} do
    local rout, rw = reference(Q, K, V, {mask = keep, causal = causal}, {3})
    local o = {key_padding_mask = kpm, causal = causal}
    local out, w = qkv.attention(Q, K, V, o)
    close(out, rout, nil, "out")
    close(w, rw, nil, "weights")
    close(qkv.attention(Q, K, V, with(o, "weights", false)), rout, nil, "fused")
  end
end

-- with a mask as well, a key takes part where both let it
function TestKeyPadding:testWithAMask()
  local Q, K, V = rt(2, 3, 4), rt(2, 5, 4), rt(2, 5, 3)
  local kpm = qkv.tensor{{false, false, false, true, true}, {false, true, false, false, true}}
  local m = rbool({3, 5}, 0.7)
  local both = {}
  local md, kd = m:tolist(), kpm:tolist()
  for b = 1, 2 do
    both[b] = {}
    for i = 1, 3 do
      both[b][i] = {}
      for j = 1, 5 do both[b][i][j] = md[i][j] and not kd[b][j] end
    end
  end
  local rout, rw = reference(Q, K, V, {mask = qkv.tensor(both)}, {2})
  local out, w = qkv.attention(Q, K, V, {mask = m, key_padding_mask = kpm})
  close(out, rout, nil, "out")
  close(w, rw, nil, "weights")
  close(qkv.attention(Q, K, V, {mask = m, key_padding_mask = kpm, weights = false}),
        rout, nil, "fused")
end

function TestKeyPadding:testErrors()
  local Q, K, V = rt(3, 4), rt(5, 4), rt(5, 2)
  fails("attention: option 'key_padding_mask' must be a bool tensor (true = padding), got float32",
        qkv.attention, Q, K, V, {key_padding_mask = qkv.zeros(5)})
  fails("attention: key_padding_mask is (2, 4) but n_k is 5: expected (..., n_k)",
        qkv.attention, Q, K, V, {key_padding_mask = qkv.zeros(2, 4):eq(1)})
  fails("attention: option 'key_padding_mask' must be a tensor, got table",
        qkv.attention, Q, K, V, {key_padding_mask = {true}})
  fails("attention: mask is (2, 3, 5) but key_padding_mask is (4, 5): they do not broadcast",
        qkv.attention, Q, K, V, {mask = qkv.ones(2, 3, 5), key_padding_mask = qkv.zeros(4, 5):eq(1)})
end

---------------------------------------------------------------- is_causal
-- qkv's causal aligns the diagonal to the last key (query i sees key j
-- when j <= i + n_k - n_q); PyTorch's is_causal to the first (j <= i, as
-- torch.ones(n_q, n_k).tril()). Where n_q = n_k they are the same mask.
TestIsCausal = {}

local function topleft(nq, nk)
  local d = {}
  for i = 0, nq - 1 do for j = 0, nk - 1 do d[i * nk + j + 1] = j <= i end end
  return {shape = {nq, nk}, data = d}
end

-- every way attention runs: both kernels, and the autograd compositions
local function each_path(Q, K, V, opts, f)
  for _, wts in ipairs{true, false} do
    f(qkv.attention(Q, K, V, with(opts, "weights", wts)), "weights = " .. tostring(wts))
    local Qg = Q:detach():requires_grad_()
    f(qkv.attention(Qg, K, V, with(opts, "weights", wts)):detach(),
      "requires grad, weights = " .. tostring(wts))
  end
end

function TestIsCausal:testFollowsPyTorchWhenShapesDiffer()
  for _, qk in ipairs{{3, 5}, {5, 3}, {1, 4}} do
    local nq, nk = qk[1], qk[2]
    local Q, K, V = R.mk({2, nq, 4}, "float64"), R.mk({2, nk, 4}, "float64"), R.mk({2, nk, 3}, "float64")
    local ref = R.attention(T(Q), T(K), T(V), {mask = topleft(nq, nk)})
    local ours = R.attention(T(Q), T(K), T(V), {causal = true})
    each_path(Q, K, V, {is_causal = true}, function(out, how)
      close(out, ref, nil, string.format("is_causal %dx%d, %s", nq, nk, how))
    end)
    each_path(Q, K, V, {causal = true}, function(out, how)
      close(out, ours, nil, string.format("causal %dx%d, %s", nq, nk, how))
    end)
    -- with a mask too: both apply
    local m = rbool({nq, nk}, 0.7)
    local keep, tl = {shape = {nq, nk}, data = {}}, topleft(nq, nk)
    for i, v in ipairs(T(m).data) do keep.data[i] = v and tl.data[i] end
    each_path(Q, K, V, {is_causal = true, mask = m}, function(out, how)
      close(out, (R.attention(T(Q), T(K), T(V), {mask = keep})), nil, "is_causal and mask, " .. how)
    end)
  end
end

-- PyTorch's own numbers (tests/fixtures/sdpa/torch_is_causal.lua, written
-- by torch_is_causal.py there): F.scaled_dot_product_attention(is_causal=True)
function TestIsCausal:testEqualsPyTorchsNumbers()
  local F = dofile("tests/fixtures/sdpa/torch_is_causal.lua")
  lu.assertEquals(#F, 3)
  for i, c in ipairs(F) do
    local Q, K, V = qkv.tensor(c.q, "float64"), qkv.tensor(c.k, "float64"), qkv.tensor(c.v, "float64")
    local want = {shape = R.shape(qkv.tensor(c.out, "float64")), data = R.flatten(c.out)}
    each_path(Q, K, V, {is_causal = true}, function(out, how)
      close(out, want, 1e-12, string.format("case %d, %s", i, how))
    end)
    local diff = (qkv.attention(Q, K, V, {causal = true}) - qkv.tensor(c.out, "float64")):abs():max():item()
    lu.assertTrue(diff > 0.1, string.format("case %d: causal is another mask (%g)", i, diff))
  end
end

-- n_q 3, n_k 5: the two alignments give different results (PyTorch's
-- scaled_dot_product_attention(is_causal=True) differs from qkv's causal
-- by 0.395 on such inputs), so asking for both is an error
function TestIsCausal:testBothAreAnErrorWhenTheyDiffer()
  local Q, K, V = rt(3, 4), rt(5, 4), rt(5, 2)
  fails("attention: options 'causal' (qkv's, aligned to the last key) and 'is_causal' "
        .. "(PyTorch's, aligned to the first) differ for n_q = 3, n_k = 5: give one",
        qkv.attention, Q, K, V, {causal = true, is_causal = true})
  fails("attention: option 'is_causal' must be a boolean", qkv.attention, Q, K, V, {is_causal = 1})
end

function TestIsCausal:testSameAsCausalWhenSquare()
  local Q, K, V = rt(2, 4, 3), rt(2, 4, 3), rt(2, 4, 2)
  for _, wts in ipairs{true, false} do
    local a = qkv.attention(Q, K, V, {causal = true, weights = wts})
    R.exact(qkv.attention(Q, K, V, {is_causal = true, weights = wts}), T(a), "is_causal")
    R.exact(qkv.attention(Q, K, V, {is_causal = true, causal = true, weights = wts}), T(a), "both")
    R.exact(qkv.attention(Q, K, V, {is_causal = false, causal = true, weights = wts}), T(a), "false")
    close(a, (R.attention(T(Q), T(K), T(V), {causal = true})), nil, "reference")
  end
end

---------------------------------------------------------------- modules
TestModules = {}

-- mha(query, key, value) as PyTorch calls it; mha(x) is mha(x, x, x), and
-- with different key/value it is the cross-attention module's result
function TestModules:testMultiHeadTakesQueryKeyValue()
  qkv.seed(3)
  local mha = qkv.nn.MultiHeadAttention(8, 2)
  local x, kv = rt(2, 4, 8), rt(2, 6, 8)
  R.exact(mha(x, x, x), T(mha(x)), "mha(x, x, x)")
  local cross = qkv.nn.MultiHeadCrossAttention(8, 2)
  for _, n in ipairs{"W_Q", "W_K", "W_V", "W_O"} do cross[n] = mha[n] end
  local out, w = mha(x, kv, kv)
  local cout, cw = cross(x, kv)
  R.exact(out, T(cout), "out")
  R.exact(w, T(cw), "weights")
  lu.assertEquals(w.shape, {2, 2, 4, 6})
  -- key and value differ: V from value
  local v2 = rt(2, 6, 8)
  local Q = qkv.heads(qkv.project(x, mha.W_Q), 2)
  local K = qkv.heads(qkv.project(kv, mha.W_K), 2)
  local V = qkv.heads(qkv.project(v2, mha.W_V), 2)
  local ro = R.attention(T(Q), T(K), T(V))
  local ref = R.matmul({shape = {2, 4, 8}, data = T(qkv.merge(qkv.tensor(R.nest(ro.data, ro.shape)))).data},
                       T(mha.W_O))
  close(mha(x, kv, v2), ref, nil, "separate value")
end

function TestModules:testMultiHeadSignatureErrors()
  local mha = qkv.nn.MultiHeadAttention(4, 2)
  local x = rt(3, 4)
  local use = "MultiHeadAttention: expected mha(x [, opts]) or mha(query, key, value [, opts])"
  fails(use .. ", got query, key and a nil", mha, x, x)
  fails(use .. ", got a number after x", mha, x, 3)
  fails(use .. ", got a number after value", mha, x, x, x, 5)
  fails(use .. ", got 5 arguments", mha, x, x, x, {}, 1)
  fails("MultiHeadAttention: x must be a tensor, got nil", mha, nil, x, x)
end

-- the modules take the same masks as the primitives, and a
-- key_padding_mask (B, n_k) lines up with the batch, not the heads
function TestModules:testMasksAgreeWithPrimitives()
  qkv.seed(5)
  local sa = qkv.nn.SelfAttention(4, 4)
  local x = rt(3, 4)
  local m = qkv.padding({2}, 3)
  local out = sa(x, {mask = m})
  lu.assertEquals(out.shape, {1, 3, 4})
  local ro = reference(qkv.project(x, sa.W_Q), qkv.project(x, sa.W_K), qkv.project(x, sa.W_V),
                       {mask = m}, {1})
  close(out, ro, nil, "SelfAttention")
  local mha = qkv.nn.MultiHeadAttention(6, 2)
  local xb = rt(3, 5, 6)                    -- B = 3 ≠ h = 2
  local keep = qkv.padding({5, 2, 4}, 5)
  local kpm = keep:squeeze(2):eq(false)
  local a, wa = mha(xb, {mask = keep})
  local b, wb = mha(xb, xb, xb, {key_padding_mask = kpm})
  R.exact(b, T(a), "key_padding_mask vs mask")
  R.exact(wb, T(wa), "weights")
  -- batch 2 (length 2) attends to 2 keys only, in every head
  local w2 = wb[2]:tolist()
  for h = 1, 2 do for i = 1, 5 do for j = 3, 5 do lu.assertEquals(w2[h][i][j], 0) end end end
end

---------------------------------------------------------------- fields
TestFields = {}

function TestFields:testMisspeltFieldsAreErrors()
  local x = qkv.ones(2, 3)
  for k, near in pairs{shpae = "shape", Shape = "shape", dtyp = "dtype", sofmax = "softmax",
                       devic = "device", ndims = "ndim"} do
    fails("index: a tensor has no field '" .. k .. "' (did you mean '" .. near .. "'?)",
          function() return x[k] end)
  end
  local msg = fails("index: a tensor has no field 'xyzzy'", function() return x.xyzzy end)
  lu.assertNotStrContains(msg, "did you mean")
  -- what is there still reads
  lu.assertEquals({x.shape[1], x.dtype, x.device, x.ndim}, {2, "float32", qkv.default_device(), 2})
  lu.assertEquals(type(x.softmax), "function")
end

os.exit(lu.LuaUnit.run(), true)
