-- seed003.lua: the scripts for seed 003, "Token Alignment and Multi-Head
-- Cross-Attention". Section 3's worked example against values computed by
-- hand; the random examples by properties and against float64 references
-- composed in plain Lua loops from the weights each script returns.
local lu = require "luaunit"
local U = dofile("tests/scripts/util.lua")

---------------------------------------------------------------- helpers

local run, matmul = U.cached, U.matmul
local WIDE = 300   -- every figure here is at least this many pixels wide

-- the printed line that starts with prefix (after leading blanks)
local function line(r, prefix)
  for l in r.stdout:gmatch("[^\n]+") do
    if l:match("^%s*(.*)$"):sub(1, #prefix) == prefix then return l end
  end
  lu.fail("no line starting with '" .. prefix .. "' in:\n" .. r.stdout)
end

-- plain Lua on nested lists, in float64, beside util.lua's references
local function addbias(a, b)
  local c = {}
  for i, row in ipairs(a) do
    c[i] = {}
    for j, v in ipairs(row) do c[i][j] = v + b[j] end
  end
  return c
end

-- columns from .. from + n - 1 of a
-- a Linear's weight (d_out, d_in), as the script's state_dict gives it,
-- as the (d_in, d_out) W that x W + b multiplies by
local function W_of(weight)
  local t = {}
  for i = 1, #weight[1] do
    t[i] = {}
    for j = 1, #weight do t[i][j] = weight[j][i] end
  end
  return t
end

local function cols(a, from, n)
  local c = {}
  for i, row in ipairs(a) do
    c[i] = table.move(row, from, from + n - 1, 1, {})
  end
  return c
end

-- multi-head cross-attention by hand: per head, columns of Q, K, V;
-- softmax(Q_h K_h^T / sqrt(d_k)) V_h; heads side by side, then W_O
local function mhca_ref(text, image, WQ, WK, WV, WO, h)
  local Q, K, V = matmul(text, WQ), matmul(image, WK), matmul(image, WV)
  local d_k = #WQ[1] // h
  local weights, concat = {}, {}
  for i = 1, #text do concat[i] = {} end
  for hd = 1, h do
    local from = (hd - 1) * d_k + 1
    local s = matmul(cols(Q, from, d_k), U.transpose(cols(K, from, d_k)))
    weights[hd] = U.softmax_rows(U.scale(s, 1 / math.sqrt(d_k)))
    local ctx = matmul(weights[hd], cols(V, from, d_k))
    for i, row in ipairs(ctx) do table.move(row, 1, d_k, from, concat[i]) end
  end
  return matmul(concat, WO), weights
end

-- erf by its Taylor series (|x| < 5 here; beyond, erf is ±1 to 1e-11)
local function erf(x)
  if math.abs(x) >= 5 then return x > 0 and 1 or -1 end
  local term, sum, n = x, x, 0
  repeat
    n = n + 1
    term = -term * x * x / n
    sum = sum + term / (2 * n + 1)
  until math.abs(term) < 1e-17
  return 2 / math.sqrt(math.pi) * sum
end

local function gelu(a)
  local c = {}
  for i, row in ipairs(a) do
    c[i] = {}
    for j, v in ipairs(row) do c[i][j] = v * 0.5 * (1 + erf(v / math.sqrt(2))) end
  end
  return c
end

-- unbiased std and mean of a nested list, as torch.std / qkv's std
local function stats(a)
  local xs = {}
  local function walk(t)
    for _, v in ipairs(t) do
      if type(v) == "table" then walk(v) else xs[#xs + 1] = v end
    end
  end
  walk(a)
  local s = 0
  for _, v in ipairs(xs) do s = s + v end
  local mean, ss = s / #xs, 0
  for _, v in ipairs(xs) do ss = ss + (v - mean) ^ 2 end
  return math.sqrt(ss / (#xs - 1)), mean
end

---------------------------------------------------------------- 3 and 4.1

local Aligner = {}
local ALIGNER = "scripts/003_token_aligner.lua"

-- section 3: Z = [1, 2, 3, 4] W, by hand:
-- 0.1 + 0.8 + 2.1 + 4.0 = 7, 0.2 + 1.0 + 2.4 + 4.4 = 8, 0.3 + 1.2 + 2.7 + 4.8 = 9
function Aligner.test_worked_example()
  local r = run(ALIGNER)
  local X = {{1, 2, 3, 4}}
  local W = {{0.1, 0.2, 0.3}, {0.4, 0.5, 0.6}, {0.7, 0.8, 0.9}, {1.0, 1.1, 1.2}}
  local Z = matmul(X, W)[1]
  lu.assertTrue(U.maxdiff(Z, {7, 8, 9}) < 1e-12)
  U.assertShape(r.results.Z, {3})
  lu.assertTrue(U.maxdiff(U.values(r.results.Z), Z) < 1e-5)
  lu.assertEquals(line(r, "Z = X W"), "Z = X W = tensor([7., 8., 9.])")
end

function Aligner.test_shapes_and_parameters()
  local r = run(ALIGNER)
  lu.assertEquals(line(r, "Input:"), "Input:  (16, 768) (16 patches, 768-dim vision space)")
  lu.assertEquals(line(r, "Output:"), "Output: (16, 512) (16 patches, 512-dim text space)")
  lu.assertEquals(line(r, "Projection matrix shape:"), "Projection matrix shape: (512, 768)")
  U.assertPrinted(r.stdout, "That's 393,216 learnable parameters just for alignment!")
  -- the bias adds d_text = 512 more
  lu.assertEquals(r.results.nparams, 768 * 512 + 512)
  U.assertPrinted(r.stdout, "(393,728 with the 512 biases)")
  U.assertShape(r.results.dummy_image, {16, 768})
  U.assertShape(r.results.projected, {16, 512})
end

-- the first 8 output dims are dummy_image W + b, with W in nn.Linear's init range
function Aligner.test_projection()
  local r = run(ALIGNER)
  local x, W, b = U.values(r.results.dummy_image), U.values(r.results.W8), U.values(r.results.b8)
  local want = addbias(matmul(x, W), b)
  lu.assertTrue(U.maxdiff(cols(U.values(r.results.projected), 1, 8), want) < 1e-5)
  local bound = 1 / math.sqrt(768)
  for _, row in ipairs(W) do
    for _, v in ipairs(row) do lu.assertTrue(math.abs(v) <= bound) end
  end
end

function Aligner.test_histograms()
  local r = run(ALIGNER)
  U.assertPng(r, "003_token_histograms.png", WIDE)
  U.assertPrinted(r.stdout, "The projection changes the distribution — the model learns")
end

---------------------------------------------------------------- 4.2 and 5

local Cross = {}
local CROSS = "scripts/003_multi_head_cross.lua"

function Cross.test_shapes()
  local r = run(CROSS)
  lu.assertEquals(line(r, "Output shape:"),
                  "Output shape: (3, 16) — same as text input (3 tokens, d_model=16)")
  lu.assertEquals(line(r, "Attention shape:"), "Attention shape: (4, 3, 9) — 4 heads, each 3x9")
  U.assertShape(r.results.output, {3, 16})
  U.assertShape(r.results.attn, {4, 3, 9})
  U.assertRowsSumToOne(r.results.attn)
end

-- MultiHeadCrossAttention against the heads composed by hand
function Cross.test_against_reference()
  local R = run(CROSS).results
  local V = U.values
  local m = R.mhca
  local out, w = mhca_ref(V(R.text), V(R.image), V(m.W_Q), V(m.W_K), V(m.W_V), V(m.W_O), 4)
  lu.assertTrue(U.maxdiff(V(R.attn), w) < 1e-5)
  lu.assertTrue(U.maxdiff(V(R.output), out) < 1e-5)
end

function Cross.test_verification_messages()
  local r = run(CROSS)
  U.assertPrinted(r.stdout, "Correct! Your aligned cross-attention pipeline works.")
  lu.assertEquals(line(r, "Input:"), "  Input:  text (5, 256), image (16, 768)")
  lu.assertEquals(line(r, "Output:"), "  Output: (5, 256)")
  lu.assertEquals(line(r, "Attention:"), "  Attention: (4, 5, 16)")
  U.assertPrinted(r.stdout, "\n\nDimension mismatch (768 vs 256) handled by alignment!")
  U.assertShape(r.results.out, {5, 256})
  U.assertShape(r.results.attn_in, {4, 5, 16})
  U.assertRowsSumToOne(r.results.attn_in)
end

-- AlignedCrossAttention = align the image (x W + b), then the cross-attention
function Cross.test_aligned_against_reference()
  local R = run(CROSS).results
  local V = U.values
  local m = R.model
  local aligned = addbias(matmul(V(R.image_in), W_of(V(m["aligner.proj.weight"]))), V(m["aligner.proj.bias"]))
  local out, w = mhca_ref(V(R.text_in), aligned, V(m["cross_attn.W_Q"]), V(m["cross_attn.W_K"]),
                          V(m["cross_attn.W_V"]), V(m["cross_attn.W_O"]), 4)
  lu.assertTrue(U.maxdiff(V(R.attn_in), w) < 1e-5)
  lu.assertTrue(U.maxdiff(V(R.out), out) < 1e-5)
end

---------------------------------------------------------------- 6

local Heads = {}
local HEADS = "scripts/003_head_specialization.lua"

-- the embeddings are seed 7's draws, with the document's rows 3, 4, 5, 7
-- (0-based) biased: rows 4, 5, 6, 8 here
function Heads.test_biased_rows()
  local R = run(HEADS).results
  qkv.seed(7)
  local t = qkv.randn(4, 32):to("float64"):tolist()
  local i = qkv.randn(9, 32):to("float64"):tolist()
  lu.assertEquals(U.values(R.text_emb), t)
  local bias = {[4] = {2, 0.8}, [5] = {2, 1.0, 3, 0.4}, [6] = {2, 0.6}, [8] = {4, 1.0}}
  local got = U.values(R.image_emb)
  for row = 1, 9 do
    for c = 1, 32 do
      local want, b = i[row][c], bias[row] or {}
      for k = 1, #b, 2 do want = want + t[b[k]][c] * b[k + 1] end
      lu.assertAlmostEquals(got[row][c], want, 1e-6, "image_emb[" .. row .. "][" .. c .. "]")
    end
  end
end

function Heads.test_against_reference()
  local R = run(HEADS).results
  local V = U.values
  U.assertShape(R.attn_weights, {4, 4, 9})
  U.assertShape(R.output, {4, 32})
  U.assertRowsSumToOne(R.attn_weights)
  local m = R.mhca
  local out, w = mhca_ref(V(R.text_emb), V(R.image_emb), V(m.W_Q), V(m.W_K), V(m.W_V), V(m.W_O), 4)
  lu.assertTrue(U.maxdiff(V(R.attn_weights), w) < 1e-5)
  lu.assertTrue(U.maxdiff(V(R.output), out) < 1e-5)
end

-- the "dog" token's four heads each attend in their own way
function Heads.test_dog_heads_differ()
  local w = U.values(run(HEADS).results.attn_weights)
  for a = 1, 4 do
    for b = a + 1, 4 do
      lu.assertTrue(U.maxdiff(w[a][2], w[b][2]) > 0.01, "heads " .. a .. " and " .. b)
    end
  end
end

function Heads.test_figures()
  local r = run(HEADS)
  U.assertPng(r, "003_dog_heads.png", WIDE)
  U.assertPng(r, "003_all_heads.png", WIDE)
  U.assertPrinted(r.stdout, "Notice: different heads attend to different parts of the image!")
  -- the terminal heatmap, as plain numbers under NO_COLOR, names the patches
  U.assertPrinted(r.stdout, "dog-C")
  U.assertPrinted(r.stdout, "Head 4")
end

---------------------------------------------------------------- 7

local Stats = {}
local STATS = "scripts/003_alignment_stats.lua"

-- the printed std/mean agree with the returned tensors' (unbiased std)
function Stats.test_lines()
  local r = run(STATS)
  local R = r.results
  for _, c in ipairs{{"Original image tokens", R.image_tok}, {"Truncated (naive)", R.image_padded},
                     {"Aligned (learned)", R.image_aligned}} do
    local n = U.numbers(line(r, c[1]))
    local std, mean = stats(U.values(c[2]))
    lu.assertEquals(#n, 2, c[1])
    lu.assertTrue(math.abs(n[1] - std) < 5.1e-5, c[1] .. " std " .. n[1] .. " vs " .. std)
    lu.assertTrue(math.abs(n[2] - mean) < 5.1e-5, c[1] .. " mean " .. n[2] .. " vs " .. mean)
  end
  U.assertPrinted(r.stdout, "Information comparison:")
  U.assertPrinted(r.stdout, "\n\nTruncation loses 32 dimensions of information!")
  U.assertPrinted(r.stdout, "Learned alignment preserves ALL 64 dimensions via a 64x32 matrix.")
end

-- "padding" is the first d_text columns; alignment is x W + b
function Stats.test_tensors()
  local R = run(STATS).results
  local x = U.values(R.image_tok)
  U.assertShape(R.text_tok, {4, 32})
  U.assertShape(R.image_tok, {9, 64})
  U.assertShape(R.image_padded, {9, 32})
  U.assertShape(R.image_aligned, {9, 32})
  lu.assertEquals(U.values(R.image_padded), cols(x, 1, 32))
  local a = R.aligner
  local want = addbias(matmul(x, W_of(U.values(a["proj.weight"]))), U.values(a["proj.bias"]))
  lu.assertTrue(U.maxdiff(U.values(R.image_aligned), want) < 1e-5)
end

---------------------------------------------------------------- 8

local Mlp = {}
local MLP = "scripts/003_linear_vs_mlp.lua"

-- linear: x W + b; MLP: GELU(x W1 + b1) W2 + b2 with the exact (erf) GELU
function Mlp.test_against_reference()
  local R = run(MLP).results
  local V = U.values
  local x = V(R.image_tok)
  U.assertShape(R.linear_out, {9, 32})
  U.assertShape(R.mlp_out, {9, 32})
  local L, M = R.linear, R.mlp
  local lin = addbias(matmul(x, W_of(V(L["proj.weight"]))), V(L["proj.bias"]))
  lu.assertTrue(U.maxdiff(V(R.linear_out), lin) < 1e-5)
  local hidden = gelu(addbias(matmul(x, W_of(V(M["proj.1.weight"]))), V(M["proj.1.bias"])))
  local mlp = addbias(matmul(hidden, W_of(V(M["proj.3.weight"]))), V(M["proj.3.bias"]))
  lu.assertTrue(U.maxdiff(V(R.mlp_out), mlp) < 1e-5)
  lu.assertTrue(U.maxdiff(lin, mlp) > 0.1)
end

function Mlp.test_figure_and_lines()
  local r = run(MLP)
  U.assertPng(r, "003_linear_vs_mlp.png", WIDE)
  U.assertPrinted(r.stdout, "Key difference: MLP introduces a nonlinearity (GELU),")
  U.assertPrinted(r.stdout, "which lets it learn more complex mappings between spaces.")
  U.assertPrinted(r.stdout, "Linear is simpler but works surprisingly well (as shown in LLaVA).")
end

-- the aligners learn: each loss ends far below where it started, the MLP
-- below the linear one, and the printed lines are the returned losses
local Learned = {}
function Learned.test_losses_fall()
  local r = run("scripts/003_learned_alignment.lua")
  local L, n = r.results.losses, r.results.steps
  for _, m in ipairs{"linear", "mlp"} do
    lu.assertTrue(L[m][n] < L[m][1] / 10, m .. string.format(": %g -> %g", L[m][1], L[m][n]))
    lu.assertStrContains(r.stdout, string.format("  step %3d  loss %.5f", n, L[m][n]))
  end
  lu.assertTrue(L.mlp[n] < L.linear[n], "the MLP fits the nonlinear map better")
  -- the curves drawn: each point where the layout says, in its palette
  -- colour; the MLP's last point below the linear one's
  U.assertPng(r, "003_learned_alignment_loss.png", WIDE)
  local img, fig = r.images["003_learned_alignment_loss.png"], r.results.fig
  for k, rgb in ipairs{{0x1f, 0x77, 0xb4}, {0xff, 0x7f, 0x0e}} do
    for _, i in ipairs{1, n // 2, n} do
      local q, hit = fig.points[k][i], false
      for dy = -2, 2 do
        for dx = -2, 2 do
          local pr, pg, pb = img.pixel(q.x + dx, q.y + dy)
          hit = hit or (math.abs(pr - rgb[1]) + math.abs(pg - rgb[2]) + math.abs(pb - rgb[3]) < 60)
        end
      end
      lu.assertTrue(hit, ("series %d point %d"):format(k, i))
    end
  end
  lu.assertTrue(fig.points[2][n].y >= fig.points[1][n].y)
end

return {TestSeed003TokenAligner = Aligner, TestSeed003MultiHeadCross = Cross,
        TestSeed003HeadSpecialization = Heads, TestSeed003AlignmentStats = Stats,
        TestSeed003LinearVsMlp = Mlp, TestSeed003LearnedAlignment = Learned}
