-- autograd.lua: qkv.autograd, reverse-mode differentiation with PyTorch's
-- names. Loaded the first time a tensor asks for it (x:requires_grad_(),
-- qkv.no_grad, qkv.grad, a qkv.nn module's weights): until then no op pays
-- for it. Once loaded, the differentiable functions and methods of qkv
-- (stdlib/qkv/derivatives.lua has their rules) are wrapped: a call with an
-- input that requires grad, while grad mode is on, runs the plain C op and
-- records a node that knows how to send the output's gradient back to the
-- inputs; any other call goes straight to the C op.
--
--   x:requires_grad_([flag]) -> x     x.requires_grad, x.is_leaf, x.grad
--   y:backward([grad])                x.grad_fn (prints as <MulBackward0>)
--   qkv.no_grad(f, ...)  qkv.enable_grad(f, ...)
--   qkv.grad(f, inputs) -> {gradient of f(inputs...) for each input}
--   x:register_post_accumulate_grad_hook(fn) -> handle (handle:remove())
--   require("qkv.autograd").queue_callback(fn)   (inside a backward)
--
-- The graph hangs from the tensors (a weak-keyed table, so it is freed with
-- them). Each node keeps the versions of the tensors it saved: backward
-- after an in-place write to one of them is an error naming the node.

local qkv = require "qkv"
local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

local A = {}
-- tensor -> {leaf=, grad=, node=, slot=, hooks=}: hooks, a leaf's
-- post-accumulate-grad hooks in registration order
local meta = setmetatable({}, {__mode = "k"})
local callbacks = nil   -- the running backward's queue_callback list, nil outside one

local function fail(fmt, ...)
  error(string.format(fmt, ...), caller(SOURCE, true))
end

local is_tensor = qkv.is_tensor

-- an argument past the n that fname takes is an error, not ignored
-- (y:backward(nil, {create_graph = true}) would else give a first-order
-- gradient as if it had been understood), as the bindings' qkvL_noextra
local function noextra(fname, n, ...)
  local msg = qkv._extra(fname, n, ...)
  if msg then fail("%s", msg) end
end

---------------------------------------------------------------- state

-- whether x takes part in the graph: a leaf that requires grad, or the
-- output of a recorded op
function A.tracked(x)
  local m = is_tensor(x) and meta[x]
  return m and (m.leaf or m.node) and true or false
end

-- grad mode is the running coroutine's (bindings/lauxgrad.c keeps it)
function A.enabled() return qkv._grad_mode() end

-- the level of the first frame outside this file and derivatives.lua (and
-- C), for errors that should point at the script's line
local function user_level()
  local level = 3
  while true do
    local info = debug.getinfo(level, "S")
    if info == nil then return level - 1 end
    if info.what ~= "C" and not info.source:match("qkv/autograd%.lua$")
       and not info.source:match("qkv/derivatives%.lua$") then
      return level - 1
    end
    level = level + 1
  end
end

-- f(...) with grad mode `mode` in this coroutine, the mode restored after
-- (a coroutine that yields in f and is never resumed keeps it to itself).
-- Its error names its place once: one raised in qkv's library (or with
-- no place, by a binding that f is) is moved to the script's line; one
-- that names a place already (the script's own, or one that fail() put
-- at the script's line) is passed on as it is.
local function with_mode(mode, f, ...)
  local was = qkv._grad_mode(mode)
  local r = table.pack(pcall(f, ...))
  qkv._grad_mode(was)
  if not r[1] then
    local msg = r[2]
    if type(msg) == "string" then
      local bare, lib = msg:gsub("^[^\n]-qkv/[%w_/]+%.lua:%d+: ", "")
      if lib > 0 or not msg:find("^[^\n]-:%d+: ") then error(bare, user_level()) end
    end
    error(msg, 0)
  end
  return table.unpack(r, 2, r.n)
end

-- orig (a binding) as a rule calls it: with grad mode off, so that it runs
-- its kernel rather than its rule again
function A.raw(orig)
  return function(...) return with_mode(false, orig, ...) end
end

function A.no_grad(f, ...)
  if type(f) ~= "function" then fail("no_grad: bad argument #1 (function expected, got %s)", type(f)) end
  return with_mode(false, f, ...)
end

function A.enable_grad(f, ...)
  if type(f) ~= "function" then fail("enable_grad: bad argument #1 (function expected, got %s)", type(f)) end
  return with_mode(true, f, ...)
end

function A.requires_grad_(x, flag, ...)
  noextra("requires_grad_", 2, x, flag, ...)
  if not is_tensor(x) then fail("requires_grad_: bad argument #1 (qkv.Tensor expected, got %s)", type(x)) end
  if flag == nil then flag = true end
  if type(flag) ~= "boolean" then fail("requires_grad_: flag must be a boolean, got %s", type(flag)) end
  local open, dtype = pcall(function() return x.dtype end)
  if not open then fail("requires_grad_: bad argument #1 (tensor was closed)") end
  local m = meta[x]
  if m and m.node then
    fail("requires_grad_: x is the result of %s, not a leaf; use x:detach():requires_grad_()",
         m.node.name)
  end
  if flag and dtype ~= "float32" and dtype ~= "float64" and dtype ~= "float16"
     and dtype ~= "bfloat16" then
    fail("requires_grad_: only float tensors can require grad, x is %s", dtype)
  end
  if flag then meta[x] = m or {}; meta[x].leaf = true
  elseif m then m.leaf = nil end
  return x
end

---------------------------------------------------------------- recording

-- a node of the graph: name, backward(g) -> gradients of the inputs (nil
-- where none), and for each input the edge its gradient takes
local Node = {}
Node.__index = Node
Node.__tostring = function(n) return "<" .. n.name .. "0>" end   -- PyTorch's names

-- records that out = op(inputs...): `inputs` is a list of tensors (or nil
-- entries), `saved` the tensors backward reads, whose versions are kept.
-- `out` may be a list of the op's outputs (attention's out and weights):
-- then backward gets one gradient for each (nil for an output no path
-- from the root used), and each output's slot says which it is
function A.record(name, out, inputs, backward, saved)
  local outs = is_tensor(out) and {out} or out
  local node = setmetatable({name = name, backward = backward, edges = {}, saved = {},
                             nout = #outs}, Node)
  for i, x in pairs(inputs) do
    local m = is_tensor(x) and meta[x]
    if m and m.node then
      node.edges[i] = {node = m.node, slot = m.slot, dtype = x.dtype, shape = x.shape}
    elseif m and m.leaf then node.edges[i] = {leaf = x, shape = x.shape} end
  end
  for _, x in pairs(saved or {}) do
    if is_tensor(x) then node.saved[#node.saved + 1] = {x, x:_version()} end
  end
  node.n = #inputs
  -- an output that is an input itself (x:contiguous() of a contiguous x
  -- returns x) keeps what it was: made the node's, a leaf stopped being
  -- one and its own gradient went to the node's edge into itself
  local same = {}
  for _, x in pairs(inputs) do if is_tensor(x) then same[x] = true end end
  for slot, y in ipairs(outs) do
    if not same[y] then meta[y] = {node = node, slot = slot} end
  end
  return out
end

-- whether any argument (tensors, or tensors in a list) is tracked
function A.any(...)
  for i = 1, select("#", ...) do
    local a = select(i, ...)
    if is_tensor(a) then
      if A.tracked(a) then return true end
    elseif type(a) == "table" and getmetatable(a) == nil then
      for _, v in ipairs(a) do if A.tracked(v) then return true end end
    end
  end
  return false
end

---------------------------------------------------------------- backward

-- nodes reachable from `root`, each after every node that feeds it
local function topo(root)
  local order, seen = {}, {}
  local function visit(n)
    if seen[n] then return end
    seen[n] = true
    for _, e in pairs(n.edges) do if e.node then visit(e.node) end end
    order[#order + 1] = n
  end
  visit(root)
  return order
end

local function accumulate(a, g) return a and a + g or g end

-- g as a leaf's first gradient: a tensor of its own, in dtype. A rule may
-- hand the gradient it got on unchanged (x + y gives g to both, x + 0 the
-- root's own grad), so the tensor may be another leaf's .grad too, or the
-- caller's grad argument: x.grad:mul_(3) would change y.grad, and the
-- caller writing its grad would change x.grad. PyTorch's AccumulateGrad
-- takes a copy where the gradient is shared.
local function own(g, dtype)
  local c = g:to(dtype)
  if rawequal(c, g) then c = g:clone() end
  return c
end

local function check_saved(n)
  if n.freed then
    fail("backward: %s's graph was freed by an earlier backward; call the forward again", n.name)
  end
  for _, s in ipairs(n.saved) do
    if s[1]:_version() ~= s[2] then
      fail("backward: a tensor %s saved was modified in place (version %d, now %d)",
           n.name, s[2], s[1]:_version())
    end
  end
end

-- the graph edges into each leaf over the nodes of `order`
local function leaf_edges(order)
  local count = {}
  for _, n in ipairs(order) do
    for _, e in pairs(n.edges) do
      if e.leaf then count[e.leaf] = (count[e.leaf] or 0) + 1 end
    end
  end
  return count
end

-- runs the graph of y backward with dy; the leaves' gradients go to sink
-- (a function(leaf, g)); frees the graph. A node's gradients are kept by
-- output slot, so that one with several outputs gets each's. on_leaf
-- (optional) is called with each leaf that got a gradient, once, after the
-- node that holds its last edge went back (a node goes back, gradient or
-- none, in the order of topo, so a leaf's count of edges reaches 0 there).
-- An error stops it where it is: the nodes gone back are freed, the rest
-- are not, the leaves keep what sink gave them
local function run(y, dy, sink, on_leaf)
  local root = meta[y].node
  local grads = {[root] = {[meta[y].slot] = dy}}
  local order = topo(root)
  local pending, got = on_leaf and leaf_edges(order), {}
  for i = #order, 1, -1 do
    local n = order[i]
    local g = grads[n]
    grads[n] = nil
    check_saved(n)
    local gs
    if g ~= nil then
      gs = table.pack(n.backward(table.unpack(g, 1, n.nout)))
      for k, e in pairs(n.edges) do
        local gk = gs[k]
        if gk ~= nil then
          -- a gradient in its input's dtype, as PyTorch's engine casts it
          -- (x + y of float32 and bfloat16 gives y a bfloat16 one)
          if e.dtype and is_tensor(gk) and gk.dtype ~= e.dtype then gk = gk:to(e.dtype) end
          -- and of its input's shape, as PyTorch's engine checks it: a
          -- backward (a custom one through A.record) that gave another
          -- shape was summed into the input's gradient as it came
          if is_tensor(gk) and gk.shape ~= e.shape then
            fail("backward: %s gave a gradient of shape %s for its input %d, which is %s",
                 n.name, tostring(gk.shape), k, tostring(e.shape))
          end
          if e.node then
            local to = grads[e.node] or {}
            grads[e.node] = to
            to[e.slot] = accumulate(to[e.slot], gk)
          else sink(e.leaf, gk) end
        end
      end
    end
    n.freed, n.saved, n.backward = true, {}, nil
    if pending then
      for k, e in pairs(n.edges) do
        local x = e.leaf
        if x then
          if gs and gs[k] ~= nil then got[x] = true end
          pending[x] = pending[x] - 1
          if pending[x] == 0 and got[x] then on_leaf(x) end
        end
      end
    end
  end
end

-- f(...) with `queue` as the running backward's callback list (nil: no
-- backward runs), the one before restored however f ends
local function with_callbacks(queue, f, ...)
  local outer = callbacks
  callbacks = queue
  local r = table.pack(pcall(f, ...))
  callbacks = outer
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

-- x's post-accumulate-grad hooks, those there when it fires, in order
local function post_accumulate(x)
  if not meta[x].leaf then return end   -- requires_grad_(false) since the forward
  local list = meta[x].hooks
  if list == nil or #list == 0 then return end
  for _, h in ipairs(table.move(list, 1, #list, 1, {})) do
    if not h.removed then h.fn(x) end
  end
end

-- backward's graph walk, then the callbacks queued while it ran, in order
-- (one queued by a callback runs after it)
local function run_backward(y, dy, sink, queue)
  run(y, dy, sink, post_accumulate)
  local i = 1
  while queue[i] ~= nil do
    queue[i]()
    i = i + 1
  end
end

local function default_grad(y, grad, who)
  if grad ~= nil then
    if not is_tensor(grad) then fail("%s: grad must be a tensor, got %s", who, type(grad)) end
    if not pcall(function() return grad.ndim end) then fail("%s: grad is a closed tensor", who) end
    if grad.shape ~= y.shape then
      fail("%s: grad is %s but the output is %s", who, tostring(grad.shape), tostring(y.shape))
    end
    return grad:to(y.dtype)
  end
  if y:numel() ~= 1 then
    fail("%s: the output has %d elements; a gradient (grad) is needed unless it has 1",
         who, y:numel())
  end
  return qkv.ones(y.shape, y.dtype, y.device)
end

function A.backward(y, grad, ...)
  noextra("backward", 2, y, grad, ...)
  if not is_tensor(y) then fail("backward: bad argument #1 (qkv.Tensor expected, got %s)", type(y)) end
  local m = meta[y]
  if not (m and m.node) then
    if m and m.leaf then fail("backward: y is a leaf; there is nothing to go back through") end
    fail("backward: y does not require grad (no input of the ops that made it did)")
  end
  local dy = default_grad(y, grad, "backward")
  local queue = {}
  with_callbacks(queue, with_mode, false, run_backward, y, dy, function(leaf, g)
    local lm = meta[leaf]
    -- a leaf set to requires_grad_(false) after the forward gets nothing,
    -- as PyTorch's AccumulateGrad gives nothing to a variable that no
    -- longer requires grad
    if not lm.leaf then return end
    lm.grad = lm.grad and lm.grad + g:to(leaf.dtype) or own(g, leaf.dtype)
  end, queue)
end

-- the inputs (detached copies) of each qkv.grad whose f is running
local grad_inputs = setmetatable({}, {__mode = "k"})

-- whether the graph from node reaches one of them
local function reaches_enclosing(node)
  for _, n in ipairs(topo(node)) do
    for _, e in pairs(n.edges) do
      if e.leaf and grad_inputs[e.leaf] then return true end
    end
  end
  return false
end

-- whether x is one of them, or is made from one by a recorded op
local function from_enclosing(x)
  local m = meta[x]
  if not m then return false end
  if m.leaf then return grad_inputs[x] ~= nil end
  return m.node ~= nil and reaches_enclosing(m.node)
end

-- qkv.grad inside another's f, with grad mode on, on what the outer one
-- differentiates: its result would need create_graph (a graph of the
-- backward), which qkv.grad does not make, so the outer one would take it
-- as a constant and give a zero second derivative where PyTorch's is not
local NESTED = "grad: %s is differentiated by an enclosing qkv.grad: a gradient of a "
  .. "gradient needs create_graph, which qkv.grad does not have (the outer gradient "
  .. "would miss this path: a zero second derivative); call this qkv.grad under "
  .. "qkv.no_grad to take its result as a constant"

-- qkv.grad(f, inputs [, grad]): the gradients of f(inputs...) (one output)
-- with respect to each input, without touching their .grad
function A.grad(f, inputs, grad, ...)
  noextra("grad", 3, f, inputs, grad, ...)
  if type(f) ~= "function" then fail("grad: bad argument #1 (function expected, got %s)", type(f)) end
  if type(inputs) ~= "table" then fail("grad: bad argument #2 (list of tensors expected, got %s)", type(inputs)) end
  local bad = qkv._checklist("grad", inputs, "inputs")   -- tensors and nothing else
  if bad then fail("%s", bad) end
  local nested = next(grad_inputs) ~= nil and A.enabled()
  local xs = {}
  for i = 1, #inputs do          -- a nil among them is an error, not the list's end
    local x = inputs[i]
    if not is_tensor(x) then fail("grad: input %d is a %s, not a tensor", i, type(x)) end
    if nested and from_enclosing(x) then fail(NESTED, "input " .. i) end
    xs[i] = x:detach()
    A.requires_grad_(xs[i])
  end
  for _, x in ipairs(xs) do grad_inputs[x] = true end
  local ok, y = pcall(with_mode, true, f, table.unpack(xs))
  for _, x in ipairs(xs) do grad_inputs[x] = nil end
  if not ok then error(y, 0) end
  if not is_tensor(y) then fail("grad: f must return a tensor, got %s", type(y)) end
  local out = {}
  if A.tracked(y) and meta[y].node then
    if nested and reaches_enclosing(meta[y].node) then   -- a tensor f read from the enclosing graph
      fail(NESTED, "a tensor f reads")
    end
    local dy = default_grad(y, grad, "grad")
    with_callbacks(nil, with_mode, false, run, y, dy, function(leaf, g)
      for i, x in ipairs(xs) do
        if rawequal(x, leaf) then out[i] = out[i] and out[i] + g or own(g, g.dtype) end
      end
    end)
  end
  -- f returned one of its inputs itself: its gradient is grad (ones), as
  -- torch.autograd.grad(x, x) gives grad_outputs, where it came out zero
  for i, x in ipairs(xs) do
    if rawequal(x, y) then out[i] = own(default_grad(y, grad, "grad"), x.dtype) end
  end
  for i, x in ipairs(xs) do out[i] = out[i] or qkv.zeros(x.shape, x.dtype, x.device) end
  return out
end

---------------------------------------------------------------- hooks

-- what register_post_accumulate_grad_hook returns: handle:remove() takes
-- the hook off (a second remove does nothing), as torch's RemovableHandle
local Handle = {}
Handle.__index = Handle
Handle.__name = "qkv.autograd.RemovableHandle"

function Handle:remove()
  local h = self._hook
  if h.removed then return end
  h.removed = true
  for i, e in ipairs(self._list) do
    if e == h then table.remove(self._list, i) break end
  end
end

require("qkv.methods").guard(Handle, "handle", "hook handle")   -- handle.remove() says so

-- x:register_post_accumulate_grad_hook(fn): fn(x) in each backward, once
-- x.grad holds all that backward gives x (after its last edge)
function A.register_post_accumulate_grad_hook(x, fn, ...)
  noextra("register_post_accumulate_grad_hook", 2, x, fn, ...)
  local who = "register_post_accumulate_grad_hook"
  if not is_tensor(x) then fail("%s: bad argument #1 (qkv.Tensor expected, got %s)", who, type(x)) end
  if not pcall(function() return x.dtype end) then
    fail("%s: bad argument #1 (tensor was closed)", who)
  end
  local m = meta[x]
  if m and m.node then
    fail("%s: x is the result of %s, not a leaf; hooks go on leaves that require grad", who,
         m.node.name)
  end
  if not (m and m.leaf) then
    fail("%s: x does not require grad; call x:requires_grad_() first", who)
  end
  if type(fn) ~= "function" then fail("%s: bad argument #2 (function expected, got %s)", who, type(fn)) end
  m.hooks = m.hooks or {}
  local h = {fn = fn}
  m.hooks[#m.hooks + 1] = h
  return setmetatable({_hook = h, _list = m.hooks}, Handle)
end

-- queue_callback(fn): fn() once the running backward has gone through its
-- last node, before it returns (torch's Variable._execution_engine.queue_callback)
function A.queue_callback(fn)
  if type(fn) ~= "function" then
    fail("queue_callback: bad argument #1 (function expected, got %s)", type(fn))
  end
  if callbacks == nil then fail("queue_callback: no backward is running") end
  callbacks[#callbacks + 1] = fn
end

---------------------------------------------------------------- fields

function A.field(x, k)
  local m = meta[x]
  if k == "requires_grad" then return m ~= nil and (m.leaf or m.node) ~= nil end
  if k == "is_leaf" then return not (m and m.node) end
  if k == "grad" then return m and m.grad end
  if k == "grad_fn" then return m and m.node end
end

-- x.grad = g: nil, or a tensor of x's shape, dtype and device (PyTorch:
-- "assigned grad has data of a different size"), so that a step never
-- reads a number or a tensor that does not fit
function A.set_grad(x, g)
  if g ~= nil then
    if not is_tensor(g) then fail("grad: x.grad must be nil or a tensor, got a %s", type(g)) end
    local open = pcall(function() return g.ndim end)
    if not open then fail("grad: x.grad must be nil or a tensor, got a closed tensor") end
    if g.shape ~= x.shape or g.dtype ~= x.dtype or g.device ~= x.device then
      fail("grad: x is %s %s on %s but the grad assigned is %s %s on %s", x.dtype,
           tostring(x.shape), x.device, g.dtype, tostring(g.shape), g.device)
    end
  end
  local m = meta[x] or {}
  meta[x] = m
  m.grad = g
end

qkv._autograd(meta, require("qkv.derivatives").install(A), A.field, A.set_grad)

return qkv._strict(A, "qkv.autograd")      -- a misspelt name is an error, not nil
