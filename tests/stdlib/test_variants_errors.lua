-- test_variants_errors.lua: misuse of attention's score_mod, mask_mod and
-- block_mask is a clean error that names the public function and the mod,
-- says what to write instead, and leaves the process working
-- (stdlib/qkv/variants/trace.lua, init.lua)
local lu = require "luaunit"

local q = qkv.randn(2, 3, 20, 8, "float64")
local k = qkv.randn(2, 3, 24, 8, "float64")
local v = qkv.randn(2, 3, 24, 4, "float64")

-- the error of attention(q, k, v, opts) on both paths: it must contain
-- every string of `want`
local function fails(opts, want, paths)
  for _, w in ipairs(paths or {false, true}) do
    local o = {}
    for key, x in pairs(opts) do o[key] = x end
    o.weights = w
    local ok, err = pcall(qkv.attention, q, k, v, o)
    lu.assertFalse(ok, "no error (weights = " .. tostring(w) .. ")")
    for _, s in ipairs(want) do
      lu.assertStrContains(tostring(err), s, false)
    end
  end
end

TestVariantsErrors = {}

function TestVariantsErrors:testLuaComparisonsNameTheMethod()
  fails({mask_mod = function(b, h, i, j) return j < i end},
        {"attention: mask_mod: ", "Lua comparison", "x:lt(y) or x:gt(y)"})
  fails({mask_mod = function(b, h, i, j) return j <= i + 3 end}, {"attention: mask_mod: ", "x:le(y) or x:ge(y)"})
  fails({mask_mod = function(b, h, i, j) return (i - j) == (j - i) end},
        {"attention: mask_mod: ", "x:eq(y) or x:ne(y)"})
  fails({score_mod = function(s, b, h, i, j) if s > 0 then return s end return -s end},
        {"attention: score_mod: ", "x:lt(y) or x:gt(y)"})
end

function TestVariantsErrors:testControlFlowOnSymbolicBooleans()
  -- an if, and, or, not on a symbolic boolean runs once while tracing
  fails({mask_mod = function(b, h, i, j) if j:le(i) then return i:ge(1) end return i:lt(0) end},
        {"attention: mask_mod: ", "does not reach the result", "qkv.where"})
  fails({mask_mod = function(b, h, i, j) return j:le(i) and i:ge(1) end},
        {"attention: mask_mod: ", "does not reach the result"})
  -- (`a or b` never evaluates b, a symbolic value being true to Lua: it
  -- is a, which nothing can see; docs/variants.md says to write a | b)
  fails({mask_mod = function(b, h, i, j) return not j:le(i) end},
        {"attention: mask_mod: ", "returned a Lua boolean (false)", ":eq, :ne, ~, &, |"})
  fails({score_mod = function(s, b, h, i, j) if h:eq(1) then return s * 2 end return s end},
        {"attention: score_mod: ", "does not reach the result"})
  -- a comparison with a number by == is a plain false: the mask returns it
  fails({mask_mod = function(b, h, i, j) return i == 3 end},
        {"attention: mask_mod: ", "returned a Lua boolean (false)"})
end

function TestVariantsErrors:testWhatAModReturns()
  fails({mask_mod = function(b, h, i, j) return i - j end},
        {"attention: mask_mod: ", "must return a symbolic boolean", "got a number"})
  fails({mask_mod = function(b, h, i, j) return 1 end},
        {"attention: mask_mod: ", "must return a symbolic boolean", "got number"})
  fails({score_mod = function(s, b, h, i, j) return s:gt(0) end},
        {"attention: score_mod: ", "must return a number or a symbolic number", "got a boolean"})
  fails({score_mod = function(s, b, h, i, j) end},
        {"attention: score_mod: ", "got nil"})
  fails({score_mod = function(s, b, h, i, j) return "s" end},
        {"attention: score_mod: ", "got string"})
end

