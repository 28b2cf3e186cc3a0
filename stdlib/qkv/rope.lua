-- rope.lua: rotary position embeddings (Su et al., RoFormer), as the
-- decoder models apply them to queries and keys before attention:
--
--   qkv.rope(x, positions [, {base = 10000, interleaved = false}])
--
-- x (..., n, d), d even. Feature pair k (k = 0 .. d/2 - 1) of the token
-- at position p turns by the angle (p - 1) θ_k, θ_k = base^(-2k/d):
-- positions count from 1, as everything in qkv, and position p is
-- PyTorch's position_ids p - 1 (the first token turns by 0). The pairs
-- are Hugging Face LLaMA's halves (feature k with feature k + d/2, its
-- rotate_half) by default, GPT-J's neighbours (2k with 2k + 1) with
-- interleaved = true. positions: an integer p (the tokens are at p, p +
-- 1, ..., p + n - 1, as a decode step after p - 1 cached tokens), or an
-- integer tensor (n), or (B, n) with B x's first size (each batch item
-- its own positions, as packed or left-padded batches).
--
-- The angles and their cos and sin are computed in float64, then rounded
-- to x's dtype, and the rotation is x's ops in x's dtype (Hugging Face
-- computes the angles in float32, which drifts by about p 2^-24 radians
-- at position p). Composed of tensor ops: differentiable in x, on x's
-- device. qkv.nn.RotaryEmbedding keeps the tables for a maximum length.

local qkv = require "qkv"

local M = {}

-- an error at the line that called the public function (fail <- a check <- it)
local function fail(fmt, ...) error(string.format(fmt, ...), 4) end

local function shape(t) return tostring(t.shape) end
local open = require("qkv.methods").open_tensor
local what = require("qkv.methods").what_arg

local INT = {int64 = true, int32 = true, int16 = true, int8 = true, uint8 = true}
local FLOAT = {float32 = true, float64 = true, float16 = true, bfloat16 = true}

