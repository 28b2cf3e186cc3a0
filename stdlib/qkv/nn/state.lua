-- nn/state.lua: a module's state as tensors by name -- m:state_dict(),
-- m:load(src) (qkv's strict copy from a module or a state_dict) and
-- m:load_state_dict(sd [, {strict}]) (PyTorch's, which also reads the
-- names PyTorch saves for its nn.MultiheadAttention) -- added to
-- nn/module.lua's Module, whose walks of the tree (params_of, buffers_of,
-- tree) they read through.

local qkv = require "qkv"
local M = require "qkv.nn.module"
local methods = require "qkv.methods"
M.inside(debug.getinfo(1, "S").source)

local Module, fail, checkopts, flag = M.Module, M.fail, M.checkopts, M.flag
local params_of, buffers_of, tree, is_module, FLOATS = M.params_of, M.buffers_of, M.tree, M.is_module, M.FLOATS

-- name -> tensor for every place a parameter is held (a tied weight under
-- both names), as PyTorch's state_dict
local function state_dict(self)
  local d = {}
  for _, p in ipairs(params_of(self, "state_dict", false)) do d[p[1]] = p[2] end
  for _, b in ipairs(buffers_of(self, "state_dict", "persistent")) do d[b[1]] = b[2] end
  return d
end

