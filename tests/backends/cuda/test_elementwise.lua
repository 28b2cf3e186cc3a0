-- test_elementwise.lua: the cross-backend suite's elementwise ops (the
-- backend's binary, unary and masked_fill): every binary op with
-- broadcasting and special values, every unary op in every float dtype,
-- gelu's gradient, masked_fill and clamp (the op lists: C.BINARY and
-- C.UNARY in tests/helpers/cuda_suite.lua, which says what the suite checks)
local C = dofile("tests/helpers/cuda_suite.lua")
local need, same, values, SHAPES, FLOATS = C.need, C.same, C.values, C.SHAPES, C.FLOATS
local BINARY, UNARY = C.BINARY, C.UNARY
local inf, nan = C.inf, C.nan

---------------------------------------------------------------- elementwise

TestCudaElementwise = {}

function TestCudaElementwise:testBinaryWithBroadcasting()
  need()
  local pairs_ = {{{2, 3, 4}, {2, 3, 4}}, {{3, 1}, {1, 4}}, {{5}, {}}, {{0, 3}, {3}},
                  {{7, 33}, {33}}, {{1}, {257}}, {{2, 1, 3}, {4, 1}}}
  for _, dt in ipairs{"float32", "float64", "int64", "bool"} do
    for _, op in ipairs(BINARY) do
      for _, sh in ipairs(pairs_) do
        local a, b = values(sh[1], dt), values(sh[2], dt)
        if op == "pow" and dt ~= "float32" and dt ~= "float64" then b = b:abs() end
        local ok = pcall(qkv[op], a, b)
        if ok then
          same(("%s %s %s %s"):format(dt, op, table.concat(sh[1], "x"), table.concat(sh[2], "x")),
               qkv[op], {a, b})
        end
      end
    end
  end
end

function TestCudaElementwise:testSpecialValues()
  need()
  local a = qkv.tensor{0, -0.0, 1, -1, inf, -inf, nan, 2, 1e-30, 88}
  local b = qkv.tensor{0, 0, nan, 2, inf, 1, 3, -inf, 0.5, -88}
  for _, op in ipairs(BINARY) do
    for _, dt in ipairs(FLOATS) do same(dt .. " " .. op, qkv[op], {a:to(dt), b:to(dt)}) end
  end
  local ia, ib = qkv.tensor({7, -7, 7, -7, 0, 5}, "int64"), qkv.tensor({2, 2, -2, -2, 3, 0}, "int64")
  for _, op in ipairs(C.INTEGER) do
    same("int64 " .. op, qkv[op], {ia, ib})
  end
  same("int64 pow", qkv.pow, {ia, ib:abs()})
end

function TestCudaElementwise:testUnary()
  need()
  for _, op in ipairs(UNARY) do
    for _, dt in ipairs{"float32", "float64", "float16", "bfloat16"} do
      for _, s in ipairs(SHAPES) do
        same(("%s %s %s"):format(dt, op, table.concat(s, "x")), function(v) return v[op](v) end,
             {values(s, dt)})
      end
      same(dt .. " " .. op .. " special", function(v) return v[op](v) end,
           {qkv.tensor{0, -0.0, 1, -1, inf, -inf, nan, 1e-30, 88, -88, 3.5}:to(dt)})
    end
    same("int64 " .. op, function(v) return v[op](v) end, {values({4, 5}, "int64")})
  end
end

-- float32 and the halves mixed (the backend's halves_kernel, as the CPU's
-- staged rows): each half read as float32, the float32 op, out rounded
-- once; every binary op on each pairing with a broadcast operand (a
-- comparison's bool out among them), the unary ops on a half into
-- float32's result dtype, and in place into a half from float32
function TestCudaElementwise:testHalvesMixedWithFloat32()
  need()
  for _, h in ipairs{"float16", "bfloat16"} do
    local other = h == "float16" and "bfloat16" or "float16"
    for _, op in ipairs(BINARY) do
      for _, dts in ipairs{{h, "float32"}, {"float32", h}, {h, h}, {h, other}} do
        local a, b = values({7, 33}, dts[1]), values({33}, dts[2])
        if pcall(qkv[op], a, b) then
          same(("%s %s %s"):format(dts[1], op, dts[2]), qkv[op], {a, b})
          same(("%s %s %s, special"):format(dts[1], op, dts[2]), qkv[op],
               {qkv.tensor{0, -0.0, 1, -1, inf, -inf, nan, 2, 1e-30, 88}:to(dts[1]),
                qkv.tensor{0, 0, nan, 2, inf, 1, 3, -inf, 0.5, -88}:to(dts[2])})
        end
      end
    end
    same(h .. " add_ float32 in place", function(x, y) return x:clone():add_(y) end,
         {values({5, 9}, h), values({5, 9}, "float32")})
    same(h .. " mul_ by a float32 row", function(x, y) return x:clone():mul_(y) end,
         {values({5, 9}, h), values({9}, "float32")})
    same("float32 copy_ of a half sum", function(x, y, z) return z:clone():copy_(x + y) end,
         {values({4, 6}, h), values({4, 6}, other), values({4, 6}, "float32")})
  end
end

-- the binary op QKV_GELU_GRAD, reached through qkv._gelu_backward (autograd's
-- gelu rule)
function TestCudaElementwise:testGeluBackward()
  need()
  for _, dt in ipairs(FLOATS) do
    for _, s in ipairs(SHAPES) do
      same(("%s gelu_backward %s"):format(dt, table.concat(s, "x")), qkv._gelu_backward,
           {values(s, dt), values(s, dt)})
    end
    same(dt .. " gelu_backward special", qkv._gelu_backward,
         {qkv.tensor{0, -0.0, 1, -1, inf, -inf, nan, 1e-30, 88, -88, 3.5, -14.5}:to(dt),
          qkv.tensor{1, 2, -1, 0.5, 1, 1, 1, 3, 2, 2, -1, 1}:to(dt)})
  end
end

function TestCudaElementwise:testMaskedFillAndClamp()
  need()
  for _, dt in ipairs{"float32", "float64", "int64", "bool", "float16"} do
    local x, m = values({4, 7}, dt), values({4, 7}, "bool")
    same(dt .. " masked_fill", function(v, w) return v:masked_fill(w, 1) end, {x, m})
    same(dt .. " masked_fill broadcast", function(v, w) return v:masked_fill(w, 0) end,
         {x, values({7}, "bool")})
  end
  same("masked_fill -inf", function(v, w) return v:masked_fill(w, -inf) end,
       {values({3, 5}, "float32"), values({3, 5}, "bool")})
  same("clamp", function(v) return v:clamp(-1, 0.5) end, {values({6, 6}, "float32")})
  same("tril/triu", function(v) return v:tril() + v:triu(1) * 2 end, {values({5, 7}, "float32")})
end
