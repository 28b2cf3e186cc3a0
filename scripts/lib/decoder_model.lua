-- decoder_model.lua: the small decoder-only model of scripts/decoder.lua
-- and bench/generate.lua, LLaMA's layout at toy size: token embeddings,
-- blocks of (RMSNorm, grouped-query attention with rotary positions,
-- RMSNorm, SwiGLU MLP) with residuals, a last RMSNorm and the output
-- projection. Built from qkv.nn; returns the table M below.
--
--   local M = dofile(".../scripts/lib/decoder_model.lua")
--   local m = M.new(V [, {dim = 64, heads = 4, kv_heads = 2, layers = 2}])
--   local logits = M.forward(m, tokens, pos [, caches [, maps]])
--
-- tokens: int64 (B, n), counted from 1; pos: the first token's position
-- (from 1, as qkv.rope); caches: M.caches(m, B, max_len), one nn.KVCache a
-- block, which the call appends to; maps: a table that gets each block's
-- attention weights (B, heads, n, n_keys). M.state(m) names the weights
-- as Hugging Face's LlamaForCausalLM does (PyTorch's (out, in) layout).
local nn = qkv.nn
local M = {}

function M.new(V, cfg)
  cfg = cfg or {}
  local D, H, HKV, LAYERS = cfg.dim or 64, cfg.heads or 4, cfg.kv_heads or 2, cfg.layers or 2
  local HD = D // H
  local m = {V = V, D = D, H = H, HKV = HKV, HD = HD, layers = LAYERS,
             embed = nn.Embedding(V, D), norm = nn.RMSNorm(D), head = nn.Linear(D, V, {bias = false}),
             blocks = {}, params = {}}
  for _ = 1, LAYERS do
    m.blocks[#m.blocks + 1] = {
      norm1 = nn.RMSNorm(D), norm2 = nn.RMSNorm(D),
      wq = nn.Linear(D, H * HD, {bias = false}), wk = nn.Linear(D, HKV * HD, {bias = false}),
      wv = nn.Linear(D, HKV * HD, {bias = false}), wo = nn.Linear(H * HD, D, {bias = false}),
      mlp = nn.SwiGLU(D, 4 * D)}
  end
  local function take(mod) for _, p in ipairs(mod:parameters()) do m.params[#m.params + 1] = p end end
  take(m.embed) take(m.norm) take(m.head)
  for _, b in ipairs(m.blocks) do
    for _, name in ipairs{"norm1", "norm2", "wq", "wk", "wv", "wo", "mlp"} do take(b[name]) end
  end
  m.nparams = 0
  for _, p in ipairs(m.params) do m.nparams = m.nparams + p:numel() end
  return m
end

-- x (B, n, D) through block b; returns the new x and the weights when asked
local function block(m, b, x, pos, cache, weights)
  local B, n, H, HKV, HD = x.shape[1], x.shape[2], m.H, m.HKV, m.HD
  local h = b.norm1(x)
  local q = qkv.rope(b.wq(h):view(B, n, H, HD):transpose(2, 3), pos)
  local k = qkv.rope(b.wk(h):view(B, n, HKV, HD):transpose(2, 3), pos)
  local v = b.wv(h):view(B, n, HKV, HD):transpose(2, 3)
  if cache then k, v = cache:update(k, v) end
  local o, w = qkv.attention(q, k, v, {causal = true, enable_gqa = true, weights = weights == true})
  x = x + b.wo(o:transpose(2, 3):reshape(B, n, H * HD))
  return x + b.mlp(b.norm2(x)), w
end

function M.forward(m, tokens, pos, caches, maps)
  local x = m.embed(tokens)
  for l, b in ipairs(m.blocks) do
    local w
    x, w = block(m, b, x, pos, caches and caches[l], maps ~= nil)
    if maps then maps[l] = w end
  end
  return m.head(m.norm(x))
end

function M.caches(m, batch, max_len)
  local c = {}
  for l = 1, m.layers do c[l] = nn.KVCache(batch, m.HKV, max_len, m.HD) end
  return c
end

function M.state(m)
  local s = {["model.embed_tokens.weight"] = m.embed.weight, ["model.norm.weight"] = m.norm.weight,
             ["lm_head.weight"] = m.head.weight}
  for l, b in ipairs(m.blocks) do
    local p = "model.layers." .. (l - 1) .. "."
    s[p .. "input_layernorm.weight"] = b.norm1.weight
    s[p .. "post_attention_layernorm.weight"] = b.norm2.weight
    for name, lin in pairs{q_proj = b.wq, k_proj = b.wk, v_proj = b.wv, o_proj = b.wo} do
      s[p .. "self_attn." .. name .. ".weight"] = lin.weight
    end
    for _, name in ipairs{"gate_proj", "up_proj", "down_proj"} do
      s[p .. "mlp." .. name .. ".weight"] = b.mlp[name].weight
    end
  end
  for k, t in pairs(s) do s[k] = t:detach():contiguous() end
  return s
end

return M
