-- seed002.lua: the scripts of seed 002 ("Implementation and Analysis of
-- Scaled Dot-Product Attention"). The worked examples are checked against
-- float64 values computed with util.lua's plain loops; the random ones by
-- properties and by recomputing the attention from the returned inputs.
local lu = require "luaunit"
local U = dofile("tests/scripts/util.lua")

local run, softmax = U.cached, U.softmax_rows

local function scaled_scores(q, k, scale)
  return U.scale(U.matmul(q, U.transpose(k)), scale)
end

local function line_with(stdout, prefix)
  for line in stdout:gmatch("[^\n]+") do
    if line:sub(1, #prefix) == prefix then return line end
  end
  lu.fail("no line starting with " .. prefix .. " in:\n" .. stdout)
end

-- the tensor printer's lines for a nested list of rows, 4 decimals
local function printed_rows(w)
  local t = {}
  for i, row in ipairs(w) do
    local cells = {}
    for j, v in ipairs(row) do cells[j] = string.format("%.4f", v) end
    t[i] = "[" .. table.concat(cells, ", ") .. "]"
  end
  return t
end

-- the colour drawn near the top-left corner of cell (i, j) of a heatmap
-- whose layout is fig (the annotation sits in the middle) against cmap at t
local function assert_cell_colour(r, name, fig, i, j, cmap, t)
  local img = r.images[name]
  local x = math.floor(fig.x0 + (j - 1) * fig.cw + 3)
  local y = math.floor(fig.y0 + (i - 1) * fig.ch + 3)
  local got = {img.pixel(x, y)}
  local want = {qkv.plot.colormap(cmap, t)}
  for c = 1, 3 do
    lu.assertTrue(math.abs(got[c] - 255 * want[c]) <= 2,
      string.format("%s cell (%d, %d): got %d,%d,%d", name, i, j, got[1], got[2], got[3]))
  end
end

local T = {}

---------------------------------------------------------------- Experiment 1

local cross = "scripts/002_random_cross_attention.lua"
T.TestSeed002RandomCross = {
  test_shapes_printed = function()
    local r = run(cross)
    lu.assertStrContains(r.stdout, "Output shape: (1, 4, 8)\n")
    lu.assertStrContains(r.stdout, "Attention Weights shape: (1, 4, 4)\n")
    lu.assertEquals(r.results.output.shape, {1, 4, 8})
    lu.assertEquals(r.results.weights.shape, {1, 4, 4})
  end,
  test_is_scaled_dot_product_attention = function()
    local r = run(cross).results
    local q, k, v = U.values(r.query)[1], U.values(r.key)[1], U.values(r.value)[1]
    local w = softmax(scaled_scores(q, k, 1 / math.sqrt(8)))
    lu.assertTrue(U.maxdiff(U.values(r.weights)[1], w) < 1e-5)
    lu.assertTrue(U.maxdiff(U.values(r.output)[1], U.matmul(w, v)) < 1e-5)
    U.assertRowsSumToOne(U.values(r.weights)[1])
  end,
  test_png = function()
    local r = run(cross)
    U.assertPng(r, "002_random_cross_attention_weights.png")
  end,
}

---------------------------------------------------------------- Experiment 2

-- Q = K = V = tokens {1,0,1,0}, {0,1,0,1}, {1,0,1,0}: the scaled scores are
-- 2/sqrt(4) = 1 between like tokens, 0 otherwise, so a row of tokens 0/2 is
-- softmax(1, 0, 1) = (e, 1, e)/(2e+1) and token 1's is (1, e, 1)/(e+2).
local identical = "scripts/002_identical_tokens.lua"
T.TestSeed002Identical = {
  test_weights_by_hand = function()
    local r = run(identical).results
    local e = math.exp(1)
    local a, b = e / (2 * e + 1), 1 / (2 * e + 1)
    local want = {{a, b, a}, {1 / (e + 2), e / (e + 2), 1 / (e + 2)}, {a, b, a}}
    lu.assertTrue(U.maxdiff(U.values(r.weights_self)[1], want) < 1e-6)
    local x = {{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 0, 1, 0}}
    lu.assertTrue(U.maxdiff(U.values(r.output_self)[1], U.matmul(want, x)) < 1e-6)
  end,
  test_printed = function()
    local out = run(identical).stdout
    lu.assertStrContains(out, "Visualizing Self-Attention (Note: Token 0 and 2 are identical)\n")
    -- (e, 1, e)/(2e+1) = 0.4223, 0.1554; (1, e, 1)/(e+2) = 0.2119, 0.5761
    lu.assertStrContains(out, "tensor([[[0.4223, 0.1554, 0.4223],\n")
    lu.assertStrContains(out, "         [0.2119, 0.5761, 0.2119],\n")
    lu.assertStrContains(out, "         [0.4223, 0.1554, 0.4223]]])\n")
    lu.assertStrContains(out, "Token 1 -> itself: 0.5761 = e/(e+2); -> tokens 0, 2: 0.2119 each\n")
    lu.assertStrContains(out, "Token 0 -> tokens 0, 2: 0.4223 = e/(2e+1) each; -> token 1: 0.1554\n")
  end,
  test_png = function()
    local r = run(identical)
    U.assertPng(r, "002_exp2_self_attention.png")
    -- token 1 on itself is the largest weight: the top of viridis; the
    -- smallest, tokens 0 and 2 on token 1, the bottom
    local fig = r.results.fig
    assert_cell_colour(r, "002_exp2_self_attention.png", fig, 2, 2, "viridis", 1)
    assert_cell_colour(r, "002_exp2_self_attention.png", fig, 1, 2, "viridis", 0)
    assert_cell_colour(r, "002_exp2_self_attention.png", fig, 3, 2, "viridis", 0)
  end,
}

---------------------------------------------------------------- Semantic linking

local semantic = "scripts/002_semantic_linking.lua"
local labels = {"River", "Water", "Bank(Finance)", "Bank(Shore)"}
local function semantic_weights()
  local x = {{0, 1, 0, 0.5}, {0, 1.2, 0, 0}, {1.2, 0, 1, 0}, {0.1, 0.9, 0, 1}}
  local s = scaled_scores(x, x, 1 / 2)
  return s, softmax(s)
end
T.TestSeed002Semantic = {
  test_weights = function()
    local r = run(semantic).results
    local s, w = semantic_weights()
    lu.assertTrue(U.maxdiff(U.values(r.scores)[1], s) < 1e-6)
    lu.assertTrue(U.maxdiff(U.values(r.weights)[1], w) < 1e-6)
    -- Bank(Shore)'s dot products are 1.4, 1.08, 0.12, 1.82: halved, 0.7 ...
    lu.assertAlmostEquals(w[4][1], math.exp(0.7) / (math.exp(0.7) + math.exp(0.54)
      + math.exp(0.06) + math.exp(0.91)), 1e-12)
  end,
  test_printed = function()
    local out = run(semantic).stdout
    local _, w = semantic_weights()
    local rows = printed_rows(w)
    lu.assertStrContains(out, "tensor([[" .. rows[1] .. ",\n")
    for i = 2, 3 do lu.assertStrContains(out, "         " .. rows[i] .. ",\n") end
    lu.assertStrContains(out, "         " .. rows[4] .. "]])\n")
    for j, name in ipairs(labels) do
      lu.assertStrContains(out, string.format("Bank(Shore) -> %-13s %.4f\n", name, w[4][j]))
    end
    lu.assertStrContains(out, "Bank(Shore) -> River         0.2768\n")
  end,
  test_png = function()
    local r = run(semantic)
    U.assertPng(r, "002_semantic_linking_disambiguation.png")
  end,
}

---------------------------------------------------------------- Experiment 3

local scaling = "scripts/002_scaling.lua"
local function entropy(row)
  local h = 0
  for _, p in ipairs(row) do if p > 0 then h = h - p * math.log(p) end end
  return h
end
T.TestSeed002Scaling = {
  test_first_cell = function()
    local r = run(scaling)
    local q, k = U.values(r.results.q_large)[1], U.values(r.results.k_large)[1]
    lu.assertEquals(r.results.q_large.shape, {1, 4, 512})
    local raw = scaled_scores(q, k, 1)
    local n, mean, var = 16, 0, 0
    for _, row in ipairs(raw) do for _, v in ipairs(row) do mean = mean + v / n end end
    for _, row in ipairs(raw) do for _, v in ipairs(row) do var = var + (v - mean) ^ 2 / (n - 1) end end
    lu.assertAlmostEquals(r.results.var_raw, var, 1e-3 * var)
    lu.assertAlmostEquals(r.results.var_scaled, var / 512, 1e-3 * var / 512)
    lu.assertEquals(line_with(r.stdout, "Variance of scores WITHOUT scaling: "),
      string.format("Variance of scores WITHOUT scaling: %.2f", r.results.var_raw))
    lu.assertEquals(line_with(r.stdout, "Variance of scores WITH scaling: "),
      string.format("Variance of scores WITH scaling: %.2f", r.results.var_scaled))
    local s = {}
    for j, v in ipairs(raw[1]) do s[j] = v / math.sqrt(512) end
    lu.assertTrue(U.maxdiff(U.values(r.results.row_no_scale), softmax({raw[1]})[1]) < 1e-5)
    lu.assertTrue(U.maxdiff(U.values(r.results.row_scaled), softmax({s})[1]) < 1e-5)
    lu.assertStrContains(r.stdout, "\nComparing the first row of softmax weights:\n")
    lu.assertStrContains(r.stdout, "No Scale (Peaky):\ttensor([")
    lu.assertStrContains(r.stdout, "Scaled (Smoother):\ttensor([")
  end,
  test_figures_data = function()
    local r = run(scaling).results
    lu.assertEquals(r.weights_no_scale.shape, {1, 10, 10})
    local q, k = U.values(r.q)[1], U.values(r.k)[1]
    local raw, scaled = scaled_scores(q, k, 1), scaled_scores(q, k, 1 / math.sqrt(512))
    lu.assertTrue(U.maxdiff(U.values(r.scores_raw)[1], raw) < 1e-3)
    lu.assertTrue(U.maxdiff(U.values(r.scores_scaled)[1], scaled) < 1e-4)
    local a, b = U.values(r.weights_no_scale)[1], U.values(r.weights_scaled)[1]
    lu.assertTrue(U.maxdiff(a, softmax(raw)) < 1e-5)
    lu.assertTrue(U.maxdiff(b, softmax(scaled)) < 1e-5)
    U.assertRowsSumToOne(a)
    U.assertRowsSumToOne(b)
    -- unscaled rows are peaky: lower entropy than the scaled ones
    for i = 1, 10 do lu.assertTrue(entropy(a[i]) < entropy(b[i])) end
  end,
  test_png = function()
    local r = run(scaling)
    U.assertPng(r, "002_scaling_effect_comparison.png")
  end,
}

---------------------------------------------------------------- Experiment 4

local padding = "scripts/002_padding_mask.lua"
T.TestSeed002Padding = {
  test_masked_columns_zero = function()
    local r = run(padding).results
    lu.assertEquals(U.values(r.mask), {{{1, 1, 1, 0, 0}}})
    local w = U.values(r.weights_with_mask)[1]
    U.assertRowsSumToOne(w)
    for i = 1, 5 do
      lu.assertEquals(w[i][4], 0)
      lu.assertEquals(w[i][5], 0)
    end
    local s = U.values(r.raw_scores)[1]
    lu.assertTrue(U.maxdiff(w, softmax(s, function(j) return j <= 3 end)) < 1e-6)
  end,
  test_no_mask = function()
    local r = run(padding).results
    local w = U.values(r.weights_no_mask)[1]
    U.assertRowsSumToOne(w)
    lu.assertTrue(U.maxdiff(w, softmax(U.values(r.raw_scores)[1])) < 1e-6)
    for i = 1, 5 do lu.assertTrue(w[i][4] > 0 and w[i][5] > 0) end
  end,
  test_printed = function()
    local r = run(padding)
    local rows = printed_rows(U.values(r.results.weights_with_mask)[1])
    lu.assertStrContains(r.stdout, "tensor([[" .. rows[1] .. ",\n")
    lu.assertStrContains(r.stdout, "         " .. rows[5] .. "]])\n")
    lu.assertStrContains(r.stdout, "0.0000, 0.0000]")
  end,
  test_png = function()
    local r = run(padding)
    U.assertPng(r, "002_padding_mask_effect_comparison.png")
    -- Figure B: every <PAD> column is drawn in mako's darkest colour (0)
    local fig = r.results.fig.panels[2]
    for i = 1, 5 do
      for j = 4, 5 do
        assert_cell_colour(r, "002_padding_mask_effect_comparison.png", fig, i, j, "mako", 0)
      end
    end
  end,
}

---------------------------------------------------------------- Experiment 5

local reshape = "scripts/002_multi_head_reshape.lua"
T.TestSeed002MultiHead = {
  test_printed = function()
    local out = run(reshape).stdout
    lu.assertStrContains(out, "Original Shape: (1, 10, 512) (1 Batch, 10 Words, 512 Features)\n")
    lu.assertStrContains(out, "Multi-Head Shape: (1, 8, 10, 64) (1 Batch, 8 Heads, 10 Words, 64 Features)\n")
    lu.assertStrContains(out, "\nResult: The model now has 8 independent 'detectives', "
      .. "each focusing on a 64-dimensional subspace.\n")
    lu.assertStrContains(out, "Merged back: (1, 10, 512), max |merged - x| = 0\n")
    lu.assertStrContains(out, "512 x 512 = 262144 elements per head")
    lu.assertStrContains(out, "16000 x 16000 = 256000000 elements per head, 8192.0 MB")
  end,
  test_heads_split_features = function()
    local r = run(reshape).results
    lu.assertEquals(r.x_multi_head.shape, {1, 8, 10, 64})
    local x, h = U.values(r.x)[1], U.values(r.x_multi_head)[1]
    -- head i, word n, feature d is x's feature (i - 1) * 64 + d of word n
    local bad = 0
    for i = 1, 8 do
      for n = 1, 10 do
        for d = 1, 64 do
          if h[i][n][d] ~= x[n][(i - 1) * 64 + d] then bad = bad + 1 end
        end
      end
    end
    lu.assertEquals(bad, 0)
    lu.assertEquals(U.maxdiff(U.values(r.merged), U.values(r.x)), 0)
  end,
  test_quadratic_cost = function()
    local r = run(reshape).results
    lu.assertEquals(r.elements_512, 262144)
    lu.assertEquals(r.elements_16000, 256000000)
  end,
}

---------------------------------------------------------------- the gradients claim

-- the gradient at the logits, unscaled, vanishes as d_k grows; scaled, it
-- keeps its size; the printed table is the returned numbers
T.TestSeed002VanishingGradients = {
  test_claim = function()
    local r = run("scripts/002_vanishing_gradients.lua")
    local rows = r.results.rows
    lu.assertEquals(#rows, 3)
    lu.assertTrue(rows[3].raw < rows[1].raw / 4, "unscaled: d_k 512 against d_k 8")
    for _, row in ipairs(rows) do
      lu.assertTrue(row.scaled > row.raw, "d_k " .. row.d_k)
      lu.assertTrue(row.scaled > rows[1].scaled / 2 and row.scaled < rows[1].scaled * 2,
                    "scaled stays the same size, d_k " .. row.d_k)
      lu.assertStrContains(r.stdout, string.format("%6d  %20.3e  %20.3e", row.d_k, row.raw, row.scaled))
    end
  end,
  test_png = function()
    U.assertPng(run("scripts/002_vanishing_gradients.lua"), "002_vanishing_gradients.png")
  end,
}

return T
