-- einsum.lua: qkv.einsum(spec, ...), the Einstein summation of torch.einsum
-- on qkv's own views, sums and products. qkv.einsum loads this module on
-- first use.
--
-- The spec is parsed into one label per dim of each operand (the dims under
-- "..." get labels of their own, the bytes 1 to 8, right-aligned across the
-- operands) and the labels of the output. Each operand first loses its
-- repeated labels (a diagonal) and the labels no one else needs (a sum);
-- the operands are then contracted left to right, two at a time: each pair
-- is permuted and reshaped to (batch, m, k) and (batch, k, n) for one
-- batched qkv.matmul (BLAS), or multiplied elementwise when nothing is
-- contracted. The last result is permuted to the output's order. These
-- steps look at labels and sizes only: they run once, on stand-ins that
-- record a plan of tensor operations, and the plan is kept per spec and
-- shapes and replayed on the operands of later calls.

local qkv = require "qkv"

local M = {}

local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source
local MAXDIM = 8

-- errors point at the script line that called einsum
local function fail(msg, ...)
  error("einsum: " .. string.format(msg, ...), caller(SOURCE, true))
end

local function dims(n) return n .. (n == 1 and " dim" or " dims") end

local function is_ellipsis(label) return label:byte() <= MAXDIM end

-- a label as the messages show it
local function show(label)
  if is_ellipsis(label) then return "'...'" end
  return "'" .. label .. "'"
end

---------------------------------------------------------------- the spec

