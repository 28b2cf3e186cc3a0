-- composite/select.lua: the composite functions that move elements:
-- scatter (and scatter_), argsort, flip, roll, repeat_interleave, each a
-- composition of qkv's ops (qkv.composite installs them; see there).
-- Positions are 1-based.

local qkv = require "qkv"
local S = require "qkv.composite.args"
local autograd_on = S.autograd_on

local is_tensor = qkv.is_tensor
local MAXRET, fail, shape_of, tensor_arg = S.MAXRET, S.fail, S.shape_of, S.tensor_arg
local int_arg, bool_arg, dim_arg, int_list = S.int_arg, S.bool_arg, S.dim_arg, S.int_list
local ints_arg, dims_arg, sizes = S.ints_arg, S.dims_arg, S.sizes


---------------------------------------------------------------- scatter

-- the checks of x:scatter(dim, index, src): dim 1..n, the part of src
-- that index covers
local function scatter_args(x, dim, index, src)
  tensor_arg(x, "x")
  local d = dim_arg(dim, "dim", x, math.max(x:dim(), 1))  -- a 0-d x's dim: 1 or -1
  tensor_arg(index, "index")
  if index.dtype ~= "int64" then
    fail("index must be an int64 tensor, got %s", index.dtype)
  end
  if index:dim() ~= x:dim() then
    fail("index %s must have as many dims as x %s", shape_of(index), shape_of(x))
  end
  if type(src) ~= "number" and type(src) ~= "boolean" then
    tensor_arg(src, "src")
    if src.dtype ~= x.dtype then
      fail("src is %s but x is %s; convert src with src:to(\"%s\")", src.dtype, x.dtype, x.dtype)
    end
    if src:dim() ~= x:dim() then
      fail("src %s must have as many dims as x %s", shape_of(src), shape_of(x))
    end
  end
  for i = 1, x:dim() do
    local m = index:size(i)
    if (i ~= d and m > x:size(i)) or (is_tensor(src) and m > src:size(i)) then
      fail("index %s must be no larger than x %s apart from dim %d%s", shape_of(index),
           shape_of(x), d, is_tensor(src) and " and no larger than src " .. shape_of(src) or "")
    end
  end
  if is_tensor(src) then
    for i = 1, src:dim() do
      if src:size(i) ~= index:size(i) then src = src:narrow(i, 1, index:size(i)) end
    end
  end
  return d, src
end

-- the dtype scatter_add_ works in for x's dtype
local WORK = {float16 = "float32", bfloat16 = "float32", bool = "int64"}

