-- fakes_rules.lua: functions that break the rules of tests/fuzz/rules.lua
-- on purpose, each drawn as the qkv function it stands for (`as`), given
-- to the fuzzer with --extra by tests/bindings/test_fuzz.lua to check that each
-- class reports them. They do in Lua what a binding that breaks the rule
-- would do, so that they keep breaking it once qkv keeps it.
local qkv = qkv or require "qkv"

-- v truncated toward 0 and clamped to int64, NaN made 0: a conversion
-- that never raises
local function clamp(v)
  if v ~= v then return 0 end
  if v >= 2 ^ 63 then return math.maxinteger end
  if v < -2 ^ 63 then return math.mininteger end
  return math.tointeger(v >= 0 and math.floor(v) or math.ceil(v))
end

local function map(l, f)
  if type(l) ~= "table" then return f(l) end
  local out = {}
  for i, v in ipairs(l) do out[i] = map(v, f) end
  return out
end

local FLOAT = {float64 = true, float32 = true, float16 = true, bfloat16 = true}

local function long(f)
  return function(x)
    local ok, l = pcall(function() return FLOAT[x.dtype] and x:tolist() end)
    if not (ok and l) then error("long: x must be an open float tensor", 0) end
    return qkv.tensor(map(l, f), "int64")
  end
end

return {
  -- takes any option, known or not
  {name = "fake_rule.options", as = "qkv.nn.Linear",
   params = {{name = "d_in"}, {name = "d_out"}, {name = "opts", opt = true}},
   fn = function(d_in, d_out) return qkv.zeros(2, 2) end},
  -- keeps a parameter listed twice
  {name = "fake_rule.duplicates", as = "qkv.optim.SGD", params = {{name = "params"}, {name = "opts", opt = true}},
   fn = function() return {} end},
  -- p.grad = anything, kept nowhere
  {name = "fake_rule.grad", as = "Tensor.__newindex", params = {{name = "x"}, {name = "i"}, {name = "v"}},
   fn = function() end},
  -- NaN, inf and out of range clamped
  {name = "fake_rule.clamp", as = "Tensor:long", kind = "tensor", method = "long", params = {},
   accept = {"long"},
   fn = long(clamp)},
  -- in range, rounded rather than truncated
  {name = "fake_rule.round", as = "Tensor:long", kind = "tensor", method = "long", params = {},
   accept = {"long"},
   fn = long(function(v) return v == v and math.abs(v) < 2 ^ 62 and math.floor(v + 0.5) // 1 or 0 end)},
  -- an archive read without its CRCs
  {name = "fake_rule.crc", as = "qkv.loadz", params = {{name = "path"}},
   fn = function() return {a = qkv.zeros(3)} end},
  -- a header name cut at its NUL
  {name = "fake_rule.nul", as = "qkv.load_safetensors", params = {{name = "path"}},
   fn = function() return {a = qkv.zeros(2)} end},
  -- sizes whose product overflows taken for an empty tensor
  {name = "fake_rule.sizes", as = "qkv.zeros", params = {{name = "d1"}, {name = "d2"}, {name = "..."}},
   fn = function() return qkv.zeros(0) end},
  -- a shape table's items read, its keys (dtype, size, dtpye) left unread
  {name = "fake_rule.shapes", as = "qkv.ones", params = {{name = "d1"}, {name = "d2"}, {name = "..."}},
   fn = function(t)
     local s = {}
     if type(t) == "table" then for i = 1, rawlen(t) do s[i] = rawget(t, i) end end
     local ok, x = pcall(qkv.ones, s)
     return ok and x or qkv.ones(0)
   end},
  -- parameters() listing a tensor twice
  {name = "fake_rule.modules", as = "Module:parameters", kind = "module", method = "parameters", params = {},
   accept = {"parameters"},
   fn = function(m)
     local l = m:parameters()
     if #l > 0 then l[#l + 1] = l[1] end
     return l
   end},
  -- a wrapper that holds the module but not as its child: eval, to and
  -- parameters do not reach it
  {name = "fake_rule.ddp", as = "qkv.dist.DDP", params = {{name = "module"}}, accept = {"DDP"},
   fn = function(m)
     local w = qkv.nn.Identity()
     rawset(w, "module", m)
     return w
   end},
  -- a scheduler that takes any option and value, and methods called with '.'
  {name = "fake_rule.schedulers", as = "qkv.optim.lr_scheduler.StepLR",
   params = {{name = "opt"}, {name = "step_size"}, {name = "opts", opt = true}}, accept = {"StepLR"},
   fn = function(opt)
     return {step = function() end, get_last_lr = function() return {opt.lr} end}
   end},
  -- a hook handle whose remove() indexes its self: remove with '.' is
  -- "attempt to index a nil value"
  {name = "fake_rule.dotcall", as = "Tensor:register_post_accumulate_grad_hook", kind = "tensor",
   method = "register_post_accumulate_grad_hook", params = {{name = "fn"}},
   accept = {"register_post_accumulate_grad_hook"},
   fn = function(x, fn)
     local h = {hooks = {fn}}
     function h.remove(self) self.hooks[1] = nil end
     return h
   end},
}