-- one term ("ij", "b...d"): its letters in order and, when it has "...",
-- how many letters come before it
local function parse_term(term, what)
  local letters, ell, i = {}, nil, 1
  while i <= #term do
    local c = term:sub(i, i)
    if c == "." then
      if term:sub(i, i + 2) ~= "..." then
        fail("a '.' outside '...' in %s", what)
      end
      if ell then fail("%s has more than one '...'", what) end
      ell, i = #letters, i + 3
    else
      letters[#letters + 1], i = c, i + 1
    end
  end
  return {letters = letters, ell = ell, text = term}
end

-- the spec's terms for the operands and, when it has "->", the output's
local function parse_spec(spec, nops)
  if type(spec) ~= "string" then
    fail("bad argument #1 (spec string expected, got %s)", type(spec))
  end
  local s = spec:gsub("%s", "")
  local bad = s:gsub("%->", ""):match("[^A-Za-z%.,]")
  if bad then
    fail("bad character '%s' in the spec '%s' (letters, ',', '...' and '->' only)",
      bad, spec)
  end
  local lhs, rhs = s:match("^(.-)%->(.*)$")
  if not lhs then lhs = s end
  if rhs and rhs:find("->", 1, true) then fail("the spec '%s' has more than one '->'", spec) end
  local terms = {}
  for term in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = term end
  if #terms ~= nops then
    fail("%d operand%s given but the spec has %d", nops, nops == 1 and "" or "s", #terms)
  end
  for k, term in ipairs(terms) do terms[k] = parse_term(term, "operand " .. k) end
  return terms, rhs and parse_term(rhs, "the output")
end

---------------------------------------------------------------- operands

local function check_operands(ops)
  local dtype
  for k = 1, ops.n do
    local x = ops[k]
    if not qkv.is_tensor(x) then
      fail("bad argument #%d (tensor expected for operand %d, got %s)", k + 1, k, type(x))
    end
    if x.dtype ~= "float32" and x.dtype ~= "float64" and x.dtype ~= "float16" and
       x.dtype ~= "bfloat16" then
      fail("operand %d is %s: einsum takes float tensors (float32, float64, float16, bfloat16), "
           .. "as matmul does", k, x.dtype)
    end
    dtype = dtype or x.dtype
    if x.dtype ~= dtype then
      fail("operand 1 is %s but operand %d is %s (convert one with x:to)", dtype, k, x.dtype)
    end
  end
end

-- one label per dim of operand k, the dims under "..." labelled by the
-- bytes nell - n + 1 .. nell (nell: the most dims any "..." covers)
local function label_dims(term, x, k, nell)
  local labels, n = {}, x.ndim - #term.letters
  if not term.ell and n ~= 0 then
    fail("operand %d has %s but the spec '%s' names %d", k, dims(x.ndim), term.text,
      #term.letters)
  end
  for i = 1, term.ell or #term.letters do labels[#labels + 1] = term.letters[i] end
  for i = 1, term.ell and n or 0 do labels[#labels + 1] = string.char(nell - n + i) end
  for i = (term.ell or #term.letters) + 1, #term.letters do
    labels[#labels + 1] = term.letters[i]
  end
  return labels
end

-- every operand's labels, with the size of each label checked: the same
-- in every operand, or 1 (broadcast); a label repeated in one operand
-- must have one size there
local function label_operands(terms, ops)
  local nell = 0
  for k, term in ipairs(terms) do
    if term.ell then
      local n = ops[k].ndim - #term.letters
      if n < 0 then
        fail("operand %d has %s but the spec '%s' names at least %d", k,
          dims(ops[k].ndim), term.text, #term.letters)
      end
      nell = math.max(nell, n)
    end
  end
  local sizes, from, all = {}, {}, {}
  for k, term in ipairs(terms) do
    local labels, own = label_dims(term, ops[k], k, nell), {}
    for d, l in ipairs(labels) do
      local n = ops[k]:size(d)
      if own[l] and own[l] ~= n then
        fail("subscript %s is repeated in operand %d with sizes %d and %d", show(l), k, own[l], n)
      end
      own[l] = n
      if sizes[l] and sizes[l] ~= n and sizes[l] ~= 1 and n ~= 1 then
        if is_ellipsis(l) then
          fail("the dims under '...' do not broadcast: %d in operand %d but %d in operand %d",
            sizes[l], from[l], n, k)
        end
        fail("subscript %s is %d in operand %d but %d in operand %d", show(l), sizes[l],
          from[l], n, k)
      end
      if not sizes[l] or sizes[l] == 1 then sizes[l], from[l] = n, k end
    end
    all[k] = labels
  end
  return all, sizes, nell
end

-- the output's labels: as the spec says, or (with no "->") the dims under
-- "..." then the letters that appear once, in byte order (capitals first)
local function output_labels(out, terms, nell)
  local count, labels = {}, {}
  for _, term in ipairs(terms) do
    for _, c in ipairs(term.letters) do count[c] = (count[c] or 0) + 1 end
  end
  local function ellipsis() for i = 1, nell do labels[#labels + 1] = string.char(i) end end
  if not out then
    ellipsis()
    local once = {}
    for c, n in pairs(count) do if n == 1 then once[#once + 1] = c end end
    table.sort(once)
    for _, c in ipairs(once) do labels[#labels + 1] = c end
    return labels
  end
  local seen = {}
  for i, c in ipairs(out.letters) do
    if i == (out.ell or -1) + 1 then ellipsis() end
    if not count[c] then fail("output subscript '%s' appears in no operand", c) end
    if seen[c] then fail("output subscript '%s' appears twice", c) end
    seen[c], labels[#labels + 1] = true, c
  end
  if out.ell == #out.letters then ellipsis() end
  if #labels > MAXDIM then fail("the output would have %d dims (at most %d)", #labels, MAXDIM) end
  return labels
end

---------------------------------------------------------------- plans

-- The steps below run on stand-ins for tensors, which know their shape and
-- the register their tensor will be in: each operation on a stand-in
-- appends an instruction {f, dst, src, arg, src2} to the plan. The plan
-- then runs on the operands (registers 1..n) and is kept for the next call
-- with the same spec and shapes.

local Sym = {}
Sym.__index = Sym

local function stand_in(plan, reg, shape)
  return setmetatable({plan = plan, reg = reg, shape = shape, ndim = #shape}, Sym)
end

local function emit(x, shape, f, arg, y)
  local plan = x.plan
  plan.nreg = plan.nreg + 1
  plan[#plan + 1] = {f, plan.nreg, x.reg, arg, y and y.reg}
  return stand_in(plan, plan.nreg, shape)
end

local function without(list, d)
  local r = {}
  for i, v in ipairs(list) do if i ~= d then r[#r + 1] = v end end
  return r
end

-- the diagonal of dims p < q of x (pq = {p, q}), in dim p: the elements
-- off it are zeroed (masked_fill, so that an inf off it stays out) and dim
-- q is summed away
local function t_diagonal(x, pq)
  local p, q, n, shape = pq[1], pq[2], x:size(pq[1]), {}
  for d = 1, x.ndim do shape[d] = (d == p or d == q) and n or 1 end
  local off = qkv.eye(n, n, x.dtype, x.device):eq(0):view(shape)
  return x:masked_fill(off, 0):sum(q)
end

local function t_sum(x, d) return x:sum(d) end
local function t_squeeze(x, d) return x:squeeze(d) end
local function t_permute(x, perm) return x:permute(perm) end
local function t_reshape(x, shape) return x:reshape(shape) end
local function t_matmul(x, _, y) return x:matmul(y) end
local function t_mul(x, _, y) return x * y end
local function t_contiguous(x) return x:contiguous() end
local function t_clone(x) return x:clone() end

function Sym:size(d) return self.shape[d] end
function Sym:sum(d) return emit(self, without(self.shape, d), t_sum, d) end
function Sym:squeeze(d) return emit(self, without(self.shape, d), t_squeeze, d) end
function Sym:diagonal(p, q) return emit(self, without(self.shape, q), t_diagonal, {p, q}) end
function Sym:contiguous() return emit(self, self.shape, t_contiguous) end
function Sym:clone() return emit(self, self.shape, t_clone) end

function Sym:permute(perm)
  local shape, same = {}, true
  for i, d in ipairs(perm) do shape[i] = self.shape[d]; same = same and d == i end
  if same then return self end
  return emit(self, shape, t_permute, perm)
end

function Sym:reshape(shape)
  local same = #shape == self.ndim
  for i = 1, #shape do same = same and shape[i] == self.shape[i] end
  if same then return self end
  return emit(self, shape, t_reshape, shape)
end

-- x and y are 3-d here: (batch, m, k) @ (batch, k, n), or (batch, m, 1) *
-- (batch, 1, n)
function Sym.matmul(x, y)
  return emit(x, {x.shape[1], x.shape[2], y.shape[3]}, t_matmul, nil, y)
end

function Sym.__mul(x, y)
  return emit(x, {x.shape[1], x.shape[2], y.shape[3]}, t_mul, nil, y)
end

-- the plan's result for the operands
local function execute(plan, ops)
  local r = {table.unpack(ops, 1, ops.n)}
  for _, i in ipairs(plan) do r[i[2]] = i[1](r[i[3]], i[4], r[i[5]]) end
  return r[plan.nreg]
end

---------------------------------------------------------------- steps

local function position(labels, l)
  for d, m in ipairs(labels) do if m == l then return d end end
end

local function set_of(...)
  local s = {}
  for _, list in ipairs{...} do for _, l in ipairs(list) do s[l] = true end end
  return s
end

-- op with the diagonal of a label at dims p < q, in dim p
local function diagonal(op, p, q)
  return {t = op.t:diagonal(p, q), labels = without(op.labels, q)}
end

local function diagonals(op)
  local d = 1
  while d <= #op.labels do
    local q
    for e = d + 1, #op.labels do if op.labels[e] == op.labels[d] then q = e break end end
    if q then op = diagonal(op, d, q) else d = d + 1 end
  end
  return op
end

-- op with the labels that `keep` lacks summed away
local function sum_except(op, keep)
  local t, labels = op.t, {}
  for d = #op.labels, 1, -1 do
    if not keep[op.labels[d]] then t = t:sum(d) end
  end
  for _, l in ipairs(op.labels) do if keep[l] then labels[#labels + 1] = l end end
  return {t = t, labels = labels}
end

-- op without its size-1 dims whose label has another size in `other`
-- (broadcast: the label is then other's alone)
local function drop_broadcast(op, other)
  local t, labels = op.t, {}
  for d = #op.labels, 1, -1 do
    local e = position(other.labels, op.labels[d])
    if e and t:size(d) == 1 and other.t:size(e) ~= 1 then t = t:squeeze(d) end
  end
  for d, l in ipairs(op.labels) do
    local e = position(other.labels, l)
    if not (e and op.t:size(d) == 1 and other.t:size(e) ~= 1) then labels[#labels + 1] = l end
  end
  return {t = t, labels = labels}
end

-- the sizes of `labels` in op, and their product
local function sizes_of(op, labels)
  local s, n = {}, 1
  for i, l in ipairs(labels) do s[i] = op.t:size(position(op.labels, l)); n = n * s[i] end
  return s, n
end

-- op permuted to the order of the label lists given, then reshaped to one
-- dim per list
local function group(op, ...)
  local perm, shape = {}, {}
  for g, list in ipairs{...} do
    for _, l in ipairs(list) do perm[#perm + 1] = position(op.labels, l) end
    shape[g] = select(2, sizes_of(op, list))
  end
  return op.t:permute(perm):reshape(shape)
end

local function append(a, b) for _, v in ipairs(b) do a[#a + 1] = v end return a end

-- the set `need` with the labels of op added
local function plus(need, op)
  local s = set_of(op.labels)
  for l in pairs(need) do s[l] = true end
  return s
end

-- the product of a and b with every label that the set `need` lacks
-- summed away
local function contract(a, b, need)
  a = sum_except(a, plus(need, b))
  b = sum_except(b, plus(need, a))
  a, b = drop_broadcast(a, b), drop_broadcast(b, a)
  a = sum_except(a, plus(need, b))
  b = sum_except(b, plus(need, a))
  local inb, batch, left, contr, right = set_of(b.labels), {}, {}, {}, {}
  for _, l in ipairs(a.labels) do
    local list = not inb[l] and left or need[l] and batch or contr
    list[#list + 1] = l
  end
  local ina = set_of(a.labels)
  for _, l in ipairs(b.labels) do if not ina[l] then right[#right + 1] = l end end
  local labels = append(append(append({}, batch), left), right)
  if #labels > MAXDIM then
    fail("an intermediate result would have %d dims (at most %d)", #labels, MAXDIM)
  end
  local x
  if #contr == 0 then
    x = group(a, batch, left, {}) * group(b, batch, {}, right)
  else
    x = group(a, batch, left, contr):matmul(group(b, batch, contr, right))
  end
  local shape = append(append(sizes_of(a, batch), (sizes_of(a, left))), (sizes_of(b, right)))
  return {t = x:reshape(shape), labels = labels}
end

---------------------------------------------------------------- einsum

-- the labels of `out` and of the operands in first..last but skip
local function needed(out, labels, first, last, skip)
  local s = set_of(out)
  for j = first, last do
    if j ~= skip then for _, l in ipairs(labels[j]) do s[l] = true end end
  end
  return s
end

-- operand k with its diagonals taken and the labels no one else has summed
local function prepare(ops, labels, out, k)
  local op = diagonals{t = ops[k], labels = labels[k]}
  return sum_except(op, needed(out, labels, 1, ops.n, k))
end

-- the plan of einsum for operands of these labels and shapes
local function make_plan(labels, shapes, out)
  local plan = {nreg = #shapes}
  local ops = {n = #shapes}
  for k, shape in ipairs(shapes) do ops[k] = stand_in(plan, k, shape) end
  local acc = prepare(ops, labels, out, 1)
  for k = 2, ops.n do
    acc = contract(acc, prepare(ops, labels, out, k), needed(out, labels, k + 1, ops.n))
  end
  acc = sum_except(acc, set_of(out))
  local perm = {}
  for i, l in ipairs(out) do perm[i] = position(acc.labels, l) end
  local t = acc.t:permute(perm)
  if t.reg <= ops.n then t:clone() else t:contiguous() end  -- never an operand
  return plan
end

local function shape_of(x)
  local s = {}
  for d = 1, x.ndim do s[d] = x:size(d) end
  return s
end

-- the spec and the operands' shapes as one string, or nil when the spec
-- is not a string or an operand not a tensor
local function cache_key(spec, ops)
  if type(spec) ~= "string" then return nil end
  local parts = {spec}
  for k = 1, ops.n do
    local x = ops[k]
    if not qkv.is_tensor(x) then return nil end
    parts[k + 1] = table.concat(shape_of(x), ",")
  end
  return table.concat(parts, ";")
end

local plans, nplans = {}, 0

local function new_plan(spec, ops)
  local terms, out = parse_spec(spec, ops.n)
  check_operands(ops)
  local labels, _, nell = label_operands(terms, ops)
  local shapes = {}
  for k = 1, ops.n do shapes[k] = shape_of(ops[k]) end
  return make_plan(labels, shapes, output_labels(out, terms, nell))
end

function M.einsum(spec, ...)
  local ops = table.pack(...)
  local key = cache_key(spec, ops)
  local plan = key and plans[key]
  if plan then
    check_operands(ops)
  else
    plan = new_plan(spec, ops)     -- raises the spec's or the operands' error
    if nplans >= 256 then plans, nplans = {}, 0 end
    if key then plans[key], nplans = plan, nplans + 1 end
  end
  local ok, r = pcall(execute, plan, ops)
  if ok then return r end
  fail("%s", (tostring(r):gsub("^[^\n]-einsum%.lua:%d+: ", "", 1):gsub("^einsum: ", "", 1)))
end

return M
