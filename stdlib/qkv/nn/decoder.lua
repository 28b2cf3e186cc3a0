-- nn/decoder.lua: qkv.nn's pieces of decoder models beside attention:
-- SwiGLU (LLaMA's MLP) and KVCache (the keys and values of the tokens so
-- far, for decoding one token at a time). RotaryEmbedding is in
-- nn/layers.lua, qkv.rope in rope.lua.

local qkv = require "qkv"
local M = require "qkv.nn.module"
M.inside(debug.getinfo(1, "S").source)

local nn, class, fail, checkdim, checktensor, opts_of = M.nn, M.class, M.fail, M.checkdim,
  M.checktensor, M.opts_of

-- SwiGLU(dim, hidden [, {bias = false, dtype, device}]): down(silu(gate(x)) * up(x)),
-- the MLP of LLaMA, Mistral and Qwen (Shazeer's GLU variants), its three
-- Linear layers named as Hugging Face's LlamaMLP: gate_proj, up_proj
-- (dim -> hidden) and down_proj (hidden -> dim); no biases by default
local SwiGLU = class("SwiGLU")
function SwiGLU:init(dim, hidden, opts)
  checkdim("SwiGLU", "dim", dim)
  checkdim("SwiGLU", "hidden", hidden)
  local o, dt = opts_of("SwiGLU", opts, {"bias", "dtype", "device"}, {"bias"})
  local lo = {bias = o.bias == true, dtype = dt}
  self.dim, self.hidden = dim, hidden
  self.gate_proj = nn.Linear(dim, hidden, lo)
  self.up_proj = nn.Linear(dim, hidden, lo)
  self.down_proj = nn.Linear(hidden, dim, lo)
  M.place(self, o)
end

function SwiGLU:forward(x)
  checktensor("SwiGLU", "x", x)
  if x:dim() < 1 or x:size(-1) ~= self.dim then
    fail("SwiGLU", "x %s must end in dim = %d", tostring(x.shape), self.dim)
  end
  return self.down_proj(qkv.silu(self.gate_proj(x)) * self.up_proj(x))
end

function SwiGLU:extra()
  return string.format("dim=%d, hidden=%d", self.dim, self.hidden)
end

--[[
KVCache(batch, heads, max_len, head_dim [, {dtype = "float32", device}]):
the keys and values of one attention layer, preallocated (batch, heads,
max_len, head_dim) each, heads the key/value heads (H_kv under
grouped-query attention). cache:update(k, v) writes k and v (batch,
heads, n, head_dim) after the tokens it holds and returns the keys and
values of all of them, (batch, heads, length, head_dim) views of the
cache (no copy); cache:reset() empties it; cache.length is how many
tokens it holds (Hugging Face's get_seq_length). A cache past max_len, k
or v of another shape, dtype or device, is an error. dtype may be
"float32", "float64", "float16" or "bfloat16" (a bfloat16 cache holds
half the bytes, and a decode step reads it as it is). Attention over the
returned keys uses qkv's causal, aligned to the last key: the new queries
are the last ones. nn.MultiHeadAttention takes it as opts.cache.
]]
local KVCache = class("KVCache")
function KVCache:init(batch, heads, max_len, head_dim, opts)
  checkdim("KVCache", "batch", batch)
  checkdim("KVCache", "heads", heads)
  checkdim("KVCache", "max_len", max_len)
  checkdim("KVCache", "head_dim", head_dim)
  local o = opts_of("KVCache", opts, {"dtype", "device"})
  local size = {batch, heads, max_len, head_dim}
  local function make()                  -- on the default device unless told
    if o.device ~= nil then return qkv.zeros(size, o.dtype or "float32", o.device) end
    return qkv.zeros(size, o.dtype or "float32")
  end
  local ok, k = pcall(make)
  if not ok then fail("KVCache", "%s", (tostring(k):gsub("^.-zeros: ", ""))) end
  self.k, self.v = k, make()
  self.batch, self.heads, self.max_len, self.head_dim = batch, heads, max_len, head_dim
  self.length = 0
end

-- cache:update(k, v) -> keys, values of every token so far
function KVCache:update(k, v)
  local F = "KVCache"
  checktensor(F, "k", k)
  checktensor(F, "v", v)
  for _, p in ipairs{{"k", k}, {"v", v}} do
    local t = p[2]
    if t:dim() ~= 4 or t:size(1) ~= self.batch or t:size(2) ~= self.heads or t:size(4) ~= self.head_dim then
      fail(F, "%s %s must be (batch, heads, n, head_dim) = (%d, %d, n, %d)", p[1], tostring(t.shape),
           self.batch, self.heads, self.head_dim)
    end
    if t.dtype ~= self.k.dtype or t.device ~= self.k.device then
      fail(F, "%s is %s on %s, the cache %s on %s", p[1], t.dtype, t.device, self.k.dtype, self.k.device)
    end
  end
  local n = k:size(3)
  if v:size(3) ~= n then
    fail(F, "k %s and v %s hold different numbers of tokens", tostring(k.shape), tostring(v.shape))
  end
  if self.length + n > self.max_len then
    fail(F, "%d tokens after the %d it holds pass max_len = %d", n, self.length, self.max_len)
  end
  if n > 0 then
    self.k:narrow(3, self.length + 1, n):copy_(k:detach())
    self.v:narrow(3, self.length + 1, n):copy_(v:detach())
  end
  self.length = self.length + n
  return self.k:narrow(3, 1, self.length), self.v:narrow(3, 1, self.length)
end

-- cache(k, v) is cache:update(k, v)
function KVCache:forward(k, v) return self:update(k, v) end

function KVCache:reset()
  self.length = 0
  return self
end

function KVCache:get_seq_length() return self.length end

function KVCache:extra()
  return string.format("batch=%d, heads=%d, max_len=%d, head_dim=%d, length=%d, dtype=%s",
                       self.batch, self.heads, self.max_len, self.head_dim, self.length, self.k.dtype)
end

return nn
