-- composite/shapes.lua: flatten, unflatten, split and chunk, as views
-- of x (reshape, narrow) with PyTorch's arguments (qkv.composite installs
-- them; see there). Dims are 1-based, negative from the end.

local qkv = require "qkv"
local S = require "qkv.composite.args"

local is_tensor = qkv.is_tensor
local MAXRET, fail, shape_of, tensor_arg = S.MAXRET, S.fail, S.shape_of, S.tensor_arg
local int_arg, dim_arg, int_list, sizes = S.int_arg, S.dim_arg, S.int_list, S.sizes

-- x:flatten([start_dim [, end_dim]]): dims start..end as one
local function flatten(x, start_dim, end_dim)
  tensor_arg(x, "x")
  local n = math.max(x:dim(), 1)            -- a 0-d x flattens as if 1-D
  local a = start_dim == nil and 1 or dim_arg(start_dim, "start_dim", x, n)
  local b = end_dim == nil and n or dim_arg(end_dim, "end_dim", x, n)
  if a > b then
    fail("start_dim %s comes after end_dim %s for x of shape %s", tostring(start_dim),
         tostring(end_dim), shape_of(x))
  end
  if x:dim() == 0 then return x:reshape(1) end
  if a == b then return x end
  local s, out, m = sizes(x), {}, 1
  for i = 1, a - 1 do out[#out + 1] = s[i] end
  for i = a, b do m = m * s[i] end
  out[#out + 1] = m
  for i = b + 1, #s do out[#out + 1] = s[i] end
  return x:reshape(table.unpack(out))
end

-- x:unflatten(dim, sizes): dim as several, one of them -1 to infer
local function unflatten(x, dim, sz)
  tensor_arg(x, "x")
  local d = dim_arg(dim, "dim", x)
  if type(sz) ~= "table" or is_tensor(sz) then
    fail("sizes must be a list of integers, got %s", type(sz))
  end
  local new = int_list(sz, "sizes", 8)
  if #new == 0 then fail("sizes is empty") end
  if x:dim() - 1 + #new > 8 then
    fail("x of shape %s with dim %d as %d dims has more than 8", shape_of(x), d, #new)
  end
  local n, known, infer = x:size(d), 1, nil
  for i, v in ipairs(new) do
    if v == -1 then
      if infer then fail("sizes has more than one -1") end
      infer = i
    elseif v < 0 then fail("sizes[%d] is %d", i, v)
    else known = known * v end
  end
  if infer then
    if known == 0 or n % known ~= 0 then
      fail("sizes {%s} cannot make dim %d of size %d", table.concat(new, ", "), d, n)
    end
    new[infer] = n // known
  elseif known ~= n then
    fail("sizes {%s} multiply to %d, but dim %d of x %s is %d", table.concat(new, ", "),
         known, d, shape_of(x), n)
  end
  local s, out = sizes(x), {}
  for i = 1, d - 1 do out[#out + 1] = s[i] end
  for _, v in ipairs(new) do out[#out + 1] = v end
  for i = d + 1, #s do out[#out + 1] = s[i] end
  return x:reshape(table.unpack(out))
end

-- the views of x along dim d of the given lengths, as values
local function pieces(x, d, lengths)
  if #lengths > MAXRET then
    fail("%d pieces are more than Lua can return (%d)", #lengths, MAXRET)
  end
  local out, at = {}, 1
  for i, len in ipairs(lengths) do
    out[i] = x:narrow(d, at, len)
    at = at + len
  end
  return table.unpack(out, 1, #lengths)
end

-- x:split(size_or_sizes [, dim]): pieces of size along dim (the last one
-- smaller), or of the sizes listed
local function split(x, size, dim)
  tensor_arg(x, "x")
  local d = dim_arg(dim == nil and 1 or dim, "dim", x)
  local n = x:size(d)
  if type(size) == "table" and not is_tensor(size) then
    local l, sum = int_list(size, "split_sizes", MAXRET), 0
    for i, v in ipairs(l) do
      if v < 0 then fail("split_sizes[%d] is %d", i, v) end
      sum = sum + v
    end
    if sum ~= n then
      fail("split_sizes {%s} add up to %d, but dim %d of x %s is %d",
           #l <= 16 and table.concat(l, ", ") or #l .. " sizes", sum, d, shape_of(x), n)
    end
    return pieces(x, d, l)
  end
  if type(size) ~= "number" then
    fail("split_size must be an integer or a list of integers, got %s", type(size))
  end
  size = int_arg(size, "split_size")
  if size < 0 or (size == 0 and n ~= 0) then
    fail("split_size must be positive, got %d (dim %d of x %s is %d)", size, d, shape_of(x), n)
  end
  if n == 0 then return x:narrow(d, 1, 0) end
  local count = (n + size - 1) // size
  if count > MAXRET then fail("%d pieces are more than Lua can return (%d)", count, MAXRET) end
  local l = {}
  for i = 1, count do l[i] = math.min(size, n - (i - 1) * size) end
  return pieces(x, d, l)
end

-- x:chunk(chunks [, dim]): at most chunks pieces of ceil(n / chunks)
local function chunk(x, chunks, dim)
  tensor_arg(x, "x")
  local d = dim_arg(dim == nil and 1 or dim, "dim", x)
  chunks = int_arg(chunks, "chunks")
  if chunks < 1 then fail("chunks must be positive, got %d", chunks) end
  local n = x:size(d)
  if n == 0 then                  -- PyTorch: chunks empty pieces
    if chunks > MAXRET then fail("%d pieces are more than Lua can return (%d)", chunks, MAXRET) end
    local l = {}
    for i = 1, chunks do l[i] = 0 end
    return pieces(x, d, l)
  end
  return split(x, (n + chunks - 1) // chunks, d)
end

return {flatten = flatten, unflatten = unflatten, split = split, chunk = chunk}