function TestVariantsErrors:testKindsOfValues()
  fails({score_mod = function(s, b, h, i, j) return s + j:le(i) end},
        {"attention: score_mod: ", "+ of a boolean value", "qkv.where(c, 1, 0)"})
  fails({mask_mod = function(b, h, i, j) return i & j end},
        {"attention: mask_mod: ", "& of a number"})
  fails({mask_mod = function(b, h, i, j) return ~(i - j) end}, {"attention: mask_mod: ", "~ of a number"})
  fails({mask_mod = function(b, h, i, j) return j:le(i) ~ i:ge(2) end}, {"attention: mask_mod: ", "xor"})
  fails({mask_mod = function(b, h, i, j) return qkv.where(1, j:le(i), i:ge(2)) end},
        {"attention: mask_mod: ", "where's condition of a number"})
  fails({score_mod = function(s, b, h, i, j) return s + (i .. j) end}, {"attention: score_mod: ", ".."})
  fails({score_mod = function(s, b, h, i, j) return s:exp(2) end},
        {"attention: score_mod: ", ":exp takes no arguments"})
end

function TestVariantsErrors:testArityAndTypes()
  fails({score_mod = function(b, h, i, j) return i end},
        {"attention: score_mod takes (score, b, h, i, j), 5 parameters", "takes 4 (a mask_mod?)"})
  fails({mask_mod = function(s, b, h, i, j) return j:le(i) end},
        {"attention: mask_mod takes (b, h, i, j), 4 parameters", "takes 5 (a score_mod?)"})
  fails({score_mod = 3}, {"attention: option 'score_mod' must be a function (score, b, h, i, j), got number"})
  fails({mask_mod = "causal"}, {"attention: option 'mask_mod' must be a function (b, h, i, j), got string"})
  fails({block_mask = {}}, {"attention: option 'block_mask' must be what qkv.block_mask gives, got table"})
  fails({mask_mod = qkv.variants.causal(), flavour = 1}, {"attention: unknown option 'flavour'"})
  local ok, err = pcall(qkv.attention, q:float(), k, v, {mask_mod = qkv.variants.causal()})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "attention: Q is float32, K float64 and V float64: expected one float dtype")
end

function TestVariantsErrors:testCapturedTensorIndices()
  local bias = qkv.randn(3, 10, "float64")
  -- j - i + 1 leaves 1..10 for some pairs: an error when the kernel reads it, never a read
  fails({score_mod = function(s, b, h, i, j) return s + bias[{h, j - i + 1}] end},
        {"attention: score_mod: index 2 of the captured tensor (3, 10) is", "not an integer in 1..10"})
  fails({score_mod = function(s, b, h, i, j) return s + bias[{h, i / 2}] end},
        {"attention: score_mod: index 2 of the captured tensor (3, 10) is 0.5", "not an integer"})
  fails({score_mod = function(s, b, h, i, j) return s + bias[h] end},
        {"attention: score_mod: a captured tensor (3, 10) takes 2 indices, got 1"})
  fails({mask_mod = function(b, h, i, j) return bias[{h, j}]:gt(0) end},
        {"attention: mask_mod: index 2 of the captured tensor (3, 10) is 11"})
  -- the same mods in range give values, and the process goes on
  local out = qkv.attention(q, k, v, {score_mod = function(s, b, h, i, j)
    return s + bias[{h, (j - i) % 10 + 1}] end, weights = false})
  lu.assertEquals(out:size(-1), 4)
  lu.assertTrue(out:eq(out):all():item())
end

function TestVariantsErrors:testSymbolicValuesStayInTheirTrace()
  local saved
  qkv.attention(q, k, v, {mask_mod = function(b, h, i, j) saved = i return j:le(i) end, weights = false})
  local ok, err = pcall(function() return saved + 1 end)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "a symbolic value was used outside the trace of its mod")
  fails({mask_mod = function(b, h, i, j) return saved:le(j) end}, {"another trace"})
end

