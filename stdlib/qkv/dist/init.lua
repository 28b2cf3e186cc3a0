-- dist/init.lua: qkv.dist, one script run by several processes (ranks) that
-- work together over MPI (Open MPI, through the module qkv.mpi), with
-- torch.distributed's names. `mpirun -np 4 build/qkv script.lua` starts
-- four ranks; `build/qkv script.lua` alone is a world of one, where every
-- collective is the identity and MPI is never started.
--
--   init()  rank()  world_size()  barrier()
--   all_reduce(t [, op])          in place; op "sum" (default), "mean", "max", "min"
--   broadcast(t, src)             in place, from rank src
--   all_gather(t) -> (world_size, ...), rank r's t at index r + 1
--   reduce_scatter(t [, op]) -> this rank's block of the reduction (first
--                                dim divided by the world size)
--   all_to_all(t, split_dim, cat_dim) -> t cut in world_size blocks along
--                                split_dim, block j sent to rank j, the
--                                blocks received joined along cat_dim
--   send(t, dst [, tag])  recv(t, src [, tag])   (recv fills t)
-- Each takes a last table {async_op = true}: it then returns a handle
-- whose :wait() finishes it (and returns what the call would have) and
-- :is_completed() says whether it has. Any dtype; a tensor that is not
-- contiguous, or not on the CPU, goes through a contiguous CPU copy. A
-- collective checks first that every rank called it with the same shape,
-- dtype and arguments: ranks that disagree get an error naming them, on
-- every rank. DDP (dist/ddp.lua) and the attentions split across ranks
-- (dist/attention.lua) are built on these.

local qkv = require "qkv"
local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

local M = {}
local mpi                                   -- qkv.mpi, once a launcher started us
local world = {rank = 0, size = 1, ready = false}
-- the library's files (dist/ddp.lua and the others add theirs): an error
-- raised in any of them points at the script's line that called in
local SOURCES = {[SOURCE] = true}

local function fail(fmt, ...)
  error(string.format(fmt, ...), caller(SOURCES, true))
end

---------------------------------------------------------------- the world

-- init(): joins the ranks mpirun started (idempotent; the first use of
-- any other function calls it)
local function start_world(fname)
  if world.ready then return end
  local ok, m = pcall(require, "qkv.mpi")
  if not ok then
    local why = tostring(m):gsub("^[^\n]-:%d+: ", ""):gsub("\n%s*", " ")
    fail("dist.%s: Open MPI is not available (%s); `make deps` installs libopenmpi-dev " ..
         "and openmpi-bin, then `make` builds build/lib/qkv/mpi.so", fname, why)
  end
  mpi = m
  if mpi.launched() then world.rank, world.size = mpi.init() end
  world.ready = true
end

function M.init() start_world("init") end

-- every call starts the world first; an error then names that call
local function ready(fname) if not world.ready then start_world(fname or "init") end end

function M.is_initialized() return world.ready end
function M.rank() ready("rank"); return world.rank end
function M.world_size() ready("world_size"); return world.size end

-- a handle for an operation started with {async_op = true}
local Work = {}
Work.__index = Work
Work.__name = "qkv.dist.Work"

function Work:wait()
  if self.finish then
    local f = self.finish
    self.finish = nil
    self.result = table.pack(f())
  end
  return table.unpack(self.result, 1, self.result.n)
end

function Work:is_completed()
  if self.finish == nil then return true end
  for _, r in ipairs(self.reqs) do if not r:test() then return false end end
  return true
end

require("qkv.methods").guard(Work, "work", "qkv.dist.Work")   -- work.wait() says so

-- the last argument's {async_op = ...}; returns whether it is set
local function async(fname, opts)
  if opts == nil then return false end
  if type(opts) ~= "table" then fail("dist.%s: options must be a table, got %s", fname, type(opts)) end
  for k in pairs(opts) do
    if k ~= "async_op" then fail("dist.%s: unknown option '%s' (it has async_op)", fname, tostring(k)) end
  end
  if opts.async_op ~= nil and type(opts.async_op) ~= "boolean" then
    fail("dist.%s: option 'async_op' must be a boolean, got %s", fname, type(opts.async_op))
  end
  return opts.async_op == true
end

-- runs finish() now, or hands it back as a Work waiting on reqs
local function run(is_async, reqs, finish)
  if not is_async then return finish() end
  return setmetatable({finish = finish, reqs = reqs}, Work)
