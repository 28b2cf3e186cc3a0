-- kernel.lua: qkv's Jupyter kernel (`qkv kernel -f CONNECTION_FILE`): the
-- messaging protocol 5.3 over ZeroMQ (qkv.zmq: libzmq, HMAC-SHA256 from
-- libcrypto), JSON through qkv.json (libcjson). The executable (vm/cli/kernel.c)
-- calls M.main with the arguments, `docall`, which runs a cell so that
-- Jupyter's interrupt (SIGINT) stops it, and `flush_in`, the timer that
-- sends a busy cell's output. Cells run in kernel/exec.lua,
-- history_request is answered by kernel/history.lua, and `qkv kernel
-- install` is kernel/install.lua.
--
-- Sockets bind to the connection file's address only (127.0.0.1 as
-- Jupyter writes it). A message whose signature does not verify, or one
-- seen before (a replay), is dropped and logged on stderr, never run.

local zmq = require "qkv.zmq"
local json = require "qkv.json"
local repl = require "qkv.repl"
local exec = require "qkv.kernel.exec"
local history = require "qkv.kernel.history"

local M = {}
local stderr = io.stderr        -- the process's own, for the log (cells get a stream)
local PROTOCOL = "5.3"
local DELIM = "<IDS|MSG>"
local SEEN_MAX = 1 << 16
local VERSION = tostring(qkv._VERSION):match("[%d.]+") or "0.1.0"

local function log(fmt, ...)
  stderr:write("qkv kernel: ", string.format(fmt, ...), "\n")
  stderr:flush()
end

local function readfile(path)
  local f, err = io.open(path, "rb")
  if not f then error("kernel: cannot read the connection file: " .. err, 0) end
  local s = f:read("a")
  f:close()
  return s
end

local function random_hex(n)
  local f = io.open("/dev/urandom", "rb")
  local s = f and f:read(n) or tostring(os.time()) .. tostring({})
  if f then f:close() end
  return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)):sub(1, 2 * n)
end

-- the connection file, checked: what Jupyter writes for a tcp kernel
local function connection(path)
  local ok, c = pcall(json.decode, readfile(path), path)
  if not ok or type(c) ~= "table" then error("kernel: " .. tostring(c), 0) end
  for _, k in ipairs{"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"} do
    if math.type(c[k]) ~= "integer" then
      error(("kernel: %s: %s must be an integer port"):format(path, k), 0)
    end
  end
  c.transport = c.transport or "tcp"
  c.ip = c.ip or "127.0.0.1"
  c.key = c.key or ""
  if c.key ~= "" and (c.signature_scheme or "hmac-sha256") ~= "hmac-sha256" then
    error(("kernel: %s: signature_scheme %s is not supported (hmac-sha256 is)")
          :format(path, tostring(c.signature_scheme)), 0)
  end
  return c
end

local function addr(c, port)
  if c.transport == "ipc" then return ("ipc://%s-%d"):format(c.ip, port) end
  return ("%s://%s:%d"):format(c.transport, c.ip, port)
end

-- a kernel's state: sockets, session, counters --------------------------

local K = {}
K.__index = K

function K:sign(parts)
  if self.key == "" then return "" end
  return zmq.hmac_sha256(self.key, parts)
end

