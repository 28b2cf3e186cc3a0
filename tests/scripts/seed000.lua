-- seed000.lua: the scripts for "Self-Attention and Cross-Attention from
-- Scratch" (seed 000). The worked example is checked against float64 values
-- worked out here; the random ones against attention written out in plain
-- Lua loops on the weights the scripts return, and by properties.
local lu = require "luaunit"
local U = dofile("tests/scripts/util.lua")

local function has(text, s) return text:find(s, 1, true) ~= nil end
local run = U.cached

---------------------------------------------------------------- 4.1

local T = {}

-- section 3 and 4.1 by hand: Q K^T = [[1, 1], [1, 0]], so the first row is
-- even and the second is softmax([1/sqrt(3), 0])
local r3 = 1 / math.sqrt(3)
local w2 = math.exp(r3) / (math.exp(r3) + 1)
local RAW = {{1, 1}, {1, 0}}
local SCALED = {{r3, r3}, {r3, 0}}
local WEIGHTS = {{0.5, 0.5}, {w2, 1 - w2}}
local OUTPUT = {{2, 3}, {w2 + 3 * (1 - w2), 2 * w2 + 4 * (1 - w2)}}
local function f4(x) return string.format("%.4f", x) end

T.TestSeed000WorkedExample = {
  test_values = function()
    local r = run("scripts/000_worked_example.lua").results
    lu.assertTrue(U.maxdiff(U.values(r.scores), RAW) < 1e-6)
    lu.assertTrue(U.maxdiff(U.values(r.scores_scaled), SCALED) < 1e-5)
    lu.assertTrue(U.maxdiff(U.values(r.weights), WEIGHTS) < 1e-5)
    lu.assertTrue(U.maxdiff(U.values(r.output), OUTPUT) < 1e-5)
    -- section 3: softmax([3, 0]) and softmax([3/sqrt(3), 0])
    lu.assertAlmostEquals(r.peaked, 1 / (1 + math.exp(-3)), 1e-6)
    lu.assertAlmostEquals(r.gentle, 1 / (1 + math.exp(-math.sqrt(3))), 1e-6)
  end,
  test_printed = function()
    local out = run("scripts/000_worked_example.lua").stdout
    lu.assertTrue(has(out, "softmax([3.0, 0]) = " .. f4(1 / (1 + math.exp(-3)))))       -- 0.9526
    lu.assertTrue(has(out, "= " .. f4(1 / (1 + math.exp(-math.sqrt(3)))) .. " (gentler)")) -- 0.8497
    lu.assertTrue(has(out, "Q shape: (2, 3) (2 tokens, d_k=3)"))
    lu.assertTrue(has(out, "V shape: (2, 2) (2 tokens, d_v=2)"))
    lu.assertTrue(has(out, "Raw scores shape: (2, 2)"))
    lu.assertTrue(has(out, "tensor([[1., 1.],\n        [1., 0.]])"))
    lu.assertTrue(has(out, string.format("tensor([[%s, %s],\n        [%s, 0.0000]])", f4(r3), f4(r3), f4(r3))))
    lu.assertTrue(has(out, string.format("tensor([[0.5000, 0.5000],\n        [%s, %s]])", f4(w2), f4(1 - w2))))
    lu.assertTrue(has(out, "Row sums: tensor([1.0000, 1.0000])"))
    lu.assertTrue(has(out, string.format("tensor([[2.0000, 3.0000],\n        [%s, %s]])",
                                         f4(OUTPUT[2][1]), f4(OUTPUT[2][2]))))
    lu.assertTrue(has(out, "Output shape: (2, 2)"))
    -- the checkpoint prints the right weights, not the document's 0.644
    lu.assertTrue(has(out, "Token 2 weights: [0.6405, 0.3595]"))
    lu.assertEquals(f4(w2), "0.6405")
  end,
}

---------------------------------------------------------------- 4.2