-- of each position of index, whether its write is the last one to its
-- target along dim d (a bool tensor of index's shape): a stable sort of
-- each line of index puts equal targets together in their order
local function last_writes(index, d)
  local n = index:dim()
  local t = index:transpose(d, n)
  local k = t:size(n)
  local v, pos = t:sort(n)
  local ends = qkv.ones(v.shape, "int64", v.device)
  if k > 1 then
    ends:narrow(n, 1, k - 1):copy_(v:narrow(n, 1, k - 1):ne(v:narrow(n, 2, k - 1)))
  end
  local win = qkv.zeros(t.shape, "int64", t.device):scatter_add_(n, pos, ends)
  return win:transpose(d, n):gt(0)
end

-- where index writes into x along dim d (bool, x's shape), and whether a
-- target is written more than once; an index out of range fails here
local function targets(x, d, index)
  local count = qkv.zeros(x.shape, "int64", x.device)
  local ok, err = pcall(count.scatter_add_, count, d, index,
                        qkv.ones(index.shape, "int64", x.device))
  if not ok then
    fail("%s", (tostring(err):gsub("^[^\n]-:%d+: ", "", 1):gsub("^scatter_add_: ", "", 1)))
  end
  return count:gt(0), index:numel() > 0 and count:max():item() > 1
end

-- of the writes of src at index along dim d, the product of those to each
-- target, at the target (work's dtype; 0 where nothing is written): along
-- d, the writes sorted by target (a stable sort) are multiplied within
-- the runs of one target in log2 passes (a segmented scan), after which
-- the last of each run holds the run's product
local function products(x, d, index, src, work)
  local n = index:dim()
  local v, pos = index:transpose(d, n):sort(n)
  local p = src:transpose(d, n):gather(n, pos)
  local k = v:size(n)
  local step = 1
  while step < k do
    local m = k - step
    local at, before = p:narrow(n, step + 1, m), p:narrow(n, 1, m)
    local same = v:narrow(n, step + 1, m):eq(v:narrow(n, 1, m))
    p = qkv.cat({p:narrow(n, 1, step), qkv.where(same, at * before, at)}, n)
    step = step * 2
  end
  local last = qkv.ones(v.shape, "bool", v.device)
  if k > 1 then
    last:narrow(n, 1, k - 1):copy_(v:narrow(n, 1, k - 1):ne(v:narrow(n, 2, k - 1)))
  end
  local xt = x:transpose(d, n)
  return qkv.zeros(xt.shape, work, x.device):scatter_add_(n, v, qkv.where(last, p, 0))
            :transpose(d, n)
end

-- x with src (a tensor of index's shape, or a number) combined at index
-- along dim d by reduce, every write counting, as PyTorch's scatter with
-- reduce: "add" adds them (for bool, or), "multiply" multiplies (and)
local function reduced(x, d, index, src, reduce)
  if x:dim() == 0 then                             -- along a 0-d x's dim: as (1,)
    return reduced(x:view(1), 1, index:view(1), is_tensor(src) and src:view(1) or src,
                   reduce):view({})
  end
  local written = targets(x, d, index)
  if index:numel() == 0 then return x:clone() end
  local work = WORK[x.dtype] or x.dtype
  if not is_tensor(src) then src = qkv.full(index.shape, src, x.dtype, x.device) end
  src = src:to(work)
  local X, out = x:to(work), nil
  if reduce == "add" then
    out = X + qkv.zeros(x.shape, work, x.device):scatter_add_(d, index, src)
  else
    out = X * products(x, d, index, src, work)
  end
  if x.dtype == "bool" then out = out:ne(0) end
  return qkv.where(written, out:to(x.dtype), x)
end

-- x with src written at index along dim: the result, where it wrote, and
-- (when a target is written twice) which writes are the last to theirs
local function scattered(x, d, index, src)
  local written, repeats = targets(x, d, index)
  if not is_tensor(src) then return x:masked_fill(written, src), written end
  if index:numel() == 0 then return x:clone(), written end
  local last
  if repeats then                                  -- repeated targets: the last wins
    last = last_writes(index, d)
    src = qkv.where(last, src, 0)
  end
  local work = WORK[x.dtype] or x.dtype
  local vals = qkv.zeros(x.shape, work, x.device):scatter_add_(d, index, src:to(work))
  return qkv.where(written, vals:to(x.dtype), x), written, last
end

local REDUCE = {add = true, multiply = true}

local function reduce_arg(r)
  if r ~= nil and not REDUCE[r] then
    fail("reduce must be \"add\" or \"multiply\", got %s",
         type(r) == "string" and "'" .. r .. "'" or type(r))
  end
  return r
end

-- qkv.scatter(x, dim, index, src [, reduce]): a copy of x with src written
-- at index, or combined there by reduce; its gradient goes to x where
-- nothing was written (everywhere, with reduce = "add") and to the src
-- that was (gather's), recorded here since scatter_add_ records none.
-- reduce = "multiply" has none, as in PyTorch.
local function scatter(x, dim, index, src, reduce)
  local d, s = scatter_args(x, dim, index, src)
  reduce = reduce_arg(reduce)
  local A = autograd_on(x, is_tensor(s) and s or nil)
  if not A then
    if reduce then return reduced(x, d, index, s, reduce) end
    return (scattered(x, d, index, s))
  end
  if reduce == "multiply" then
    fail("reduce = \"multiply\" has no gradient (nor has PyTorch's); compute it under " ..
         "qkv.no_grad, or without reduce")
  end
  local out, written, last
  if reduce then out = A.no_grad(reduced, x, d, index, s, reduce)
  else out, written, last = A.no_grad(scattered, x, d, index, s) end
  local full = is_tensor(src) and src or nil
  return A.record("ScatterBackward", out, {x, full}, function(g)
    local gx = written and g:masked_fill(written, 0) or g
    if not full then return gx end
    local gs = g:gather(d, index)
    if last then gs = qkv.where(last, gs, 0) end
    if gs.shape ~= full.shape then               -- src larger than index
      local z = qkv.zeros(full.shape, gs.dtype, gs.device)
      local part = z
      for i = 1, z:dim() do part = part:narrow(i, 1, index:size(i)) end
      part:copy_(gs)
      gs = z
    end
    return gx, gs
  end, {index})
end

-- x:scatter_(dim, index, src [, reduce]): scatter into x itself
local function scatter_(x, dim, index, src, reduce)
  local d, s = scatter_args(x, dim, index, src)
  reduce = reduce_arg(reduce)
  qkv._grad_inplace("scatter_", x, is_tensor(src) and src or nil)   -- not copy_'s or scatter_add_'s
  local out = reduce and reduced(x, d, index, s, reduce) or scattered(x, d, index, s)
  return x:copy_(out)
end

---------------------------------------------------------------- selection

-- x:argsort([dim [, descending [, stable]]]): the 1-based positions that
-- sort x; the sort is always stable, so stable = false gives that order too
local function argsort(x, dim, descending, stable)
  tensor_arg(x, "x")
  bool_arg(stable, "stable")
  local d = dim == nil and -1 or dim
  if x:dim() == 0 then
    if dim ~= nil then dim_arg(dim, "dim", x, 1) end
    return qkv.ones({}, "int64", x.device)
  end
  d = dim_arg(d, "dim", x)
  bool_arg(descending, "descending")
  return select(2, x:sort(d, descending or false))
end

-- x:flip(dims): x reversed along each of dims
local function flip(x, dims, ...)
  tensor_arg(x, "x")
  if dims == nil then fail("dims is missing (a dim or a list of dims)") end
  local more = table.pack(...)
  while more.n > 0 and more[more.n] == nil do more.n = more.n - 1 end
  if more.n > 0 then
    if type(dims) ~= "number" then
      fail("dims come as one list or as numbers, got a %s and %d more argument%s", type(dims),
           more.n, more.n == 1 and "" or "s")
    end
    dims = {dims, table.unpack(more, 1, more.n)}
  end
  local ds = dims_arg(dims, "dims", x)
  local out = x
  if x:dim() == 0 then ds = {} end                 -- a 0-d x's dim 1: nothing to flip
  for _, d in ipairs(ds) do
    local n = x:size(d)
    if n > 1 then
      out = out:index_select(d, qkv.arange(n, 0, -1, "int64", x.device))
    end
  end
  if rawequal(out, x) then out = x:clone() end
  return out
end

-- x:roll(shifts [, dims]): x shifted along dims, the end wrapping round
local function roll(x, shifts, dims)
  tensor_arg(x, "x")
  if shifts == nil then fail("shifts is missing (an integer or a list of them)") end
  local sh = ints_arg(shifts, "shifts", 8)
  if dims == nil then
    if #sh ~= 1 then
      fail("with no dims, shifts must be one integer, got %d of them", #sh)
    end
    if x:dim() == 0 then return x:clone() end
    return roll(x:reshape(-1), sh[1], 1):view(table.unpack(sizes(x)))
  end
  local ds = ints_arg(dims, "dims", 8)
  if #ds ~= #sh then
    fail("shifts and dims must be as many, got %d and %d", #sh, #ds)
  end
  local out = x
  for i, d in ipairs(ds) do
    d = dim_arg(d, "dims", x)
    local n = x:size(d)
    local s = n > 0 and sh[i] % n or 0
    if s ~= 0 then
      out = qkv.cat({out:narrow(d, n - s + 1, s), out:narrow(d, 1, n - s)}, d)
    end
  end
  if rawequal(out, x) then out = x:clone() end
  return out
end

-- x:repeat_interleave(repeats [, dim]): each element (slice along dim)
-- repeated; with no dim, of x flattened
local function repeat_interleave(x, repeats, dim)
  tensor_arg(x, "x")
  if dim == nil then
    x, dim = x:reshape(-1), 1
  end
  local d = dim_arg(dim, "dim", x)
  local n = x:size(d)
  if type(repeats) == "number" then
    local r = int_arg(repeats, "repeats")
    if r < 0 then fail("repeats must be non-negative, got %d", r) end
    if r > 0 and n > math.maxinteger // r then
      fail("%d repeats of %d elements is too many", r, n)
    end
    local s = sizes(x)
    local grown = {}
    for i = 1, #s do grown[#grown + 1] = s[i]; if i == d then grown[#grown + 1] = r end end
    local out = {}
    for i = 1, #s do out[i] = i == d and n * r or s[i] end
    return x:unsqueeze(d + 1):expand(table.unpack(grown)):reshape(table.unpack(out))
  end
  local rep
  if type(repeats) == "table" and not is_tensor(repeats) then
    rep = qkv.tensor(int_list(repeats, "repeats", MAXRET), "int64"):to(x.device)
  elseif is_tensor(repeats) then
    if repeats.dtype ~= "int64" and repeats.dtype ~= "int32" then
      fail("repeats must be an int64 tensor, got %s", repeats.dtype)
    end
    if repeats:dim() > 1 then
      fail("repeats must be 0-d or 1-D, got %s", shape_of(repeats))
    end
    rep = repeats:reshape(-1):to("int64"):to(x.device)
  else
    fail("repeats must be an integer, a list or a tensor of them, got %s", type(repeats))
  end
  if rep:numel() == 1 then return repeat_interleave(x, rep:item(), d) end
  if rep:numel() ~= n then
    fail("repeats has %d values but dim %d of x %s has %d", rep:numel(), d, shape_of(x), n)
  end
  if n == 0 then return x end
  if rep:min():item() < 0 then fail("repeats must be non-negative, got %d", rep:min():item()) end
  local total = rep:sum():item()
  -- output position j takes element 1 + #{i : ends[i] < j}
  local ends = rep:cumsum(1)
  local marks = qkv.zeros(total + 1, "int64", x.device)
                  :index_add_(1, ends + 1, qkv.ones(n, "int64", x.device))
  local idx = marks:narrow(1, 1, total):cumsum(1) + 1
  return x:index_select(d, idx)
end


return {scatter = scatter, scatter_ = scatter_, argsort = argsort, flip = flip, roll = roll,
        repeat_interleave = repeat_interleave}
