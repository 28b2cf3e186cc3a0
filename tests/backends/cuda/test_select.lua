-- test_select.lua: the cross-backend suite's selection (the backend's
-- where, gather, scatter_add, sort and tri): where, gather, scatter_add_,
-- index_add_, embedding, a stable sort with NaN on top, topk, tril and
-- triu in every dtype, the causal and padding masks made on the device
-- (tests/helpers/cuda_suite.lua says what the suite checks)
local C = dofile("tests/helpers/cuda_suite.lua")
local need, same, compare, values, ALL = C.need, C.same, C.compare, C.values, C.ALL
local inf, nan = C.inf, C.nan

---------------------------------------------------------------- selection

TestCudaSelect = {}

function TestCudaSelect:testWhereGatherScatter()
  need()
  for _, dt in ipairs{"float32", "float64", "int64", "bool"} do
    same(dt .. " where", qkv.where, {values({4, 7}, "bool"), values({4, 7}, dt), values({7}, dt)})
    same(dt .. " where number", function(c, a) return qkv.where(c, a, 0) end,
         {values({3, 5}, "bool"), values({3, 5}, dt)})
    local idx = (qkv.rand(5, 3) * 6):long() + 1
    same(dt .. " gather", function(a, i) return a:gather(2, i) end, {values({5, 6}, dt), idx})
  end
  for _, dt in ipairs{"float32", "float64", "int64"} do
    local idx = (qkv.rand(9, 4) * 3):long() + 1
    same(dt .. " scatter_add_ (repeated positions)", function(o, i, s)
      return o:clone():scatter_add_(1, i, s)
    end, {values({3, 4}, dt), idx, values({9, 4}, dt)})
    same(dt .. " index_add_", function(o, i, s) return o:clone():index_add_(1, i, s) end,
         {values({3, 4}, dt), qkv.tensor({1, 3, 1, 2, 3}, "int64"), values({5, 4}, dt)})
    same(dt .. " embedding", function(i, w) return qkv.embedding(i, w) end,
         {qkv.tensor({{1, 4}, {2, 2}}, "int64"), values({4, 6}, dt)})
  end
end

function TestCudaSelect:testSortIsStableWithNaNOnTop()
  need()
  local x = qkv.tensor{{3, 1, nan, 2, 1, -inf, inf, 2, -0.0, 0}, {5, 5, 5, 1, 1, 1, nan, nan, 0, 0}}
  for _, dt in ipairs{"float32", "float64"} do
    for _, desc in ipairs{false, true} do
      same(dt .. " sort desc=" .. tostring(desc), function(v) return v:sort(2, desc) end, {x:to(dt)})
    end
  end
  for _, dt in ipairs{"float32", "float64", "int64", "bool"} do
    for _, s in ipairs{{1}, {0}, {7}, {4, 100}, {3, 5000}, {2, 3, 9}} do
      for _, desc in ipairs{false, true} do
        same(("%s sort %s desc=%s"):format(dt, table.concat(s, "x"), tostring(desc)),
             function(v) return v:sort(-1, desc) end, {values(s, dt)})
      end
    end
    same(dt .. " sort dim 1", function(v) return v:sort(1) end, {values({6, 4}, dt)})
    same(dt .. " topk", function(v) return v:topk(3) end, {values({5, 20}, dt)})
  end
end

-- tril and triu (the backend's tri): every dtype, since the kernel moves
-- elements of 1, 2, 4 or 8 bytes whatever they hold; batched; bands past
-- either edge; and the masks made with it on the device, causal (in
-- place) and padding, as the CPU makes them
function TestCudaSelect:testTriangles()
  need()
  for _, dt in ipairs(ALL) do
    for _, s in ipairs{{3, 1}, {2, 3, 4}, {7, 33}, {2, 0, 3}, {3, 130}, {1, 1, 1}} do
      for _, k in ipairs{-40, -2, 0, 1, 40} do
        same(("%s tril/triu %s k = %d"):format(dt, table.concat(s, "x"), k),
             function(v) return v:tril(k), qkv.triu(v, k) end, {values(s, dt)})
      end
    end
  end
  local function on_gpu(f, ...)
    qkv.set_default_device("cuda")
    local r = table.pack(pcall(f, ...))
    qkv.set_default_device("cpu")
    if not r[1] then error(r[2], 0) end
    return table.unpack(r, 2, r.n)
  end
  for _, c in ipairs{{4, 4}, {3, 7}, {7, 3}, {0, 5}, {5, 0}, {1, 300}} do
    compare(qkv.causal(c[1], c[2]), on_gpu(qkv.causal, c[1], c[2]),
            ("causal(%d, %d)"):format(c[1], c[2]))
  end
  for _, c in ipairs{{{3, 0, 2}}, {{3, 0, 2}, 6}, {{}}, {{0, 0}, 0}, {{130, 7}}} do
    compare(qkv.padding(c[1], c[2]), on_gpu(qkv.padding, c[1], c[2]),
            "padding {" .. table.concat(c[1], ", ") .. "}")
  end
end