T.TestSeed000SelfAttention = {
  test_shapes_and_weights = function()
    local r = run("scripts/000_self_attention.lua").results
    U.assertShape(r.x, {5, 8})
    U.assertShape(r.output, {5, 4})
    U.assertShape(r.weights, {5, 5})
    U.assertRowsSumToOne(r.weights)
  end,
  test_module_against_loops = function()
    local r = run("scripts/000_self_attention.lua").results
    local x = U.values(r.x)
    local a = U.attention(x, x, U.values(r.W_Q), U.values(r.W_K), U.values(r.W_V))
    lu.assertTrue(U.maxdiff(U.values(r.weights), a.weights) < 1e-5)
    lu.assertTrue(U.maxdiff(U.values(r.output), a.out) < 1e-5)
  end,
  test_weights_init = function()
    -- uniform in +-1/sqrt(d_model) as nn.Linear, and not all alike
    local r = run("scripts/000_self_attention.lua").results
    local lo, hi = math.huge, -math.huge
    for _, W in ipairs{r.W_Q, r.W_K, r.W_V} do
      U.assertShape(W, {8, 4})
      for _, row in ipairs(U.values(W)) do
        for _, v in ipairs(row) do lo, hi = math.min(lo, v), math.max(hi, v) end
      end
    end
    lu.assertTrue(lo >= -1 / math.sqrt(8) and hi <= 1 / math.sqrt(8) and hi - lo > 0.3)
  end,
  test_printed = function()
    local out = run("scripts/000_self_attention.lua").stdout
    lu.assertTrue(has(out, "Input x shape: (5, 8) (5 tokens, d_model=8)"))
    lu.assertTrue(has(out, "Output shape: (5, 4) (5 tokens, d_k=4)"))
    lu.assertTrue(has(out, "Weights shape: (5, 5)"))
    -- sums of float32 weights print as 1.0000 (0.99999994) or as 1.
    -- (exactly 1), as PyTorch prints them, depending on the rounding
    lu.assertNotNil(out:find("Each row sums to 1: tensor%(%[1%.0*, 1%.0*, 1%.0*, 1%.0*, 1%.0*%][^\n]*%)"))
    lu.assertTrue(has(out, "Token 4"))   -- the heatmap drawn in the terminal
  end,
  test_png = function()
    U.assertPng(run("scripts/000_self_attention.lua"), "000_self_attention.png")
  end,
}

---------------------------------------------------------------- 5

T.TestSeed000CrossAttention = {
  test_verification_passes = function()
    local out = run("scripts/000_cross_attention.lua").stdout
    lu.assertTrue(has(out, "Correct! Your cross-attention implementation works perfectly."))
    lu.assertTrue(has(out, "Output shape: (3, 4) (3 text tokens, d_k=4)"))
    lu.assertTrue(has(out, "Weights shape: (3, 6) (3 text tokens attending to 6 image patches)"))
    lu.assertFalse(has(out, "Not quite"))
  end,
  test_student_against_loops = function()
    local r = run("scripts/000_cross_attention.lua").results
    U.assertShape(r.stu_out, {3, 4})
    U.assertShape(r.stu_w, {3, 6})
    U.assertRowsSumToOne(r.stu_w)
    local p = r.params
    local a = U.attention(U.values(r.text), U.values(r.image),
                          U.values(p.W_Q), U.values(p.W_K), U.values(p.W_V))
    lu.assertTrue(U.maxdiff(U.values(r.stu_w), a.weights) < 1e-5)
    lu.assertTrue(U.maxdiff(U.values(r.stu_out), a.out) < 1e-5)
    lu.assertTrue(U.maxdiff(U.values(r.ref_w), a.weights) < 1e-5)
    lu.assertTrue(U.maxdiff(U.values(r.ref_out), a.out) < 1e-5)
  end,
}

---------------------------------------------------------------- 6-8

local PATCHES = {"sky-L", "sky-C", "sky-R", "dog-L", "dog-C", "dog-R", "gnd-L", "gnd-C", "gnd-R"}
local TOKENS = {"A", "dog", "catches", "frisbee"}

