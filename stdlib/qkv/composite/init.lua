-- composite/init.lua: qkv.composite, PyTorch's staple tensor functions
-- that qkv's C ops lack, each written as a composition of those ops:
-- shapes (flatten, unflatten, chunk, split: composite/shapes.lua),
-- factories (zeros_like ... empty_like, x:new_zeros ..., randint,
-- randperm, linspace, logspace, manual_seed: composite/factories.lua), norm, outer
-- and allclose (composite/math.lua), scatter, argsort, flip, roll and
-- repeat_interleave (composite/select.lua), half and bfloat16 here; the
-- checks of their arguments are composite/args.lua. They take PyTorch's
-- arguments with dims 1-based (negative from the end) and indices
-- 1-based, and, being compositions of differentiable ops, are
-- differentiable (scatter records its own gradient).
--
-- Loaded on first use: bindings/lqkv.c lists the functions of qkv that
-- load it, and a method that the tensor's C methods lack loads it once
-- (bindings/ltensor.c) before it is an error. Loading puts the functions
-- into qkv and the methods into the tensors' method table.

local qkv = require "qkv"
local S = require "qkv.composite.args"
local SH = require "qkv.composite.shapes"
local F = require "qkv.composite.factories"
local MATH = require "qkv.composite.math"
local SEL = require "qkv.composite.select"

local M = {}
local fail, api, keywords, tensor_arg = S.fail, S.api, S.keywords, S.tensor_arg
local like, new_factory = F.like, F.new_factory

---------------------------------------------------------------- install

-- PyTorch's keywords of the functions and methods that take them, the
-- positions' names from the second argument on, and of those, the ones
-- that take a list (args.keywords)
local SPLIT = {"split_size_or_sections", "split_size"}
local KEYWORDS = {
  flatten = {"start_dim", "end_dim"}, unflatten = {"dim", "sizes", lists = {sizes = true}},
  chunk = {"chunks", "dim"}, split = {SPLIT, "dim", lists = {[SPLIT] = true}},
  norm = {"p", "dim", "keepdim", "dtype", lists = {dim = true}},
  scatter = {"dim", "index", {"src", "value"}, "reduce"},
  scatter_ = {"dim", "index", {"src", "value"}, "reduce"},
  argsort = {"dim", "descending", "stable"},
  flip = {"dims", lists = {dims = true}, varargs = true},     -- x:flip(1, 2) too
  roll = {"shifts", "dims", lists = {shifts = true, dims = true}},
  repeat_interleave = {"repeats", "dim", lists = {repeats = true}}, outer = {"vec2"},
  allclose = {"other", "rtol", "atol", "equal_nan"},
}

-- f as the public function name, taking its keywords
-- the most arguments of those that take no keywords (x:new_* count theirs)
local MAXARGS = {
  zeros_like = 2, ones_like = 2, empty_like = 2, rand_like = 2, randn_like = 2,
  full_like = 3, randint = 4, randperm = 2, linspace = 4, logspace = 5, manual_seed = 1,
  half = 1, bfloat16 = 1,
}

-- f as the public function name, taking its keywords; an argument past
-- those it takes is an error, as the bindings' qkvL_args makes it
local function public(name, f)
  local names = KEYWORDS[name]
  local max = names and not names.varargs and 1 + #names or MAXARGS[name]
  return api(name, function(...)
    local args = table.pack(...)
    if names then args = table.pack(keywords(name, names, 2, ...)) end
    local n = args.n
    while n > 0 and args[n] == nil do n = n - 1 end
    if max and n > max then
      fail("takes %d argument%s, got %d (argument #%d is a %s)", max, max == 1 and "" or "s",
           n, max + 1, type(args[max + 1]))
    end
    return f(table.unpack(args, 1, n))
  end)
end

-- functions of qkv (and methods of the same name)
local FUNCTIONS = {
  flatten = SH.flatten, unflatten = SH.unflatten, chunk = SH.chunk, split = SH.split,
  norm = MATH.norm, scatter = SEL.scatter, argsort = SEL.argsort, flip = SEL.flip,
  roll = SEL.roll, repeat_interleave = SEL.repeat_interleave, outer = MATH.outer,
  allclose = MATH.allclose,
}
-- functions of qkv only
local FACTORIES = {
  zeros_like = like("zeros_like", qkv.zeros), ones_like = like("ones_like", qkv.ones),
  empty_like = like("empty_like", qkv.zeros),     -- no uninitialised memory: zeros
  full_like = F.full_like, rand_like = like("rand_like", qkv.rand, true),
  randn_like = like("randn_like", qkv.randn, true), randint = F.randint, randperm = F.randperm,
  linspace = F.linspace, logspace = F.logspace, manual_seed = F.manual_seed,
}
-- methods only
local METHODS = {
  scatter_ = SEL.scatter_,
  half = function(x) tensor_arg(x, "x"); return x:to("float16") end,
  bfloat16 = function(x) tensor_arg(x, "x"); return x:to("bfloat16") end,
  new_zeros = new_factory("new_zeros"), new_ones = new_factory("new_ones"),
  new_empty = new_factory("new_empty"), new_full = new_factory("new_full", true),
}

local methods = qkv._methods     -- the tensor methods (bindings/lqkv.c)
for name, f in pairs(FUNCTIONS) do
  M[name] = public(name, f)
  rawset(qkv, name, M[name])
  rawset(methods, name, M[name])
end
for name, f in pairs(FACTORIES) do
  M[name] = public(name, f)
  rawset(qkv, name, M[name])
end
for name, f in pairs(METHODS) do
  M[name] = public(name, f)
  rawset(methods, name, M[name])
end

return M