-- the options of fname, checked by the library's one checker
-- (qkv._checkopts): base (a number > 0), interleaved (a boolean) and the
-- names in the list extra; returns base, interleaved and the options as
-- checked (the caller reads extra's from them)
function M.options(fname, opts, extra)
  local known = {"base", "interleaved", table.unpack(extra or {})}
  local msg, o = qkv._checkopts(fname, opts, known, {"interleaved"})
  if msg then error(msg, 3) end
  local base = o.base == nil and 10000 or o.base
  if type(base) ~= "number" or not (base > 0) or base == math.huge then
    fail("%s: base must be a number > 0, got %s", fname, tostring(base))
  end
  return base, o.interleaved == true, o
end

-- θ_k = base^(-2k/d), k = 0 .. d/2 - 1, float64 (d/2)
function M.freqs(d, base)
  local f = {}
  for k = 0, d // 2 - 1 do f[k + 1] = base ^ (-2 * k / d) end
  return qkv.tensor(f, "float64")
end

-- cos and sin of the angles of positions p (float64 (..., n)), (..., n, d/2)
function M.angles(p, d, base)
  local a = (p - 1):unsqueeze(-1) * M.freqs(d, base)
  return a:cos(), a:sin()
end

-- x rotated by c and s ((..., n, d/2), broadcasting with x's (..., n)), in
-- x's dtype and on its device
function M.apply(x, c, s, interleaved)
  if c.dtype ~= x.dtype or c.device ~= x.device then
    c, s = c:to(x.device):to(x.dtype), s:to(x.device):to(x.dtype)
  end
  local d = x:size(-1)
  if interleaved then                      -- GPT-J: pairs (2k, 2k + 1)
    local pairs_ = x:unflatten(-1, {d // 2, 2})
    local e, o = pairs_:select(-1, 1), pairs_:select(-1, 2)
    return qkv.stack({e * c - o * s, o * c + e * s}, -1):reshape(x.shape)
  end
  local h = d // 2                         -- LLaMA: halves (k, k + d/2)
  local x1, x2 = x:narrow(-1, 1, h), x:narrow(-1, h + 1, h)
  return qkv.cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1)
end

-- x checked: a floating tensor (..., n, d), d even
function M.check_x(fname, x)
  if not open(x) then
    fail("%s: x must be a tensor (..., n, d), got %s", fname, what(x))
  end
  if not FLOAT[x.dtype] or x:dim() < 2 then
    fail("%s: x must be a floating tensor (..., n, d), got %s %s", fname, x.dtype, shape(x))
  end
  if x:size(-1) % 2 ~= 0 then
    fail("%s: x's last size d = %d must be even (features turn in pairs), x is %s", fname,
         x:size(-1), shape(x))
  end
end

-- positions as float64 (n) or (B', 1 ..., n) broadcasting with x's (..., n),
-- on the CPU, each checked to be >= 1 (and <= max when given)
function M.positions(fname, x, pos, max)
  local n = x:size(-2)
  local p
  if math.type(pos) == "integer" then
    if pos < 1 then fail("%s: positions count from 1, got %d", fname, pos) end
    if max and pos + n - 1 > max then
      fail("%s: positions %d to %d pass max_len = %d", fname, pos, pos + n - 1, max)
    end
    return qkv.arange(pos, pos + n, "float64")
  end
  if not open(pos) or not INT[pos.dtype] or pos:dim() < 1 or pos:dim() > 2 then
    fail("%s: positions must be an integer >= 1 or an integer tensor (n) or (B, n), got %s", fname,
         what(pos))
  end
  if pos:size(-1) ~= n then
    fail("%s: positions %s do not match x %s: they need n = %d", fname, shape(pos), shape(x), n)
  end
  if pos:dim() == 2 and (x:dim() < 3 or (pos:size(1) ~= x:size(1) and pos:size(1) ~= 1)) then
    fail("%s: positions %s are (B, n), and x %s must be (B, ..., n, d) with that B", fname,
         shape(pos), shape(x))
  end
  p = pos:cpu():double()
  if p:numel() > 0 then
    local lo, hi = p:min():item(), p:max():item()
    if lo < 1 then fail("%s: positions count from 1, got %d", fname, math.tointeger(lo) or lo) end
    if max and hi > max then
      fail("%s: position %d passes max_len = %d", fname, math.tointeger(hi) or hi, max)
    end
  end
  if p:dim() == 2 then                    -- (B, n) -> (B, 1, ..., 1, n)
    local s = {p:size(1)}
    for _ = 1, x:dim() - 3 do s[#s + 1] = 1 end
    s[#s + 1] = n
    p = p:reshape(table.unpack(s))
  end
  return p
end

-- cos and sin of positions 1 .. CACHED in x's dtype on x's device, per
-- (d, base, dtype, device), made as M.angles makes them (the same values)
-- and grown by doubling: a decode step's rope narrows them, rather than
-- making its angles anew (10 small ops a call). At most 8192 positions
-- (8 MB for d 128 in float64); past them the angles are computed.
local CACHED = 8192
local tables = {}        -- [d][base][dtype][device]: the cached tables

--[[
The tables of positions 1 to n (n a power of 2 >= last, up to CACHED) for
x's d, dtype and device, made once: cos and sin (n, d/2) for the pairs,
and for the halves C = [cos, cos] and S = [-sin, sin] (n, d), so that the
halves' rotation is x C + rotate_half(x) S with rotate_half(x) = [x2, x1]:
three ops and a cat where M.apply takes six and a cat, and the same bits
(x2 (-s) is -(x2 s), and a + (-b) is a - b).
]]
local function sub(t, key)            -- t[key], made empty the first time
  local s = t[key]
  if s == nil then s = {}; t[key] = s end
  return s
end

local function cached(x, d, base, last)
  local t = sub(sub(sub(tables, d), base), x.dtype)
  local dev = x.device
  local c = t[dev]
  if c == nil or c.n < last then
    local n = 64
    while n < last do n = n * 2 end
    local cos, sin = M.angles(qkv.arange(1, n + 1, "float64"), d, base)
    local function put(a) return a:to(dev):to(x.dtype) end
    c = {n = n, c = put(cos), s = put(sin), C = put(qkv.cat({cos, cos}, -1)),
         S = put(qkv.cat({-sin, sin}, -1))}
    t[dev] = c
  end
  return c
end

function M.rope(x, positions, opts)
  -- the options read first: a table's metamethods run there (and may
  -- close a tensor), before the tensors are checked
  local base, inter = 10000, false
  if opts ~= nil then base, inter = M.options("rope", opts) end
  M.check_x("rope", x)
  local d, n = x:size(-1), x:size(-2)
  if math.type(positions) == "integer" and positions >= 1 and positions + n - 1 <= CACHED then
    local t = cached(x, d, base, positions + n - 1)
    if inter then
      return M.apply(x, t.c:narrow(1, positions, n), t.s:narrow(1, positions, n), true)
    end
    local h = d // 2
    local rot = qkv.cat({x:narrow(-1, h + 1, h), x:narrow(-1, 1, h)}, -1)
    return x * t.C:narrow(1, positions, n) + rot * t.S:narrow(1, positions, n)
  end
  local p = M.positions("rope", x, positions)
  local c, s = M.angles(p, d, base)
  return M.apply(x, c, s, inter)
end

return M