end

-- MPI's call f(...): its nonblocking form for an async call (the list of
-- its request), else its blocking one, done when this returns ({})
local function start(is_async, f, ...)
  if is_async then return {f(...)} end
  local a = table.pack(...)
  a[a.n + 1] = true
  f(table.unpack(a, 1, a.n + 1))
  return {}
end

local function wait_all(reqs) for _, r in ipairs(reqs) do r:wait() end end

---------------------------------------------------------------- checks

local function checktensor(fname, t, i, what)
  if not qkv.is_tensor(t) then
    fail("dist.%s: bad argument #%d (%s: qkv.Tensor expected, got %s)", fname, i, what, type(t))
  end
  if not pcall(function() return t.ndim end) then
    fail("dist.%s: bad argument #%d (%s is a closed tensor)", fname, i, what)
  end
  return t
end

local function checkrank(fname, r, i, what)
  if math.type(r) ~= "integer" or r < 0 or r >= world.size then
    fail("dist.%s: bad argument #%d (%s must be a rank, an integer in [0, %d], got %s)",
         fname, i, what, world.size - 1, tostring(r))
  end
  return r
end

local DTYPES = {float32 = 1, float64 = 2, int64 = 3, bool = 4, int32 = 5, float16 = 6, bfloat16 = 7}
local NAMES = {}
for k, v in pairs(DTYPES) do NAMES[v] = k end
local OPCODE, OPNAME = {sum = 1, mean = 2, max = 3, min = 4}, {"sum", "mean", "max", "min"}
local MAXDIM, CALLS = 8, {}
for i, f in ipairs({"all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all",
                    "barrier", "send"}) do CALLS[f], CALLS[i] = i, f end

-- what a call is, as numbers every rank can compare: the function, the
-- tensor's dtype and shape, and up to 3 arguments
local function describe(fname, t, a, b, c)
  local d = {CALLS[fname] or 0, t and DTYPES[t.dtype] or 0, t and t.ndim or -1}
  for i = 1, MAXDIM do d[3 + i] = t and t.shape[i] or -1 end
  d[MAXDIM + 4], d[MAXDIM + 5], d[MAXDIM + 6] = a or 0, b or 0, c or 0
  return d
end

local function shape_text(d)
  if d[3] < 0 then return "" end
  local s = {}
  for i = 1, d[3] do s[i] = tostring(d[3 + i]) end
  return ("%s (%s%s)"):format(NAMES[d[2]] or "?", table.concat(s, ", "), d[3] == 1 and "," or "")
end

