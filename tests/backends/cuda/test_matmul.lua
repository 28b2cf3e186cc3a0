-- test_matmul.lua: the cross-backend suite's products (the backend's
-- matmul): shapes, layouts, batches broadcast, scores and project
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local lu = require "luaunit"
local C = dofile("tests/helpers/cuda_suite.lua")
local need, same, values, FLOATS = C.need, C.same, C.values, C.FLOATS

---------------------------------------------------------------- matmul

TestCudaMatmul = {}

function TestCudaMatmul:testShapesLayoutsAndBatches()
  need()
  local cases = {
    {{3, 4}, {4, 5}}, {{1, 1}, {1, 1}}, {{7}, {7, 3}}, {{6, 7}, {7}}, {{5}, {5}},
    {{2, 3, 4}, {4, 5}}, {{2, 3, 4}, {2, 4, 5}}, {{1, 3, 4}, {6, 4, 2}},
    {{2, 1, 33, 17}, {3, 17, 65}}, {{0, 4}, {4, 3}}, {{3, 0}, {0, 2}}, {{130, 257}, {257, 129}},
  }
  for _, dt in ipairs(FLOATS) do
    for _, c in ipairs(cases) do
      same(("%s %s @ %s"):format(dt, table.concat(c[1], "x"), table.concat(c[2], "x")),
           qkv.matmul, {values(c[1], dt), values(c[2], dt)})
    end
    same(dt .. " a:t() @ b:t()", function(a, b) return a:t():matmul(b:t()) end,
         {values({9, 5}, dt), values({4, 9}, dt)})
    same(dt .. " broadcast batch (stride 0)", function(a, b) return a:expand(4, 3, 5):matmul(b) end,
         {values({1, 3, 5}, dt), values({4, 5, 2}, dt)})
    same(dt .. " scores", function(q, k) return qkv.scores(q, k) end,
         {values({2, 9, 16}, dt), values({2, 11, 16}, dt)})
    same(dt .. " project", function(x, w, b) return qkv.project(x, w, b) end,
         {values({3, 5, 8}, dt), values({8, 6}, dt), values({6}, dt)})
  end
end

-- the float32 matmul precision's bfloat16 parts (vm/dispatch/matmul.c),
-- taken on every backend by qkv._split_products(true): the device's
-- product of the parts is the CPU's, to float32 sums; and allow_tf32 is
-- the precision "high" or "highest", as PyTorch's
function TestCudaMatmul:testFloat32MatmulPrecision()
  need()
  local ok, err = pcall(function()
    qkv._split_products(true)
    for _, p in ipairs{"high", "medium"} do
      qkv.set_float32_matmul_precision(p)
      same(p .. " matmul", qkv.matmul, {values({2, 40, 70}, "float32"), values({70, 30}, "float32")}, 1e-5)
      same(p .. " scores", function(q, k) return qkv.scores(q, k) end,
           {values({2, 9, 16}, "float32"), values({2, 11, 16}, "float32")}, 1e-5)
    end
  end)
  qkv.set_float32_matmul_precision("highest")
  qkv._split_products(false)
  assert(ok, err)
  lu.assertFalse(qkv.cuda.allow_tf32(true))
  lu.assertEquals(qkv.get_float32_matmul_precision(), "high")
  qkv.set_float32_matmul_precision("medium")
  lu.assertTrue(qkv.cuda.allow_tf32(false))
  lu.assertEquals(qkv.get_float32_matmul_precision(), "highest")
end