-- the message in frames, or nil (logged) when it must not run
function K:parse(frames)
  local d
  for i, f in ipairs(frames) do if f == DELIM then d = i break end end
  if not d or #frames < d + 5 then
    log("dropped a message without the %s delimiter and its five frames", DELIM)
    return nil
  end
  local sig, parts = frames[d + 1], {frames[d + 2], frames[d + 3], frames[d + 4], frames[d + 5]}
  if self.key ~= "" then
    if not zmq.equal(sig, self:sign(parts)) then
      log("dropped a message whose signature does not verify")
      return nil
    end
    if self.seen[sig] then
      log("dropped a message seen before (a replay)")
      return nil
    end
    self.seen[sig] = true
    self.order[#self.order + 1] = sig
    if #self.order > SEEN_MAX then self.seen[table.remove(self.order, 1)] = nil end
  end
  local msg = {ids = table.move(frames, 1, d - 1, 1, {})}
  local ok, err = pcall(function()
    msg.header = json.decode(parts[1], "header")
    msg.parent_header = json.decode(parts[2], "parent_header")
    msg.metadata = json.decode(parts[3], "metadata")
    msg.content = json.decode(parts[4], "content")
  end)
  if not ok or type(msg.header) ~= "table" or type(msg.content) ~= "table" then
    log("dropped a message that is not JSON objects: %s", tostring(err))
    return nil
  end
  return msg
end

function K:send(sock, msg_type, content, parent, ids, metadata)
  self.count_sent = self.count_sent + 1
  local header = {msg_id = ("%s_%d"):format(self.session, self.count_sent),
                  session = self.session, username = "qkv", msg_type = msg_type,
                  date = os.date("!%Y-%m-%dT%H:%M:%S.000000Z"), version = PROTOCOL}
  local parts = {json.encode(header), json.encode(parent and parent.header or {}),
                 json.encode(metadata or {}), json.encode(content)}
  local frames = {}
  for _, id in ipairs(ids or {}) do frames[#frames + 1] = id end
  frames[#frames + 1] = DELIM
  frames[#frames + 1] = self:sign(parts)
  for _, p in ipairs(parts) do frames[#frames + 1] = p end
  sock:send(frames)
end

function K:publish(msg_type, content, parent)
  self:send(self.iopub, msg_type, content, parent,
            {("kernel.%s.%s"):format(self.session, msg_type)})
end

function K:reply(sock, msg, msg_type, content, metadata)
  self:send(sock, msg_type, content, msg, msg.ids, metadata)
end

-- the requests -------------------------------------------------------------

local H = {}

function H.kernel_info_request(k, sock, msg)
  k:reply(sock, msg, "kernel_info_reply", {
    status = "ok", protocol_version = PROTOCOL, implementation = "qkv",
    implementation_version = VERSION,
    language_info = {name = "lua", version = _VERSION:match("%d+%.%d+"), mimetype = "text/x-lua",
                     file_extension = ".lua", pygments_lexer = "lua", codemirror_mode = "lua"},
    banner = ("qkv %s (%s): attention in Lua. help() lists what there is.")
             :format(VERSION, _VERSION),
    help_links = json.array{}})
end

function H.execute_request(k, sock, msg)
  local c = msg.content
  local code = type(c.code) == "string" and c.code or ""
  local silent = c.silent == true
  local store = not silent and c.store_history ~= false
  if store then k.execution_count = k.execution_count + 1 end
  local n = k.execution_count
  if not silent then k:publish("execute_input", {code = code, execution_count = n}, msg) end
  local r = exec.run(k, msg, code, n, silent)
  if store then k.history[#k.history + 1] = {n, code, r.output} end
  local reply = {status = r.status, execution_count = n}
  if r.status == "ok" then
    reply.payload, reply.user_expressions = json.array(r.payload or {}), {}
  else
    reply.ename, reply.evalue, reply.traceback = r.ename, r.evalue, json.array(r.traceback)
  end
  k:reply(sock, msg, "execute_reply", reply, {status = r.status})
end

-- the byte offset just past code point `pos` (the protocol counts code points)
local function byte_at(code, pos)
  if math.type(pos) ~= "integer" or pos < 0 then return #code end
  return (utf8.offset(code, pos + 1) or #code + 1) - 1
end

function H.complete_request(k, sock, msg)
  local code = type(msg.content.code) == "string" and msg.content.code or ""
  local pos = msg.content.cursor_pos
  local b = byte_at(code, pos)
  local word = code:sub(1, b):match("[%w_.:]*$")
  local ok, matches = pcall(repl._complete, word)
  if not ok then matches = {} end
  local cpos = utf8.len(code:sub(1, b)) or b
  k:reply(sock, msg, "complete_reply", {status = "ok", matches = json.array(matches),
    cursor_start = cpos - (utf8.len(word) or #word), cursor_end = cpos, metadata = {}})
end

function H.inspect_request(k, sock, msg)
  local code = type(msg.content.code) == "string" and msg.content.code or ""
  local b = byte_at(code, msg.content.cursor_pos)
  local left = code:sub(1, b):match("[%w_.:]*$")
  local right = code:sub(b + 1):match("^[%w_]*")
  local name = (left .. right):gsub("[.:]$", "")
  local text = exec.help_text(name)
  k:reply(sock, msg, "inspect_reply", {status = "ok", found = text ~= nil,
    data = text and {["text/plain"] = text} or {}, metadata = {}})
end

function H.is_complete_request(k, sock, msg)
  local code = type(msg.content.code) == "string" and msg.content.code or ""
  k:reply(sock, msg, "is_complete_reply", exec.is_complete(code))
end

function H.history_request(k, sock, msg)
  local out = {}
  for _, h in ipairs(history.query(k.history, msg.content)) do
    local input = msg.content.output and json.array{h[2], h[3] or json.null} or h[2]
    out[#out + 1] = json.array{history.SESSION, h[1], input}
  end
  k:reply(sock, msg, "history_reply", {status = "ok", history = json.array(out)})
end

function H.comm_info_request(k, sock, msg)
  k:reply(sock, msg, "comm_info_reply", {status = "ok", comms = {}})
end

function H.shutdown_request(k, sock, msg)
  k:reply(sock, msg, "shutdown_reply", {status = "ok", restart = msg.content.restart == true})
  k.done = true
end

-- in signal mode the interrupt comes as SIGINT; a request between cells has
-- nothing to stop
function H.interrupt_request(k, sock, msg)
  k:reply(sock, msg, "interrupt_reply", {status = "ok"})
end

function K:handle(sock)
  local frames = sock:recv(0)
  if not frames then return end
  local msg = self:parse(frames)
  if not msg then return end
  local t = msg.header.msg_type
  local h = H[t]
  if not h then
    log("ignored a %s message", tostring(t))
    return
  end
  self:publish("status", {execution_state = "busy"}, msg)
  local ok, err = pcall(h, self, sock, msg)
  if not ok then log("%s failed: %s", t, tostring(err)) end
  self:publish("status", {execution_state = "idle"}, msg)
end

function M.serve(path, docall, flush_in)
  local c = connection(path)
  local ctx = zmq.context()
  local k = setmetatable({key = c.key, session = random_hex(16), count_sent = 0,
                          execution_count = 0, history = {}, seen = {}, order = {},
                          docall = docall, flush_in = flush_in, ctx = ctx}, K)
  k.shell, k.control = ctx:socket("ROUTER"), ctx:socket("ROUTER")
  k.stdin, k.iopub = ctx:socket("ROUTER"), ctx:socket("PUB")
  k.shell:bind(addr(c, c.shell_port))
  k.control:bind(addr(c, c.control_port))
  k.stdin:bind(addr(c, c.stdin_port))
  k.iopub:bind(addr(c, c.iopub_port))
  zmq.heartbeat(ctx, addr(c, c.hb_port))
  exec.setup(k)
  k:publish("status", {execution_state = "starting"})
  while not k.done do
    for _, i in ipairs(zmq.poll({k.control, k.shell}, -1)) do
      k:handle(i == 1 and k.control or k.shell)
      if k.done then break end
    end
  end
  ctx:term()
  return 0
end

-- `qkv kernel -f FILE` or `qkv kernel install [...]`
function M.main(args, docall, progname, flush_in)
  if args[1] == "install" then
    return require("qkv.kernel.install").main(table.move(args, 2, #args, 1, {}), progname)
  end
  -- -f FILE (or --f=FILE); anything else is an error, with the nearest
  -- of install and -f (qkv._nearest, as qkv's other command lines)
  local path, why
  local i = 1
  while i <= #args and not why do
    local a = args[i]
    if a == "-f" and args[i + 1] then path, i = args[i + 1], i + 1
    elseif a:match("^%-%-f=.") then path = a:sub(5)
    elseif a == "-f" then why = "option '-f' needs the connection file"
    else
      local near = require("qkv")._nearest(a, {"install", "-f"})
      why = ("unknown %s '%s'%s"):format(a:sub(1, 1) == "-" and "option" or "argument", a,
                                       near and (" (did you mean '%s'?)"):format(near) or "")
    end
    i = i + 1
  end
  if why or not path then
    if why then stderr:write(("%s kernel: %s\n"):format(progname, why)) end
    stderr:write(("usage: %s kernel -f CONNECTION_FILE | %s kernel install [--user | --prefix DIR]\n")
                    :format(progname, progname))
    return 2
  end
  return M.serve(path, docall, flush_in)
end

return M
