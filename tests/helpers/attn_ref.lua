-- attn_ref.lua: float64 plain-loop references for the attention primitives
-- (README "Attention primitives"), shared by test_primitives.lua and
-- test_attention.lua (they `dofile` it). A reference array is
-- {shape = {...}, data = {...}}: row-major, 1-based, Lua numbers (or
-- booleans for masks). Nothing here calls qkv except to read tensors back
-- (tolist) and to make them (qkv.tensor).
local R = {}

local inf = math.huge
R.inf, R.nan = inf, 0 / 0
R.TOL = {float32 = 1e-5, float64 = 1e-12}

function R.numel(s) local n = 1 for _, v in ipairs(s) do n = n * v end return n end
function R.sstr(s)
  if #s == 1 then return "(" .. s[1] .. ",)" end
  return "(" .. table.concat(s, ", ") .. ")"
end
function R.isnan(v) return v ~= v end
function R.isfin(v) return v == v and v ~= inf and v ~= -inf end
local function copy(t) local r = {} for i, v in ipairs(t) do r[i] = v end return r end
R.copy = copy

function R.flatten(t, out)
  out = out or {}
  if type(t) ~= "table" then out[#out + 1] = t else for _, v in ipairs(t) do R.flatten(v, out) end end
  return out
end

function R.nest(flat, shape, d, pos)
  d, pos = d or 1, pos or {1}
  if d > #shape then pos[1] = pos[1] + 1 return flat[pos[1] - 1] end
  local t = {} for i = 1, shape[d] do t[i] = R.nest(flat, shape, d + 1, pos) end return t
end

function R.shape(x) local s = {} for i = 1, x.ndim do s[i] = x:size(i) end return s end

-- a tensor as a reference array, with the values qkv stored
function R.T(x)
  if x.ndim == 0 then return {shape = {}, data = {x:item()}} end
  return {shape = R.shape(x), data = R.flatten(x:tolist())}
end

-- a reference array as a tensor (through qkv.tensor) and as qkv stored it
function R.tensor(A, dtype)
  local x = qkv.tensor(R.nest(A.data, A.shape), dtype or "float32")
  return x, R.T(x)
end

-- random data from the Lua RNG, uniform in [lo, hi) (default [-2, 2))
function R.rand(shape, lo, hi)
  lo, hi = lo or -2, hi or 2
  local d = {} for i = 1, R.numel(shape) do d[i] = lo + (hi - lo) * math.random() end
  return {shape = copy(shape), data = d}
end

function R.mk(shape, dtype, lo, hi) return R.tensor(R.rand(shape, lo, hi), dtype) end

---------------------------------------------------------------- broadcasting

function R.bshape(a, b)
  local n, out = math.max(#a, #b), {}
  for i = 1, n do
    local x, y = a[i - n + #a] or 1, b[i - n + #b] or 1
    if not (x == y or x == 1 or y == 1) then return nil end
    out[i] = x == 1 and y or x
  end
  return out
end

-- strides (in elements, times `unit`) of row-major `s` seen from shape `out`
function R.bstrides(out, s, unit)
  local inst, acc, st = {}, unit or 1, {}
  for i = #s, 1, -1 do inst[i] = acc; acc = acc * s[i] end
  for i = 1, #out do local j = i - (#out - #s); st[i] = (j >= 1 and s[j] ~= 1) and inst[j] or 0 end
  return st
end

-- calls f(k, off1, off2, ...) for every index of `shape` (row-major k, 0-based
-- offsets into each of the arrays whose strides are given)
local function each(shape, strides, f)
  local idx, nd = {}, #shape
  for d = 1, nd do idx[d] = 0 end
  local offs = {}
  for k = 1, R.numel(shape) do
    for a = 1, #strides do
      local o, st = 0, strides[a]
      for d = 1, nd do o = o + idx[d] * st[d] end
      offs[a] = o
    end
    f(k, table.unpack(offs))
    for d = nd, 1, -1 do
      idx[d] = idx[d] + 1
      if idx[d] < shape[d] then break end
      idx[d] = 0
    end
  end
end
R.each = each

local function batch(s, k) local b = {} for i = 1, #s - k do b[i] = s[i] end return b end

---------------------------------------------------------------- linear algebra

-- A (..., n, k) @ B (..., k, m), batch dims broadcast
function R.matmul(A, B)
  local sa, sb = A.shape, B.shape
  local n, k, m = sa[#sa - 1], sa[#sa], sb[#sb]
  assert(sb[#sb - 1] == k, "test bug: matmul inner dims")
  local ob = assert(R.bshape(batch(sa, 2), batch(sb, 2)), "test bug: matmul batch")
  local out = {}
  each(ob, {R.bstrides(ob, batch(sa, 2), n * k), R.bstrides(ob, batch(sb, 2), k * m)},
    function(bk, oa, obb)
      local base = (bk - 1) * n * m
      for i = 0, n - 1 do
        for j = 0, m - 1 do
          local s = 0
          for l = 0, k - 1 do s = s + A.data[oa + i * k + l + 1] * B.data[obb + l * m + j + 1] end
          out[base + i * m + j + 1] = s
        end
      end
    end)
  local shape = copy(ob); shape[#shape + 1] = n; shape[#shape + 1] = m
  return {shape = shape, data = out}
end

-- swap the last two dims
function R.tlast(A)
  local s = A.shape
  local n, m = s[#s - 1], s[#s]
  local out, shape = {}, copy(s)
  shape[#s - 1], shape[#s] = m, n
  for b = 0, R.numel(s) // (n * m) - 1 do
    for i = 0, n - 1 do
      for j = 0, m - 1 do out[b * n * m + j * n + i + 1] = A.data[b * n * m + i * m + j + 1] end
    end
  end
  return {shape = shape, data = out}
end

function R.map(A, f)
  local d = {} for i, v in ipairs(A.data) do d[i] = f(v) end
  return {shape = copy(A.shape), data = d}
end

-- x W + b; x (..., d_in) or 1-D
function R.project(x, W, b)
  local one = #x.shape == 1
  if one then x = {shape = {1, x.shape[1]}, data = x.data} end
  local out = R.matmul(x, W)
  if b then
    local m = W.shape[2]
    for i = 1, #out.data do out.data[i] = out.data[i] + b.data[(i - 1) % m + 1] end
  end
  if one then out.shape = {W.shape[2]} end
  return out
end

function R.scores(Q, K, scale)
  scale = scale or 1 / math.sqrt(Q.shape[#Q.shape])
  return R.map(R.matmul(Q, R.tlast(K)), function(v) return v * scale end)
end

---------------------------------------------------------------- masks, softmax

local function masked(v) return v == false or v == 0 end

-- a copy of S with fill where m (broadcast to S) is false / 0
function R.mask(S, m, fill)
  if fill == nil then fill = -inf end
  local out = {}
  each(S.shape, {R.bstrides(S.shape, m.shape)}, function(k, om)
    out[k] = masked(m.data[om + 1]) and fill or S.data[k]
  end)
  return {shape = copy(S.shape), data = out}
end

function R.causal(nq, nk)
  nk = nk or nq
  local d = {}
  for i = 0, nq - 1 do for j = 0, nk - 1 do d[i * nk + j + 1] = j <= i + nk - nq end end
  return {shape = {nq, nk}, data = d}
end

function R.padding(lengths, n)
  if not n then n = 0 for _, l in ipairs(lengths) do n = math.max(n, l) end end
  local d = {}
  for b = 0, #lengths - 1 do for j = 0, n - 1 do d[b * n + j + 1] = j < lengths[b + 1] end end
  return {shape = {#lengths, 1, n}, data = d}
end

-- along dim (negative counts from the end); max subtracted; a row all -inf
-- gives zeros; a NaN anywhere in a row makes the row NaN
function R.softmax(X, dim)
  local s = X.shape
  dim = dim or -1
  if dim < 0 then dim = #s + 1 + dim end
  local n, st = s[dim], 1
  for i = dim + 1, #s do st = st * s[i] end
  local outer = R.numel(s) // (n * st)
  local out = {}
  for o = 0, outer - 1 do
    for i = 0, st - 1 do
      local base, mx, hasnan = o * n * st + i, -inf, false
      for j = 0, n - 1 do
        local v = X.data[base + j * st + 1]
        if v ~= v then hasnan = true elseif v > mx then mx = v end
      end
      local sum = 0
      for j = 0, n - 1 do
        local p = base + j * st + 1
        local e = (hasnan and 0 / 0) or (mx == -inf and 0) or math.exp(X.data[p] - mx)
        out[p] = e
        sum = sum + e
      end
      if mx ~= -inf and not hasnan then
        for j = 0, n - 1 do local p = base + j * st + 1; out[p] = out[p] / sum end
      end
    end
  end
  return {shape = copy(s), data = out}
end

---------------------------------------------------------------- heads, merge

-- (..., n, d) -> (..., h, n, d/h): out[.., hi, t, j] = x[.., t, hi*dh + j]
function R.heads(X, h)
  local s = X.shape
  local n, d = s[#s - 1], s[#s]
  local dh = d // h
  local out = {}
  for b = 0, R.numel(s) // (n * d) - 1 do
    for hi = 0, h - 1 do
      for t = 0, n - 1 do
        for j = 0, dh - 1 do
          out[b * n * d + hi * n * dh + t * dh + j + 1] = X.data[b * n * d + t * d + hi * dh + j + 1]
        end
      end
    end
  end
  local shape = batch(s, 2)
  for _, v in ipairs{h, n, dh} do shape[#shape + 1] = v end
  return {shape = shape, data = out}
end

-- (..., h, n, dh) -> (..., n, h*dh)
function R.merge(X)
  local s = X.shape
  local h, n, dh = s[#s - 2], s[#s - 1], s[#s]
  local out, d = {}, h * dh
  for b = 0, R.numel(s) // (h * n * dh) - 1 do
    for hi = 0, h - 1 do
      for t = 0, n - 1 do
        for j = 0, dh - 1 do
          out[b * n * d + t * d + hi * dh + j + 1] = X.data[b * n * d + hi * n * dh + t * dh + j + 1]
        end
      end
    end
  end
  local shape = batch(s, 3)
  shape[#shape + 1] = n; shape[#shape + 1] = d
  return {shape = shape, data = out}
end

---------------------------------------------------------------- erf, gelu

-- erfc for z >= 0: a positive-term series for erf below 1, the continued
-- fraction erfc(z) = e^{-z^2}/sqrt(pi) / (z + (1/2)/(z + 1/(z + (3/2)/(z + ...))))
-- above; both good to ~1e-15 relative
local SQRTPI = math.sqrt(math.pi)
local function erf_series(z)
  if z == 0 then return 0 end
  local term, sum, n = z, z, 0
  repeat
    n = n + 1
    term = term * 2 * z * z / (2 * n + 1)
    sum = sum + term
  until term < 1e-17 * sum
  return 2 / SQRTPI * math.exp(-z * z) * sum
end

local function erfc_pos(z)
  if z < 1 then return 1 - erf_series(z) end
  local f = z
  for k = 300, 1, -1 do f = z + (k / 2) / f end
  return math.exp(-z * z) / SQRTPI / f
end

function R.erf(z)
  if z ~= z then return z end
  local a = math.abs(z)
  local e = a < 1 and erf_series(a) or 1 - erfc_pos(a)
  return z < 0 and -e or e
end

function R.erfc(z)
  if z ~= z then return z end
  if z >= 0 then return erfc_pos(z) end
  return 2 - erfc_pos(-z)
end

-- x Phi(x) = x/2 erfc(-x/sqrt 2): no cancellation for negative x
function R.gelu1(x)
  if x == inf then return inf end
  if x == -inf then return -0.0 end
  return 0.5 * x * R.erfc(-x / math.sqrt(2))
end

function R.gelu(X) return R.map(X, R.gelu1) end

---------------------------------------------------------------- attention

-- opts: mask (a reference array), causal, scale; returns out, weights and
-- the masked scores
function R.attention(Q, K, V, opts)
  opts = opts or {}
  local S = R.scores(Q, K, opts.scale)
  if opts.mask then S = R.mask(S, opts.mask) end
  if opts.causal then
    local s = S.shape
    S = R.mask(S, R.causal(s[#s - 1], s[#s]))
  end
  local W = R.softmax(S, -1)
  return R.matmul(W, V), W, S
end

---------------------------------------------------------------- checks

local lu = require "luaunit"

local function fail(what, i, g, r)
  lu.fail(string.format("%s: element %d is %s, expected %s", what, i, tostring(g), tostring(r)))
end

-- ||got - ref|| / ||ref|| (absolute when ref is all zeros) over the finite
-- entries; non-finite entries must agree exactly
function R.relerr(got, ref, what)
  local dn, rn = 0, 0
  for i = 1, #ref do
    local g, r = got[i], ref[i]
    if R.isfin(r) ~= R.isfin(g) or not R.isfin(r) and g ~= r and not (R.isnan(g) and R.isnan(r)) then
      fail(what, i, g, r)
    end
    if R.isfin(r) then dn = dn + (g - r) ^ 2; rn = rn + r ^ 2 end
  end
  return rn > 0 and math.sqrt(dn / rn) or math.sqrt(dn)
end

-- got: a tensor; ref: a reference array (or a tensor); shape, then values
function R.close(got, ref, tol, what)
  what = what or ""
  if type(ref) ~= "table" or not ref.data then ref = R.T(ref) end
  lu.assertEquals(R.sstr(R.shape(got)), R.sstr(ref.shape), what .. ": shape")
  tol = tol or R.TOL[got.dtype]
  local g = R.T(got).data
  lu.assertEquals(#g, #ref.data, what .. ": numel")
  local err = R.relerr(g, ref.data, what)
  if not (err < tol) then lu.fail(string.format("%s: relative error %.3g >= %g", what, err, tol)) end
  return err
end

function R.exact(got, ref, what)
  what = what or ""
  if type(ref) ~= "table" or not ref.data then ref = R.T(ref) end
  lu.assertEquals(R.sstr(R.shape(got)), R.sstr(ref.shape), what .. ": shape")
  local g = R.T(got).data
  for i = 1, #ref.data do
    if g[i] ~= ref.data[i] and not (R.isnan(g[i]) and R.isnan(ref.data[i])) then
      fail(what, i, g[i], ref.data[i])
    end
  end
end

-- f(...) must fail with a message containing every string of subs
function R.fails(subs, f, ...)
  local ok, msg = pcall(f, ...)
  if ok then lu.fail("expected an error containing " .. lu.prettystr(subs) .. ", got success") end
  lu.assertEquals(type(msg), "string", "error value is not a string")
  if type(subs) == "string" then subs = {subs} end
  for _, s in ipairs(subs) do
    if not msg:find(s, 1, true) then
      lu.fail(string.format("error message %q does not contain %q", msg, s))
    end
  end
  return msg
end

-- new tensors go to the CPU until the returned value is closed: for the
-- checks of what only the host has (print formats, host memory counts)
-- when `qkv test --device cuda` makes the GPU the default
function R.cpu_only()
  local was = qkv.default_device()
  qkv.set_default_device("cpu")
  return setmetatable({}, {__close = function() qkv.set_default_device(was) end})
end

return R