function TestVariantsErrors:testBlockMasks()
  local function bad(want, ...)
    local ok, err = pcall(qkv.block_mask, ...)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), want)
  end
  local causal = qkv.variants.causal()
  bad("block_mask: mask_mod must be a function (b, h, i, j), got nil", nil, nil, nil, 4, 4)
  bad("block_mask: n_q must be an integer >= 0, got -1", causal, nil, nil, -1, 4)
  bad("block_mask: B must be an integer >= 1, got 0", causal, 0, nil, 4, 4)
  bad("block_mask: H must be an integer >= 1, got 1.5", causal, nil, 1.5, 4, 4)
  bad("block_mask: mask_mod reads b: give B", function(b, h, i, j) return j:le(i + b) end, nil, 2, 4, 4)
  bad("block_mask: mask_mod reads h: give H", function(b, h, i, j) return j:le(i + h) end, 2, nil, 4, 4)
  bad("block_mask: option 'block' must be an integer in 1..128", causal, nil, nil, 4, 4, {block = 0})
  bad("block_mask: option 'block'", causal, nil, nil, 4, 4, {block = {16, 512}})
  bad("block_mask: unknown option 'size'", causal, nil, nil, 4, 4, {size = 16})
  bad("block_mask: mask_mod: a Lua comparison", function(b, h, i, j) return j < i end, nil, nil, 4, 4)
  -- made for other lengths than the call's
  local bm = qkv.block_mask(causal, nil, nil, 20, 20)
  fails({block_mask = bm}, {"attention: block_mask was made for n_q = 20, n_k = 20, but Q is (2, 3, 20, 8) and K (2, 3, 24, 8)"})
  local bh = qkv.block_mask(function(b, h, i, j) return j:le(i + h) end, nil, 5, 20, 24)
  fails({block_mask = bh}, {"attention: block_mask was made for B = nil, H = 5, but the batch dims give B = 2, H = 3"})
  -- its spans, replaced by a tensor of another dtype or shape: an error
  -- where the fused kernel would read them (the weights path reads none)
  for _, t in ipairs{qkv.zeros(1, 1, 20, 2), qkv.zeros({1, 1, 20, 3}, "int32"),
                     qkv.zeros({1, 1, 19, 2}, "int32")} do
    local bw = qkv.block_mask(qkv.variants.sliding_window(4), nil, nil, 20, 24)
    bw.spans = t
    fails({block_mask = bw}, {"attention: block_mask.spans must be the int32 (1, 1, 20, 2) tensor block_mask made, got "})
  end
  local bw = qkv.block_mask(qkv.variants.sliding_window(4), nil, nil, 20, 24)
  do local t <close> = qkv.zeros({1, 1, 20, 2}, "int32"); bw.spans = t end
  fails({block_mask = bw}, {"attention: block_mask.spans must be the int32 (1, 1, 20, 2) tensor block_mask made, got a closed tensor"})
end

function TestVariantsErrors:testLibraryArguments()
  local function bad(want, f, ...)
    local ok, err = pcall(f, ...)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), want)
  end
  local V = qkv.variants
  bad("sliding_window: w must be an integer >= 1, got 0", V.sliding_window, 0)
  bad("sliding_window: unknown option 'left'", V.sliding_window, 4, {left = true})
  bad("document: ids must be a tensor (n) or (B, n)", V.document, {1, 1, 2})
  bad("document_lengths: each length must be an integer >= 1, got 0", V.document_lengths, {3, 0})
  bad("prefix_lm: p must be an integer >= 0", V.prefix_lm, -2)
  bad("alibi: give the number of heads H, or the slopes", V.alibi, "8")
  bad("softcap: c must be a positive number, got 0", V.softcap, 0)
  bad("t5_bias: bias must be a tensor (H, num_buckets)", V.t5_bias, qkv.zeros(4))
  bad("relative_buckets: rel must be a symbolic number", V.relative_buckets, 3)
  -- T5's buckets past the exact ones need max_distance past them, and
  -- some exact ones: else buckets out of range, or a NaN (log 1 = 0)
  bad("t5_bias: max_distance = 8 must be past the 8 exact buckets", V.t5_bias, qkv.zeros(2, 32),
      {max_distance = 8})
  bad("t5_bias: num_buckets = 3 leaves no exact bucket", V.t5_bias, qkv.zeros(2, 3))
  bad("max_distance = 4 must be past the 16 exact buckets", qkv.attention, qkv.zeros(1, 4, 2),
      qkv.zeros(1, 4, 2), qkv.zeros(1, 4, 2), {score_mod = function(s, _, _, i, j)
        return s + V.relative_buckets(j - i, {num_buckets = 32, max_distance = 4, bidirectional = false})
      end})
  bad("alibi_slopes: H must be an integer >= 1, got 0", qkv.alibi_slopes, 0)
  bad("and_masks: give at least one mask_mod", qkv.and_masks)
  bad("or_masks: argument 2 must be a mask_mod function, got number", qkv.or_masks, V.causal(), 3)
end
