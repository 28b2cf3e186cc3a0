-- doc/init.lua: qkv.doc, the docstring registry behind help() and `?name` in
-- the REPL, and behind the API reference, docs/api.md (tests/tools/gen_api.lua).
--
-- The entries live in data files, stdlib/qkv/doc/*.lua, read the first
-- time help is asked for. Each file returns a list of records
--   {name = "qkv.softmax", sig = "qkv.softmax(x [, dim])", group = "...",
--    doc = "one paragraph", example = "code with --> lines", see = {...},
--    also = "x:softmax([dim])", also_group = "..."}
-- where `also` is the signature of the same function under a second name
-- (qkv.sum is x:sum); that name gets an entry of its own with the same text.
--
--   doc.help([x])     prints the text for x (io.write), returns nothing
--   doc.text([x])     that text, or nil and "no documentation for ..."
--   doc.entries()     name -> {sig, doc, group, namespace, ...}
--   doc.public()      the names of every public function, found by walking
--                     the live objects (so that a test can compare)
--   doc.namespaces()  the entries grouped and ordered, for the reference
--   doc.first_sentence(s), doc.wrap(s, width, indent)
--
-- Names: qkv.softmax, Tensor:matmul (called as x:matmul(y)), qkv.nn.Linear,
-- Module:parameters (m:parameters()), qkv.plot.heatmap, qkv.test.assertClose,
-- qkv.repl.timing, qkv.help, qkv.variants.causal, BlockMask:density
-- (bm:density()).

local qkv = package.loaded.qkv or require "qkv"

local M = {}

local FILES = {"core", "math", "select", "grad", "tensor", "nn", "plot", "misc", "io", "bert",
               "composite", "dist", "variants", "decoder", "loss", "data", "amp"}
local WIDTH = 76

-- methods of nn.Module that are machinery for writing modules, not for
-- using them (a PyTorch user calls parameters, state_dict, load, forward)
M.INTERNAL = {init = true, param = true, child = true, repr = true, extra = true}

-- the namespace of a name, most specific prefix first
local PREFIXES = {
  {"qkv.nn.functional.", "qkv.nn.functional"}, {"qkv.nn.", "qkv.nn"}, {"qkv.plot.", "qkv.plot"}, {"qkv.test.", "qkv.test"},
  {"qkv.cuda.", "qkv.cuda"},
  {"qkv.repl.", "qkv.repl"}, {"qkv.optim.", "qkv.optim"}, {"qkv.bert.", "qkv.bert"},
  {"qkv.wordpiece.", "qkv.wordpiece"}, {"qkv.dist.", "qkv.dist"}, {"qkv.data.", "qkv.data"}, {"qkv.variants.", "qkv.variants"},
  {"qkv.amp.", "qkv.amp"}, {"GradScaler:", "GradScaler"},
  {"qkv.", "qkv"}, {"BertModel:", "BertModel"}, {"BlockMask:", "BlockMask"},
  {"Tokenizer:", "Tokenizer"},
  {"Tensor:", "Tensor"}, {"Module:", "Module"}, {"Optimizer:", "Optimizer"},
  {"LRScheduler:", "LRScheduler"}, {"Event:", "Event"},
}

local function namespace_of(name)
  for _, p in ipairs(PREFIXES) do
    if name:sub(1, #p[1]) == p[1] then return p[2], name:sub(#p[1] + 1) end
  end
end

-- the name a signature is written for: "x:sum(..." is Tensor:sum
local function name_of_sig(sig)
  local head = sig:match("^([%w_.:]+)%(") or sig
  local recv, method = head:match("^(%a):([%w_]+)$")
  if recv == "x" then return "Tensor:" .. method end
  if recv == "m" then return "Module:" .. method end
  return head
end
M.name_of_sig = name_of_sig

---------------------------------------------------------------- loading

local registry, order, intro

local function add(e, file)
  if registry[e.name] then
    error(string.format("qkv.doc: %s is documented twice (%s and %s)",
                        e.name, registry[e.name].file, file), 0)
  end
  e.namespace, e.file = namespace_of(e.name), file
  registry[e.name] = e
  order[#order + 1] = e.name
end

local function load_all()
  if registry then return end
  registry, order = {}, {}
  intro = require "qkv.doc.intro"
  for _, f in ipairs(FILES) do
    for _, r in ipairs(require("qkv.doc." .. f)) do
      local e = {name = r.name, sig = r.sig, doc = r.doc, group = r.group,
                 example = r.example, see = r.see, also = r.also}
      add(e, f)
      if r.also then
        add({name = name_of_sig(r.also), sig = r.also, doc = r.doc,
             group = r.also_group, example = r.example, see = r.see,
             also = r.sig}, f)
      end
    end
  end
end

function M.entries()
  load_all()
  local copy = {}
  for name, e in pairs(registry) do
    local c = {}
    for k, v in pairs(e) do c[k] = v end
    copy[name] = c
  end
  return copy
end

---------------------------------------------------------------- live objects

-- a module's own functions: raw keys, since qkv.test forwards the rest to
-- LuaUnit through __index and qkv loads its library through __index
local function own_functions(t, prefix, out)
  local keys = {}
  for k, v in next, t do
    if type(k) == "string" and k:sub(1, 1) ~= "_" and type(v) == "function" then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = {prefix .. k, t[k]} end
  return out
end

local function is_class(v)
  local mt = type(v) == "table" and getmetatable(v)
  return mt and mt.__call ~= nil or false
end

-- the nn classes, and the Module methods meant for users (forward is each
-- class's own, so it is found on the classes)
local function nn_functions(nn, out)
  local names, methods = {}, {}
  for k, v in next, nn do
    if type(k) == "string" and k:sub(1, 1) ~= "_" and is_class(v) then
      names[#names + 1] = k
    end
  end
  table.sort(names)
  for _, k in ipairs(names) do out[#out + 1] = {"qkv.nn." .. k, nn[k]} end
  own_functions(nn, "qkv.nn.", out)
  local classes, seen = {nn.Module}, {}
  for _, k in ipairs(names) do classes[#classes + 1] = nn[k] end
  for _, class in ipairs(classes) do
    for k, v in next, class do
      if type(k) == "string" and k:sub(1, 1) ~= "_" and type(v) == "function"
          and not M.INTERNAL[k] and not seen[k] then
        -- a method of one class (ModuleList:append) is found as that
        -- class's; forward, every class's own, as none
        seen[k] = k == "forward" and true or v
        methods[#methods + 1] = k
      end
    end
  end
  table.sort(methods)
  for _, k in ipairs(methods) do
    out[#out + 1] = {"Module:" .. k, nn.Module[k] or seen[k] ~= true and seen[k] or nil}
  end
  return out
end

-- {name, value} for every public function; `load` says whether to load
-- the library modules (public() does; help by value only looks at what
-- the script has already loaded, since its value must come from there)
local function walk(load)
  local out = {}
  if load then
    for _, k in ipairs(qkv._lazy or {}) do pcall(function() return qkv[k] end) end
  end
  own_functions(qkv, "qkv.", out)
  own_functions(qkv.cuda, "qkv.cuda.", out)
  own_functions(qkv._methods, "Tensor:", out)
  own_functions(qkv.cuda._Event, "Event:", out)
  local function lib(modname)
    if load then
      local ok, m = pcall(require, modname)
      return ok and type(m) == "table" and m or nil
    end
    return type(package.loaded[modname]) == "table" and package.loaded[modname] or nil
  end
  local nn = lib("qkv.nn")
  if nn then
    nn_functions(nn, out)
    -- qkv.nn.functional's own functions; its aliases are found by their
    -- first names (F.relu is qkv.relu)
    local F = rawget(nn, "functional")
    if type(F) == "table" then
      local found = {}
      for _, p in ipairs(out) do if p[2] ~= nil then found[p[2]] = true end end
      for _, p in ipairs(own_functions(F, "qkv.nn.functional.", {})) do
        if not found[p[2]] then out[#out + 1] = p end
      end
    end
  end
  for _, ns in ipairs{"qkv.plot", "qkv.test", "qkv.repl", "qkv.optim", "qkv.dist", "qkv.data"} do
    local m = lib(ns)
    if m then own_functions(m, ns .. ".", out) end
  end
  local optim = lib("qkv.optim")
  if optim and type(optim.Optimizer) == "table" then
    own_functions(optim.Optimizer, "Optimizer:", out)
  end
  local sched = optim and optim.lr_scheduler
  if type(sched) == "table" then
    own_functions(sched, "qkv.optim.lr_scheduler.", out)
    if type(sched.LRScheduler) == "table" then own_functions(sched.LRScheduler, "LRScheduler:", out) end
  end
  -- qkv.amp loads GradScaler on first use: its own module holds it
  local amp = lib("qkv.amp") and lib("qkv.amp.grad_scaler")
  if amp then
    out[#out + 1] = {"qkv.amp.GradScaler", amp.GradScaler}
    own_functions(amp.Scaler, "GradScaler:", out)
  end
  local bert = lib("qkv.bert")
  if bert then
    own_functions(bert, "qkv.bert.", out)
    own_functions(bert.BertModel, "BertModel:", out)
  end
  local wp = lib("qkv.wordpiece")
  if wp then
    own_functions(wp, "qkv.wordpiece.", out)
    own_functions(wp.Tokenizer, "Tokenizer:", out)
  end
  -- attention's variants: the library; qkv.block_mask and its kin are
  -- found as qkv's, and attention is the entry qkv.attention hands its
  -- mods to (bindings/lattn.c), not a function of its own
  local variants = lib("qkv.variants")
  if variants then
    local found = {}
    for _, p in ipairs(out) do if p[2] ~= nil then found[p[2]] = true end end
    for _, p in ipairs(own_functions(variants, "qkv.variants.", {})) do
      if not found[p[2]] and p[1] ~= "qkv.variants.attention" then out[#out + 1] = p end
    end
    if type(variants.BlockMask) == "table" then own_functions(variants.BlockMask, "BlockMask:", out) end
  end
  return out
end

function M.public()
  local names = {}
  for i, p in ipairs(walk(true)) do names[i] = p[1] end
  return names
end

-- value -> name, the first name in namespace order (qkv.sum before
-- Tensor:sum: they are one function); a class's forward is Module:forward,
-- and the executable's global help, which loads qkv.doc on first use, is qkv.help
local function name_of_value(v)
  if type(v) ~= "function" and type(v) ~= "table" then return nil end
  if v == M.help or v == rawget(_G, "help") then return "qkv.help" end
  for _, p in ipairs(walk(false)) do
    if p[2] == v then return p[1] end
  end
  local nn = package.loaded["qkv.nn"]
  if type(nn) == "table" then
    for _, c in pairs(nn) do
      if is_class(c) and rawget(c, "forward") == v then return "Module:forward" end
    end
  end
end

---------------------------------------------------------------- formatting

local function width(s) return utf8.len(s) or #s end

-- words of s in lines of at most `cols` columns, each line after `indent`
function M.wrap(s, cols, indent)
  indent = indent or ""
  local lines, line = {}, nil
  for word in s:gmatch("%S+") do
    if line and width(line) + 1 + width(word) > cols then
      lines[#lines + 1] = line
      line = nil
    end
    line = line and line .. " " .. word or indent .. word
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end

-- up to the first full stop that ends a sentence: one followed by a space
-- or the end, so that "0.5" stays whole, and not the last of "..."
function M.first_sentence(s)
  s = s:gsub("%s+", " "):gsub("^ ", "")
  for stop in s:gmatch("()%. ") do
    if s:sub(stop - 1, stop - 1) ~= "." then return s:sub(1, stop) end
  end
  return s
end

local function entry_text(e)
  local parts = {e.sig, "", M.wrap(e.doc, WIDTH, "  ")}
  local extra = {}
  if e.also then extra[#extra + 1] = "Also: " .. e.also end
  if e.see then extra[#extra + 1] = "See also: " .. table.concat(e.see, ", ") end
  if #extra > 0 then
    parts[#parts + 1] = ""
    for _, x in ipairs(extra) do parts[#parts + 1] = M.wrap(x, WIDTH, "  ") end
  end
  if e.example then
    parts[#parts + 1] = ""
    parts[#parts + 1] = "Example:"
    for line in e.example:gsub("\n$", ""):gmatch("[^\n]*") do
      parts[#parts + 1] = "  " .. line
    end
  end
  return table.concat(parts, "\n") .. "\n"
end

function M.namespaces()
  load_all()
  local list = {}
  for _, ns in ipairs(intro.namespaces) do
    local groups, byname = {}, {}
    for _, g in ipairs(ns.groups) do
      byname[g] = {name = g, entries = {}}
      groups[#groups + 1] = byname[g]
    end
    for _, name in ipairs(order) do
      local e = registry[name]
      if e.namespace == ns.id then
        local g = byname[e.group]
        if not g then
          error(string.format("qkv.doc: %s is in group '%s', which %s does not have",
                              name, tostring(e.group), ns.id), 0)
        end
        g.entries[#g.entries + 1] = e
      end
    end
    list[#list + 1] = {id = ns.id, title = ns.title, intro = ns.intro, groups = groups}
  end
  return list
end

-- a namespace: its intro, then each function's signature and first sentence
local function namespace_text(id)
  for _, ns in ipairs(M.namespaces()) do
    if ns.id == id then
      local parts = {ns.title, "", M.wrap(ns.intro, WIDTH, "  ")}
      if id == "Tensor" then parts[#parts + 1] = "\n" .. intro.tensor:gsub("\n$", "") end
      for _, g in ipairs(ns.groups) do
        parts[#parts + 1] = ""
        parts[#parts + 1] = g.name:sub(1, 1):upper() .. g.name:sub(2) .. ":"
        for _, e in ipairs(g.entries) do
          parts[#parts + 1] = "  " .. e.sig
          parts[#parts + 1] = M.wrap(M.first_sentence(e.doc), WIDTH, "      ")
        end
      end
      return table.concat(parts, "\n") .. "\n"
    end
  end
end

local function general_text()
  return (intro.general:gsub("%$VERSION", qkv._VERSION or "qkv"))
end

---------------------------------------------------------------- lookup

local NS_NAMES = {
  qkv = "qkv", Tensor = "Tensor", ["qkv.Tensor"] = "Tensor",
  ["qkv.nn"] = "qkv.nn", nn = "qkv.nn", Module = "Module",
  ["qkv.nn.functional"] = "qkv.nn.functional", ["nn.functional"] = "qkv.nn.functional",
  ["qkv.nn.Module"] = "Module", ["nn.Module"] = "Module",
  ["qkv.plot"] = "qkv.plot", plot = "qkv.plot", ["qkv.test"] = "qkv.test",
  ["qkv.repl"] = "qkv.repl", repl = "qkv.repl", ["qkv.optim"] = "qkv.optim",
  optim = "qkv.optim", ["qkv.variants"] = "qkv.variants", variants = "qkv.variants",
  ["qkv.data"] = "qkv.data", ["qkv.amp"] = "qkv.amp", amp = "qkv.amp", GradScaler = "GradScaler",
  BlockMask = "BlockMask",
}

-- tables that stand for a namespace
local function namespace_of_value(v)
  local loaded = package.loaded
  if v == qkv then return "qkv" end
  if v == qkv._methods or v == loaded["qkv.Tensor"] or v == rawget(qkv, "Tensor") then
    return "Tensor"
  end
  local nn = loaded["qkv.nn"]
  if type(nn) == "table" and v == nn then return "qkv.nn" end
  if type(nn) == "table" and v == nn.Module then return "Module" end
  if type(nn) == "table" and v == rawget(nn, "functional") then return "qkv.nn.functional" end
  for _, id in ipairs{"qkv.plot", "qkv.test", "qkv.repl", "qkv.optim", "qkv.variants", "qkv.data", "qkv.amp"} do
    if loaded[id] ~= nil and v == loaded[id] then return id end
  end
  local variants = loaded["qkv.variants"]
  if type(variants) == "table" and v == variants.BlockMask then return "BlockMask" end
end

-- a bare name that qkv does not have: the tensor method, else whatever
-- the libraries have by that name (several: a list)
local function resolve_bare(s)
  if registry["Tensor:" .. s] then return "Tensor:" .. s end
  local found = {}
  for _, p in ipairs{"qkv.nn.", "qkv.nn.functional.", "Module:", "qkv.plot.", "qkv.test.",
                     "qkv.repl.", "qkv.variants.", "BlockMask:"} do
    if registry[p .. s] then found[#found + 1] = p .. s end
  end
  if #found == 1 then return found[1] end
  if #found > 1 then return nil, found end
end

-- the receivers that name a namespace of methods: Tensor.matmul,
-- qkv.Tensor.matmul (as error messages write it), Module:load
local METHOD_NS = {Tensor = "Tensor", ["qkv.Tensor"] = "Tensor", Module = "Module",
                   ["nn.Module"] = "Module", ["qkv.nn.Module"] = "Module", BlockMask = "BlockMask",
                   GradScaler = "GradScaler"}

-- a name as typed: "qkv.softmax", "softmax", "x:matmul", "Tensor.matmul",
-- "nn.Linear", "qkv.nn"; returns an entry name, or "ns" and a namespace,
-- or nil and the names that match a bare name when there are several
local function resolve(s)
  s = s:gsub("^%s+", ""):gsub("%s+$", ""):gsub("^%?", ""):gsub("%(%)$", "")
  if NS_NAMES[s] then return "ns", NS_NAMES[s] end
  if registry[s] then return s end
  -- qkv.nn.functional.relu, F.relu: the function's own entry (qkv.relu)
  local fn = s:match("^qkv%.nn%.functional%.([%w_]+)$") or s:match("^nn%.functional%.([%w_]+)$")
    or s:match("^F%.([%w_]+)$")
  if fn then
    if registry["qkv.nn.functional." .. fn] then return "qkv.nn.functional." .. fn end
    local nn = package.loaded["qkv.nn"]
    local F = type(nn) == "table" and rawget(nn, "functional")
    local v = type(F) == "table" and rawget(F, fn)
    return v and name_of_value(v)
  end
  local recv, sep, method = s:match("^([%a_][%w_.]*)([:.])([%w_]+)$")
  if recv and METHOD_NS[recv] then
    local name = METHOD_NS[recv] .. ":" .. method
    return registry[name] and name
  end
  if sep == ":" then            -- x:matmul, m:parameters, bm:density, any receiver
    if registry["Tensor:" .. method] then return "Tensor:" .. method end
    if registry["Module:" .. method] then return "Module:" .. method end
    return registry["BlockMask:" .. method] and "BlockMask:" .. method
  end
  if registry["qkv." .. s] then return "qkv." .. s end
  if s:match("^[%a_][%w_]*$") then return resolve_bare(s) end
end

local function list_text(s, names)
  local lines = {"several functions are called " .. s .. ":", ""}
  for _, n in ipairs(names) do
    lines[#lines + 1] = "  " .. registry[n].sig
    lines[#lines + 1] = M.wrap(M.first_sentence(registry[n].doc), WIDTH, "      ")
  end
  return table.concat(lines, "\n") .. "\n"
end

-- a qkv.nn module instance: the name of its class
local function class_of(x)
  local nn, mt = package.loaded["qkv.nn"], getmetatable(x)
  if type(nn) ~= "table" or mt == nil then return nil end
  for k, c in pairs(nn) do
    if c == mt and is_class(c) then return "qkv.nn." .. k end
  end
end

function M.text(...)
  load_all()
  if select("#", ...) == 0 then return general_text() end
  local x = ...
  local name, arg
  if type(x) == "string" then
    name, arg = resolve(x)
    if name == "ns" then return namespace_text(arg) end
    if not name and arg then return list_text(x, arg) end
  elseif qkv.is_tensor(x) then
    return namespace_text("Tensor")
  else
    local ns = namespace_of_value(x)
    if ns then return namespace_text(ns) end
    name = name_of_value(x) or type(x) == "table" and class_of(x) or nil
  end
  if name and registry[name] then return entry_text(registry[name]) end
  return nil, "no documentation for " .. (name or tostring(x))
end

function M.help(...)
  local text, msg = M.text(...)
  io.write(text or msg .. "\n")
  io.stdout:flush()
end

return M