local function call_text(d, args)
  local s = shape_text(d)
  if d[1] ~= d.want then return CALLS[d[1]] .. (s ~= "" and " on " .. s or "") end
  local extra = {}
  for i, name in ipairs(args or {}) do
    local v = d[MAXDIM + 3 + i]
    extra[#extra + 1] = name == "op" and ("op %q"):format(OPNAME[v] or "?") or ("%s %s"):format(name, v)
  end
  if #extra > 0 then s = s .. (s ~= "" and ", " or "") .. table.concat(extra, ", ") end
  return s
end

-- what a rank checks with the others, as the first of its numbers: a
-- collective here, a ring or Ulysses attention (dist/attention.lua), or
-- the end of its script (qkv.mpi's check as the world ends, with its own
-- number: ENDED in lmpi.c). A rank's numbers in another's check are told
-- by KINDS[kind](row): what that rank did, in words
local KIND = {collective = 1, ring_attention = 2, ulysses_attention = 3, ended = 4, refused = 5}
local KINDS = {}

-- nil when every rank passed the same numbers d (at most 63 integers)
-- for the same kind of check (default "collective"), else the ranks
-- grouped by what they passed, in rank order: {{key = text, ranks = "rank
-- 1" or "ranks 0, 2", own = true}, ...}; key is text(row) for the rows of
-- this kind (own), else what KINDS says that rank did ("called
-- all_reduce on ...", "ended its script")
local function differ(d, text, kind)
  if world.size == 1 then return nil end
  local k = KIND[kind or "collective"]
  local same, rows = mpi.same({k, table.unpack(d)})
  if same then return nil end
  local groups, order = {}, {}
  for r = 0, world.size - 1 do
    local row = rows[r + 1]
    local rk = table.remove(row, 1)
    local own = rk == k
    local key = own and text(row) or KINDS[rk] and KINDS[rk](row) or "did something else"
    key = (own and "+" or "-") .. key
    if not groups[key] then groups[key] = {}; order[#order + 1] = key end
    table.insert(groups[key], r)
  end
  for i, key in ipairs(order) do
    local rs = groups[key]
    order[i] = {key = key:sub(2), own = key:sub(1, 1) == "+",
                ranks = ("rank%s %s"):format(#rs > 1 and "s" or "", table.concat(rs, ", "))}
  end
  return order
end

KINDS[KIND.collective] = function(row) return "called " .. call_text(row) end
local function attention(name)
  return function(row)
    return ("called %s with %s"):format(name, require("qkv.dist.attention")._blocks_text(row))
  end
end
KINDS[KIND.ring_attention] = attention("ring_attention")
KINDS[KIND.ulysses_attention] = attention("ulysses_attention")
KINDS[KIND.ended] = function() return "ended its script" end
KINDS[KIND.refused] = function(row)
  return ("raised an error on its own arguments to %s"):format(CALLS[row[1]] or "the call")
end

-- f(...)'s results: a collective's checks of its own arguments, so that
-- an error in them on some ranks is an error on every rank. A rank whose
-- checks fail still takes part in the agreement (as "refused"), then
-- raises its own error; the others' agree sees it and raises theirs. A
-- rank that raised before agreeing (caught by pcall) met the others' next
-- collective with its own: the ranks out of step, and their sums wrong
local function checked(fname, f, ...)
  local r = table.pack(pcall(f, ...))
  if r[1] then return table.unpack(r, 2, r.n) end
  differ(describe(fname), function() return "" end, "refused")
  error(r[2], 0)
end
M._checked = checked

-- every rank made this call alike, or an error on every rank that names
-- who did what (args: the names of the numbers a, b, c, for the message)
local function agree(fname, t, args, a, b, c)
  local groups = differ(describe(fname, t, a, b, c), function(row)
    row.want = CALLS[fname]
    return call_text(row, args)
  end)
  if not groups then return end
  local parts = {}
  for i, g in ipairs(groups) do
    local did = not g.own and g.key or g.key ~= "" and "called it with " .. g.key or "called it"
    parts[i] = ("%s %s"):format(g.ranks, did)
  end
  fail("dist.%s: the ranks disagree: %s", fname, table.concat(parts, "; "))
end

-- t as MPI reads it: t itself if contiguous on the CPU, else a copy that
-- back() writes into t when the call is done
local function stage(t)
  if t.device == "cpu" and t:is_contiguous() then return t, false end
  return t:to("cpu"):contiguous(), true
end

local function back(t, s, staged) if staged then t:copy_(s) end end

-- an op's name as MPI takes it for this dtype, or an error
local REDUCE = {sum = "sum", mean = "sum", max = "max", min = "min"}
local function reduce_op(fname, op, dtype, i)
  if op == nil then op = "sum" end
  if type(op) ~= "string" or not REDUCE[op] then
    fail("dist.%s: bad argument #%d (op must be \"sum\", \"mean\", \"max\" or \"min\", got %s)",
         fname, i, type(op) == "string" and ("%q"):format(op) or type(op))
  end
  local float = dtype == "float32" or dtype == "float64" or dtype == "float16" or dtype == "bfloat16"
  if op == "mean" and not float then
    fail("dist.%s: op \"mean\" needs a float tensor, t is %s", fname, dtype)
  end
  if dtype == "bool" then return op, (op == "min" and "land" or "lor") end
  return op, REDUCE[op]
end


---------------------------------------------------------------- collectives

function M.barrier(opts)
  ready("barrier")
  local is_async = checked("barrier", async, "barrier", opts)
  agree("barrier")
  if world.size == 1 then return run(is_async, {}, function() end) end
  local rs = start(is_async, mpi.barrier)
  return run(is_async, rs, function() wait_all(rs) end)
end

function M.all_reduce(t, op, opts)
  ready("all_reduce")
  local how, mop, is_async = checked("all_reduce", function()
    checktensor("all_reduce", t, 1, "t")
    local h, m = reduce_op("all_reduce", op, t.dtype, 2)
    return h, m, async("all_reduce", opts)
  end)
  agree("all_reduce", t, {"op"}, OPCODE[how])
  if world.size == 1 then return run(is_async, {}, function() return t end) end
  local s, staged = stage(t)
  local rs = start(is_async, mpi.allreduce, s, mop)
  return run(is_async, rs, function()
    wait_all(rs)
    if how == "mean" then s:div_(world.size) end
    back(t, s, staged)
    return t
  end)
end

function M.broadcast(t, src, opts)
  ready("broadcast")
  local is_async = checked("broadcast", function()
    checktensor("broadcast", t, 1, "t")
    checkrank("broadcast", src, 2, "src")
    return async("broadcast", opts)
  end)
  agree("broadcast", t, {"src"}, src)
  if world.size == 1 then return run(is_async, {}, function() return t end) end
  local s, staged = stage(t)
  local rs = start(is_async, mpi.bcast, s, src)
  return run(is_async, rs, function()
    wait_all(rs)
    back(t, s, staged)
    return t
  end)
end

local function on_device(x, device) return device == "cpu" and x or x:to(device) end

function M.all_gather(t, opts)
  ready("all_gather")
  local is_async = checked("all_gather", function()
    checktensor("all_gather", t, 1, "t")
    if t.ndim >= MAXDIM then
      fail("dist.all_gather: t has %d dims, and the result (world_size, ...) would have %d, " ..
           "more than a tensor's %d", t.ndim, t.ndim + 1, MAXDIM)
    end
    return async("all_gather", opts)
  end)
  agree("all_gather", t)
  local shape = {world.size}
  for i = 1, t.ndim do shape[i + 1] = t.shape[i] end
  if world.size == 1 then
    return run(is_async, {}, function() return t:contiguous():view(table.unpack(shape)):clone() end)
  end
  local s = stage(t)
  local out = qkv.zeros(shape, t.dtype)
  local rs = start(is_async, mpi.allgather, s, out)
  return run(is_async, rs, function()
    wait_all(rs)
    return on_device(out, t.device)
  end)
end

function M.reduce_scatter(t, op, opts)
  ready("reduce_scatter")
  local how, mop, is_async = checked("reduce_scatter", function()
    checktensor("reduce_scatter", t, 1, "t")
    local h, m = reduce_op("reduce_scatter", op, t.dtype, 2)
    local a = async("reduce_scatter", opts)
    if t.ndim < 1 or t.shape[1] % world.size ~= 0 then
      fail("dist.reduce_scatter: t's first dimension (%s) must divide among the %d ranks",
           t.ndim < 1 and "none: t is a scalar" or tostring(t.shape[1]), world.size)
    end
    return h, m, a
  end)
  agree("reduce_scatter", t, {"op"}, OPCODE[how])
  local shape = {}
  for i = 1, t.ndim do shape[i] = t.shape[i] end
  shape[1] = shape[1] // world.size
  if world.size == 1 then return run(is_async, {}, function() return t:clone() end) end
  local s = stage(t)
  local out = qkv.zeros(shape, t.dtype)
  local rs = start(is_async, mpi.reduce_scatter, s, out, mop)
  return run(is_async, rs, function()
    wait_all(rs)
    if how == "mean" then out:div_(world.size) end
    return on_device(out, t.device)
  end)
end

local function checkdim(fname, d, i, what, t)
  if math.type(d) ~= "integer" or d == 0 or d > t.ndim or d < -t.ndim then
    fail("dist.%s: bad argument #%d (%s must be a dimension of t, in [1, %d] or [-%d, -1], got %s)",
         fname, i, what, t.ndim, t.ndim, tostring(d))
  end
  return d < 0 and t.ndim + 1 + d or d
end

-- x with dimension `from` moved to place `to`, the others in order
local function movedim(x, from, to)
  local order = {}
  for i = 1, x.ndim do if i ~= from then order[#order + 1] = i end end
  table.insert(order, to, from)
  return x:permute(table.unpack(order))
end

function M.all_to_all(t, split_dim, cat_dim, opts)
  ready("all_to_all")
  local sd, cd, is_async = checked("all_to_all", function()
    checktensor("all_to_all", t, 1, "t")
    local s1 = checkdim("all_to_all", split_dim, 2, "split_dim", t)
    local c1 = checkdim("all_to_all", cat_dim, 3, "cat_dim", t)
    local a = async("all_to_all", opts)
    if t.shape[s1] % world.size ~= 0 then
      fail("dist.all_to_all: t's dimension %d (%d) must divide among the %d ranks", s1,
           t.shape[s1], world.size)
    end
    return s1, c1, a
  end)
  agree("all_to_all", t, {"split_dim", "cat_dim"}, sd, cd)
  local x = movedim(t, sd, 1):to("cpu"):contiguous()
  local c = t.shape[sd] // world.size
  local function join(blocks)
    local parts = {}
    for r = 0, world.size - 1 do parts[r + 1] = movedim(blocks:narrow(1, r * c + 1, c), 1, sd) end
    return on_device(qkv.cat(parts, cd), t.device)
  end
  if world.size == 1 then return run(is_async, {}, function() return join(x) end) end
  local shape = {}
  for i = 1, x.ndim do shape[i] = x.shape[i] end
  local out = qkv.zeros(shape, t.dtype)
  local rs = start(is_async, mpi.alltoall, x, out)
  return run(is_async, rs, function()
    wait_all(rs)
    return join(out)
  end)
end

---------------------------------------------------------------- point to point

-- a message is a header (the call, dtype and shape, as numbers) with tag
-- 2 tag, then the data with tag 2 tag + 1, so that recv can say what came
local function checktag(fname, tag, i)
  if tag == nil then return 0 end
  if math.type(tag) ~= "integer" or tag < 0 or tag > 1 << 20 then
    fail("dist.%s: bad argument #%d (tag must be an integer in [0, 2^20], got %s)", fname, i,
         tostring(tag))
  end
  return tag
end

local function not_self(fname, peer, what)
  if peer == world.rank then
    fail("dist.%s: %s is this rank (%d); a rank does not message itself", fname, what, peer)
  end
end

-- what send and recv check first; their tag, and whether the call is async
local function p2p(fname, t, peer, tag, opts, what, verb)
  ready(fname)
  checktensor(fname, t, 1, "t")
  if world.size == 1 then fail("dist.%s: a world of one has no rank to %s", fname, verb) end
  checkrank(fname, peer, 2, what)
  not_self(fname, peer, what)
  return checktag(fname, tag, 3), async(fname, opts)
end

function M.send(t, dst, tag, opts)
  local is_async
  tag, is_async = p2p("send", t, dst, tag, opts, "dst", "send to")
  local s = stage(t)
  local h = mpi.isend(qkv.tensor(describe("send", t), "int64"), dst, 2 * tag)
  local r = mpi.isend(s, dst, 2 * tag + 1)
  return run(is_async, {h, r}, function()
    h:wait()
    r:wait()
  end)
end

function M.recv(t, src, tag, opts)
  local is_async
  tag, is_async = p2p("recv", t, src, tag, opts, "src", "receive from")
  local mine = describe("send", t)
  local head = qkv.zeros({#mine}, "int64")
  local h = mpi.irecv(head, src, 2 * tag)
  local s, staged = stage(t)
  local r = mpi.irecv(s, src, 2 * tag + 1)
  return run(is_async, {h, r}, function()
    h:wait()
    local got = head:tolist()
    local same = true
    for i = 1, #mine do same = same and got[i] == mine[i] end
    if not same then
      pcall(r.wait, r)       -- the data that did not fit is dropped
      fail("dist.recv: rank %d sent %s, but t is %s", src, shape_text(got), shape_text(mine))
    end
    r:wait()
    back(t, s, staged)
    return t
  end)
end

---------------------------------------------------------------- the rest

M.DDP = function(...) return require("qkv.dist.ddp").DDP(...) end
M.ring_attention = function(...) return require("qkv.dist.attention").ring_attention(...) end
M.ulysses_attention = function(...) return require("qkv.dist.attention").ulysses_attention(...) end

-- for the modules built on this one: the raw module, the checks, and
-- their error function, which names the script's line
M._world = world
M._mpi = function(fname) ready(fname); return mpi end
M._checktensor = checktensor
M._fail = fail
M._differ = differ
M._dtypes, M._dtype_names = DTYPES, NAMES
function M._library(source) SOURCES[source] = true end

-- qkv.dist.allreduce is an error naming all_reduce, not nil
return qkv._strict(M, "qkv.dist")