T.TestSeed000DogFrisbee = {
  test_embeddings_biased = function()
    -- the same draws here, then the document's biasing with 1-based rows
    local r = run("scripts/000_dog_frisbee.lua").results
    qkv.seed(0)
    local t, img = qkv.randn(4, 16):to("float64"):tolist(), qkv.randn(9, 16):to("float64"):tolist()
    for i = 4, 6 do for d = 1, 16 do img[i][d] = img[i][d] + 0.5 * t[2][d] end end
    for d = 1, 16 do
      img[5][d] = img[5][d] + 0.3 * t[3][d]
      img[8][d] = img[8][d] + 0.5 * t[4][d]
    end
    lu.assertTrue(U.maxdiff(U.values(r.text_embeddings), t) < 1e-6)
    lu.assertTrue(U.maxdiff(U.values(r.image_embeddings), img) < 1e-5)
  end,
  test_cross_attention = function()
    local r = run("scripts/000_dog_frisbee.lua").results
    U.assertShape(r.output, {4, 8})
    U.assertShape(r.weights, {4, 9})
    U.assertRowsSumToOne(r.weights)
    local p = r.params
    local a = U.attention(U.values(r.text_embeddings), U.values(r.image_embeddings),
                          U.values(p.W_Q), U.values(p.W_K), U.values(p.W_V))
    lu.assertTrue(U.maxdiff(U.values(r.weights), a.weights) < 1e-5)
    lu.assertTrue(U.maxdiff(U.values(r.output), a.out) < 1e-5)
  end,
  test_cosine_table = function()
    local r = run("scripts/000_dog_frisbee.lua")
    local res = r.results
    local t, img, sim = U.values(res.text_embeddings), U.values(res.image_embeddings), U.values(res.sim)
    local lines = {}
    for l in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = l end
    local header
    for i, l in ipairs(lines) do if l:find("^%s+sky%-L") then header = i end end
    lu.assertNotNil(header, "no table header")
    lu.assertEquals(lines[header], string.rep(" ", 12) .. string.format(string.rep("%8s", 9), table.unpack(PATCHES)))
    for i = 1, 4 do
      local row = lines[header + i]
      lu.assertEquals(row:sub(1, 12), string.format("%12s", TOKENS[i]))
      local printed = U.numbers(row:sub(13))
      lu.assertEquals(#printed, 9)
      for j = 1, 9 do
        local dot, na, nb = 0, 0, 0
        for d = 1, 16 do
          dot, na, nb = dot + t[i][d] * img[j][d], na + t[i][d] ^ 2, nb + img[j][d] ^ 2
        end
        local c = dot / math.sqrt(na * nb)
        lu.assertTrue(c >= -1 and c <= 1)
        lu.assertAlmostEquals(sim[i][j], c, 1e-5)
        lu.assertAlmostEquals(printed[j], c, 0.0005 + 1e-6)
      end
    end
  end,
  test_bias_raises_similarity = function()
    -- each (token, patch) pair the document biased is more alike after it
    -- ("Patches we biased toward certain text tokens show higher similarity")
    local sim = U.values(run("scripts/000_dog_frisbee.lua").results.sim)
    qkv.seed(0)
    local t, img = qkv.randn(4, 16):to("float64"):tolist(), qkv.randn(9, 16):to("float64"):tolist()
    local function cos(a, b)
      local dot, na, nb = 0, 0, 0
      for d = 1, 16 do dot, na, nb = dot + a[d] * b[d], na + a[d] ^ 2, nb + b[d] ^ 2 end
      return dot / math.sqrt(na * nb)
    end
    for _, p in ipairs{{2, 4}, {2, 5}, {2, 6}, {3, 5}, {4, 8}} do
      local i, j = p[1], p[2]
      lu.assertTrue(sim[i][j] > cos(t[i], img[j]), TOKENS[i] .. " / " .. PATCHES[j])
    end
  end,
  test_dog_looks_at_the_middle_row = function()
    -- with these draws "dog" gives the middle row more than the sky row
    local w = U.values(run("scripts/000_dog_frisbee.lua").results.weights)[2]
    lu.assertTrue(w[4] + w[5] + w[6] > w[1] + w[2] + w[3])
  end,
  test_printed = function()
    local out = run("scripts/000_dog_frisbee.lua").stdout
    lu.assertTrue(has(out, "Text embeddings: (4, 16)"))
    lu.assertTrue(has(out, "Image embeddings: (9, 16)"))
    lu.assertTrue(has(out, "Output shape: (4, 8)"))
    lu.assertTrue(has(out, "Weights shape: (4, 9)"))
  end,
  test_pngs = function()
    local r = run("scripts/000_dog_frisbee.lua")
    U.assertPng(r, "000_cross_attention_maps.png")
    U.assertPng(r, "000_final_maps.png")
  end,
}

return T