-- m's tensors that a state_dict names: its parameters, then its
-- persistent buffers, as {name, tensor, field, buffer = bool}
local function slots(self, fname)
  local mine = params_of(self, fname, false)
  for _, b in ipairs(buffers_of(self, fname, "persistent")) do
    mine[#mine + 1] = {b[1], b[2], b[3], buffer = true}
  end
  return mine
end

-- src's entries (a module's state_dict, or a table read once and raw: no
-- metamethod runs) copied into the slots of mine that it names, each
-- checked before the first is copied; partial: the names src lacks are
-- left as they are (load_state_dict's strict = false), else an error
local function copy_in(self, fname, mine, from, partial)
  local known = {}
  for _, p in ipairs(mine) do
    local name, t = p[1], p[2]
    known[name] = true
    local s = from[name]
    if s == nil and partial then goto next end
    if not qkv.is_tensor(s) then fail(fname, "the source has no tensor '%s'", name) end
    if not pcall(function() return s.ndim end) then
      fail(fname, "the source's '%s' is a closed tensor", name)
    end
    if s.shape ~= t.shape then
      fail(fname, "%s is %s here but %s in the source", name, tostring(t.shape), tostring(s.shape))
    end
    if not p.buffer and not FLOATS[s.dtype] then
      fail(fname, "%s is %s here but %s in the source: it copies float tensors", name, t.dtype, s.dtype)
    end
    ::next::
  end
  if not partial then
    for name in pairs(from) do
      if not known[name] then fail(fname, "the source has an unexpected '%s'", tostring(name)) end
    end
  end
  local is_mine = {}
  for _, p in ipairs(mine) do is_mine[p[2]] = true end
  qkv.no_grad(function()
    local src = {}                -- a source that is one of ours is read first
    for _, p in ipairs(mine) do
      local s = from[p[1]]
      if s ~= nil then src[p[1]] = is_mine[s] and s:clone() or s end
    end
    for _, p in ipairs(mine) do
      local s = src[p[1]]
      if s ~= nil then p[2]:copy_(s:to(p[2].device):to(p[2].dtype)) end
    end
  end)
  return self
end

local function snapshot(fname, src)
  if type(src) ~= "table" then fail(fname, "source must be a module or a state_dict, got %s", type(src)) end
  -- a module, read for state_dict; any other table (qkv.nn itself refuses
  -- names it lacks) is a state_dict
  local from = is_module(src) and src:state_dict() or src
  local snap = {}
  for k, v in next, from do snap[k] = v end
  return snap
end

-- copy the weights of another module of the same structure (or of a
-- state_dict) into this one's parameters, as load_state_dict does: the
-- tensors stay the same objects (an optimizer made before keeps stepping
-- them) and the copies share nothing with the source. Every entry is
-- checked before the first is copied, so a bad one changes nothing.
local function load(self, src)
  return copy_in(self, "load", slots(self, "load"), snapshot("load", src), false)
end

-- PyTorch's nn.MultiheadAttention keeps Q, K and V's projections packed:
-- in_proj_weight (3E, E) and in_proj_bias (3E), and the output's as
-- out_proj.weight (E, E) and out_proj.bias; qkv's MultiHeadAttention holds
-- them as W_Q, W_K, W_V, W_O (E, E), x W as the documents write it, and
-- b_Q, ..., b_O. Each such set in sd under the prefix of one of m's
-- MultiHeadAttention modules is rewritten into qkv's names, in place
local function from_torch_mha(self, sd, fname)
  for _, e in ipairs(tree(self, fname)) do
    local m, pre = e[2], e[1]
    if getmetatable(m).__name == "MultiHeadAttention" and sd[pre .. "in_proj_weight"] ~= nil then
      local w, b = sd[pre .. "in_proj_weight"], sd[pre .. "in_proj_bias"]
      local E = m.d_model
      if not qkv.is_tensor(w) or w.ndim ~= 2 or w:size(1) ~= 3 * E or w:size(2) ~= E then
        fail(fname, "%sin_proj_weight must be a (%d, %d) tensor (PyTorch's packed Q, K, V), got %s",
             pre, 3 * E, E, qkv.is_tensor(w) and tostring(w.shape) or type(w))
      end
      for i, n in ipairs{"Q", "K", "V"} do
        sd[pre .. "W_" .. n] = w:narrow(1, (i - 1) * E + 1, E):t()
        if b ~= nil then
          if not qkv.is_tensor(b) or b.ndim ~= 1 or b:size(1) ~= 3 * E then
            fail(fname, "%sin_proj_bias must be a (%d,) tensor, got %s", pre, 3 * E,
                 qkv.is_tensor(b) and tostring(b.shape) or type(b))
          end
          sd[pre .. "b_" .. n] = b:narrow(1, (i - 1) * E + 1, E)
        end
      end
      sd[pre .. "in_proj_weight"], sd[pre .. "in_proj_bias"] = nil, nil
      local ow = sd[pre .. "out_proj.weight"]
      if ow ~= nil then
        if not qkv.is_tensor(ow) or ow.ndim ~= 2 then
          fail(fname, "%sout_proj.weight must be a (%d, %d) tensor, got %s", pre, E, E,
               qkv.is_tensor(ow) and tostring(ow.shape) or type(ow))
        end
        sd[pre .. "W_O"], sd[pre .. "out_proj.weight"] = ow:t(), nil
      end
      if sd[pre .. "out_proj.bias"] ~= nil then
        sd[pre .. "b_O"], sd[pre .. "out_proj.bias"] = sd[pre .. "out_proj.bias"], nil
      end
    end
  end
end

-- m:load_state_dict(sd [, {strict = true}]): PyTorch's. sd is a
-- state_dict with qkv's names, or as PyTorch saved it for the same
-- architecture (nn.MultiheadAttention's packed in_proj included; Linear,
-- LayerNorm, Embedding and TransformerEncoderLayer have the same names);
-- returns {missing_keys = {...}, unexpected_keys = {...}}, sorted. strict:
-- either list not empty is an error listing both, before anything is
-- copied; a shape that differs is one always
local function load_state_dict(self, sd, opts)
  local fname = "load_state_dict"
  opts = checkopts(fname, opts, {"strict"}, {"strict"})
  local from = snapshot(fname, sd)
  from_torch_mha(self, from, fname)
  local mine, own = slots(self, fname), {}
  local missing, unexpected = {}, {}
  for _, p in ipairs(mine) do
    own[p[1]] = true
    if from[p[1]] == nil then missing[#missing + 1] = p[1] end
  end
  for k in pairs(from) do
    if not own[k] then unexpected[#unexpected + 1] = tostring(k) end
  end
  table.sort(missing)
  table.sort(unexpected)
  if flag(opts, "strict", true) and (#missing > 0 or #unexpected > 0) then
    local function list(t) return '"' .. table.concat(t, '", "') .. '"' end
    fail(fname, "%s's state_dict does not fit:%s%s", getmetatable(self).__name,
         #missing > 0 and " missing key(s) " .. list(missing) .. "." or "",
         #unexpected > 0 and " unexpected key(s) " .. list(unexpected) .. "." or "")
  end
  for _, k in ipairs(unexpected) do from[k] = nil end
  copy_in(self, fname, mine, from, true)
  return {missing_keys = missing, unexpected_keys = unexpected}
end


-- public, and called with '.' says so, as Module's other methods
for name, f in pairs{state_dict = state_dict, load = load, load_state_dict = load_state_dict} do
  rawset(Module, name, methods.wrap(Module, name, f, "m", "module"))
end
