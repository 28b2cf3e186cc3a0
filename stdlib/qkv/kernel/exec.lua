-- kernel/exec.lua: how qkv's Jupyter kernel runs a cell (stdlib/qkv/kernel.lua
-- has the protocol). A cell is a chunk as the REPL takes a line: a cell
-- that is one expression shows its value, and so does a last line that is
-- one (as IPython shows the last expression); a trailing ';' keeps it
-- quiet. Values show as the REPL prints them (text/plain), a small tensor
-- also as an HTML table. print, io.write and io.stdout/io.stderr are
-- streamed as they come, in batches (below); a qkv.plot call without
-- `file` shows a PNG (display_data, through the same cairo renderer),
-- qkv.display(x) shows any value explicitly and qkv.clear_output clears.
-- A cell that is `?expr` is help's page. Globals persist from cell to
-- cell, locals do not (as in the REPL).

local json = require "qkv.json"
local zmq = require "qkv.zmq"
local repl = require "qkv.repl"

local M = {}

local K          -- the kernel, for publishing
local current    -- {msg, silent} while a request's cell runs
local real = {stdout = io.stdout, stderr = io.stderr}

-- output ---------------------------------------------------------------

-- A cell's stream output waits in `pending` and goes as one stream
-- message LINGER seconds after its first byte (ipykernel's flush_interval;
-- the kernel's timer sends it even while the cell computes), once CHUNK
-- bytes wait, when the other stream writes (stdout and stderr keep their
-- order), and before any other message of the cell. So 51,200 prints are
-- a message or a few, not 51,200: those overflowed the iopub socket's
-- queue (1000 messages: libzmq's PUB drops past it) and most were lost.
-- ipykernel has no size bound; 1 MiB bounds the text held and keeps a
-- flood coming as it goes, and at 1 MiB a message a cell must print 1 GB
-- faster than the client reads before that queue drops any (at 64 KiB, a
-- 200 MB flood lost a quarter of its lines).
local LINGER, CHUNK = 0.2, 1 << 20
local clock = qkv.clock
local pending = {parts = {}, size = 0}
local inside = false    -- in emit or publish: the timer's flush comes back later

local function flush()
  if pending.size == 0 then return end
  local text = table.concat(pending.parts)
  pending.parts, pending.size = {}, 0
  K:publish("stream", {name = pending.name, text = text}, current.msg)
end

-- the timer's flush, from a hook at any instruction of the cell
local function on_time()
  if not current then return end
  if inside then K.flush_in(LINGER / 10, on_time) else flush() end
end

-- a message of the cell that is not a stream, after what it printed
local function publish(msg_type, content)
  if current.silent then return end
  inside = true
  flush()
  K:publish(msg_type, content, current.msg)
  inside = false
end

local function emit(name, text)
  if text == "" then return end
  if not current then
    real[name]:write(text)
    real[name]:flush()
    return
  end
  if current.silent then return end
  inside = true
  if pending.name ~= name then flush() end
  if pending.size == 0 then
    pending.since = clock()
    if K.flush_in then K.flush_in(LINGER, on_time) end
  end
  pending.name = name
  pending.parts[#pending.parts + 1] = text
  pending.size = pending.size + #text
  if pending.size >= CHUNK or clock() - pending.since >= LINGER then flush() end
  inside = false
end

-- io.stdout and io.stderr while the kernel runs: files that stream
local Stream = {__name = "FILE*"}
Stream.__index = Stream

function Stream:write(...)
  local parts = {}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) ~= "string" and type(v) ~= "number" then
      error(("bad argument #%d to 'write' (string expected, got %s)"):format(i, type(v)), 2)
    end
    parts[i] = tostring(v)
  end
  emit(self.name, table.concat(parts))
  return self
end

function Stream:flush() return self end
function Stream:setvbuf() return true end
function Stream:close() return nil, "cannot close standard file" end
function Stream:__tostring() return "file (" .. self.name .. ", streamed to Jupyter)" end

local function display(data, metadata)
  if current then
    publish("display_data", {data = data, metadata = metadata or {}, transient = {}})
  else
    emit("stdout", data["text/plain"] .. "\n")
  end
end

-- qkv.clear_output(wait): the cell's output so far goes (with wait, when
-- the next output comes, as IPython's clear_output)
local function clear_output(wait)
  if current then publish("clear_output", {wait = wait}) end
end

-- values as a MIME bundle ------------------------------------------------

local HTML_MAX = 400

local function cell(v)
  if math.type(v) == "float" then return ("%.4f"):format(v) end
  return tostring(v)
end

-- a small tensor (at most 2-D, 400 elements) as an HTML table
local function html(t)
  if not qkv.is_tensor(t) or t.ndim == 0 or t.ndim > 2 or t:numel() > HTML_MAX
     or t:numel() == 0 then
    return nil
  end
  local rows = t.ndim == 2 and t:tolist() or {t:tolist()}
  local out = {('<table class="qkv-tensor"><caption>%s %s%s</caption>')
               :format(tostring(t.shape), t.dtype, t.device == "cpu" and "" or " " .. t.device)}
  for _, r in ipairs(rows) do
    local tds = {}
    for j, v in ipairs(r) do tds[j] = '<td style="text-align:right">' .. cell(v) .. "</td>" end
    out[#out + 1] = "<tr>" .. table.concat(tds) .. "</tr>"
  end
  out[#out + 1] = "</table>"
  return table.concat(out)
end

local function bundle(...)
  local ok, text = pcall(repl._show, ...)
  local data = {["text/plain"] = ok and text or "(error printing the value: " .. tostring(text) .. ")"}
  if select("#", ...) == 1 then data["text/html"] = html((...)) end
  return data
end

-- a plot drawn as a PNG in place of the terminal (qkv.plot's display hook)
local function show_plot(fname, specs, opts)
  local png = require "qkv.plot.png"
  local path = os.tmpname()
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.file = path
  local ok, layout = pcall(png.figure, fname, specs, o)
  local f = io.open(path, "rb")
  local bytes = f and f:read("a")
  if f then f:close() end
  os.remove(path)
  if not ok then error(layout, 0) end
  display({["image/png"] = zmq.base64(bytes or ""),
           ["text/plain"] = ("<qkv.plot.%s: %dx%d PNG>"):format(fname, layout.width, layout.height)},
          {["image/png"] = {width = layout.width, height = layout.height}})
end

-- compiling and running ----------------------------------------------------

-- the chunk for a cell, whether what it returns shows, and whether a
-- trailing ';' asked for quiet
local function compile(code, n)
  local name = ("=In[%d]"):format(n)
  local body = code:gsub("%s+$", "")
  local quiet = body:sub(-1) == ";"
  if quiet then body = body:sub(1, -2) end
  local f = load("return " .. body, name, "t")
  if f then return f, true, quiet end
  local head, last = body:match("^(.*\n)([^\n]*)$")
  if last and last:find("%S") and not last:find("^%s*%-%-") then
    f = load(head .. "return " .. last, name, "t")
    if f then return f, true, quiet end
  end
  local err
  f, err = load(code, name, "t")
  if not f then return nil, err end
  return f, true, quiet             -- what a chunk returns shows too
end

M._compile = compile        -- for tests/cli/test_kernel.lua

-- the error as Jupyter shows it: a name, the message, and the traceback
-- of the cell's frames (the kernel's own are cut); docall gives the
-- message as the REPL shows it (error() has "(error object is a nil
-- value)"), or a bare string when its handler itself failed (memory)
local function describe(e)
  local msg = type(e) == "table" and e.error or tostring(e)
  local ename = msg:find("interrupted!?$") and "Interrupted" or "Error"
  local tb = {msg}
  if type(e) == "table" and type(e.traceback) == "string" then
    for line in e.traceback:gmatch("[^\n]+") do
      if line:find("kernel/exec.lua", 1, true) or line:find("^%s*%[C%]: in %?")
         or line:find("in field 'docall'", 1, true) then
        break
      end
      tb[#tb + 1] = line
    end
    if #tb == 2 then tb[2] = nil end               -- "stack traceback:" alone
  end
  return ename, msg, tb
end

-- the REPL's `?expr` text: help on the value of expr, else on the name;
-- nil and the REPL's words when there is none
function M.help_text(expr)
  expr = expr:match("^%s*(.-)%s*$")
  if expr == "" then return nil, "no name" end
  local doc = require "qkv.doc"
  local f = load("return " .. expr, "=?", "t")
  local ok, v = false, nil
  if f then ok, v = pcall(f) end
  if ok and v ~= nil then
    local text, msg = doc.text(v)
    if text then return text end
    return doc.text(expr) or nil, msg
  end
  return doc.text(expr)
end

-- a `?expr` cell, as the REPL's `?expr` line: help's text as a page
-- payload (as IPython's `obj?`; `?` alone is the general help), or the
-- REPL's words on stdout when there is none
local function help_page(expr)
  local text, msg
  if expr:find("%S") then text, msg = M.help_text(expr) else text = require("qkv.doc").text() end
  if text then return {{source = "page", data = {["text/plain"] = text}, start = 0}} end
  emit("stdout", (msg or "no documentation for " .. expr) .. "\n")
  return nil
end

local function failed(ename, evalue, tb)
  publish("error", {ename = ename, evalue = evalue, traceback = json.array(tb)})
  return {status = "error", ename = ename, evalue = evalue, traceback = tb}
end

-- the cell's messages but its last stream output, and M.run's result
local function outcome(k, code, n)
  local expr = code:match("^%s*%?([^\n]*)$")
  if expr then return {status = "ok", payload = help_page(expr)} end
  local f, show, quiet = compile(code, n)
  if not f then return failed("SyntaxError", show, {show}) end
  local r = table.pack(k.docall(f))
  if not r[1] then return failed(describe(r[2])) end
  if not show or r.n == 1 then return {status = "ok"} end
  _G._ = r[2]
  if current.silent or quiet then return {status = "ok"} end
  local data = bundle(table.unpack(r, 2, r.n))
  publish("execute_result", {execution_count = n, data = data, metadata = {}})
  return {status = "ok", output = data["text/plain"]}
end

-- runs code for the request msg; returns {status, ename, evalue, traceback}
-- or {status, output, payload}: the text of the value shown, the pages.
-- What the cell printed is sent by then.
function M.run(k, msg, code, n, silent)
  current, inside = {msg = msg, silent = silent}, false
  local ok, r = pcall(outcome, k, code, n)
  local sent, err = pcall(flush)
  current, pending.parts, pending.size = nil, {}, 0
  if not ok then error(r, 0) end
  if not sent then error(err, 0) end
  return r
end

-- the REPL's unfinished-chunk rule
function M.is_complete(code)
  if load("return " .. code, "=cell", "t") then return {status = "complete"} end
  local f, err = load(code, "=cell", "t")
  if f then return {status = "complete"} end
  if tostring(err):sub(-5) == "<eof>" then return {status = "incomplete", indent = ""} end
  return {status = "invalid"}
end

-- the kernel's streams, the plot hook and qkv.display
function M.setup(k)
  K = k
  io.stdout = setmetatable({name = "stdout"}, Stream)
  io.stderr = setmetatable({name = "stderr"}, Stream)
  io.write = function(...) return io.stdout:write(...) end
  print = function(...)
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
    emit("stdout", table.concat(parts, "\t") .. "\n")
  end
  require("qkv.plot")._display = show_plot
  repl._display = function(...) display(bundle(...)) end
  repl._clear = clear_output
end

return M
