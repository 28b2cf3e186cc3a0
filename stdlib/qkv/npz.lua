-- npz.lua: qkv.npz, NumPy's .npz files: a zip archive of .npy files, one
-- per named tensor ("w.npy" holds the tensor named w). qkv.savez and
-- qkv.loadz load this module on first use.
--
--   savez(path, {name = tensor, ...})   writes the archive atomically
--   loadz(path) -> {name = tensor, ...}
--
-- The .npy bytes come from qkv._npy_encode / _npy_decode (bindings/lio.c),
-- the archive from qkv.zip (bindings/zip/lzip.c, libzip), and the file is
-- written by qkv._write_file, as qkv.save writes its own (a regular file
-- atomically, a character device or a FIFO in place), and read by
-- qkv._read_file (a regular file only: a FIFO or a device is an error).

local qkv = require "qkv"
local zip = require "qkv.zip"

local M = {}

local caller = require "qkv.caller"
local SOURCE = debug.getinfo(1, "S").source

-- errors point at the script line that called savez or loadz
local function fail(msg, ...)
  error(string.format(msg, ...), caller(SOURCE, true))
end

-- f(...), with an error raised again at the script's line rather than at
-- this file's (a C function's error carries its Lua caller's position)
local function call(f, ...)
  local ok, r = pcall(f, ...)
  if ok then return r end
  fail("%s", (tostring(r):gsub("^[^\n]-npz%.lua:%d+: ", "", 1)))
end

-- a name NumPy writes and any unzip puts back where it came from: no
-- empty, absolute, "." or ".." parts, no NUL or backslash
local function bad_name(name)
  if name == "" then return "is empty" end
  -- a zip entry's name has 16 bits of length (".npy" is added): libzip wrote
  -- a longer one cut, modulo 65536
  if #name > 65535 - 4 then return "is longer than a zip entry's name may be (65531 bytes)" end
  if not utf8.len(name) then return "is not UTF-8" end
  if name:find("[%z\\]") then return "holds a NUL or a backslash" end
  if name:sub(1, 1) == "/" then return "is an absolute path" end
  for part in (name .. "/"):gmatch("([^/]*)/") do
    if part == "" or part == "." or part == ".." then
      return "has an empty, '.' or '..' part"
    end
  end
end

-- an argument past the n that fname takes is an error, not ignored
local function noextra(fname, n, ...)
  local msg = qkv._extra(fname, n, ...)
  if msg then fail("%s", msg) end
end

function M.savez(path, tensors, ...)
  noextra("savez", 2, path, tensors, ...)
  if type(path) ~= "string" then
    fail("savez: bad argument #1 (path expected, got %s)", type(path))
  end
  if path:find("%z") then fail("savez: bad argument #1 (the path holds a NUL byte)") end
  if type(tensors) ~= "table" then
    fail("savez: bad argument #2 (table of tensors expected, got %s)", type(tensors))
  end
  local entries = {}
  for name, t in pairs(tensors) do
    if type(name) ~= "string" then
      fail("savez: tensor names must be strings, got %s %s", type(name), tostring(name))
    end
    local why = bad_name(name)
    if why then fail("savez: the name '%s' %s", name, why) end
    if not qkv.is_tensor(t) then
      fail("savez: '%s' is a %s, not a tensor", name, type(t))
    end
    local ok, bytes = pcall(qkv._npy_encode, t)
    if not ok then
      local msg = tostring(bytes)
      fail("savez: '%s': %s", name, msg:match("^.-bad argument #%d+ to '[^']*' %((.*)%)$") or
                                    (msg:gsub("^.-_npy_encode: ", "")))
    end
    entries[name .. ".npy"] = bytes
  end
  call(qkv._write_file, path, call(zip.encode, entries), "savez")
end

function M.loadz(path, ...)
  noextra("loadz", 1, path, ...)
  if type(path) ~= "string" then
    fail("loadz: bad argument #1 (path expected, got %s)", type(path))
  end
  if path:find("%z") then fail("loadz: bad argument #1 (the path holds a NUL byte)") end
  local what = "loadz: " .. path
  local entries = call(zip.decode, call(qkv._read_file, path, "loadz"), what)
  local out = {}
  for name, bytes in pairs(entries) do
    local key = name:match("^(.*)%.npy$")
    if not key then fail("%s: entry '%s' is not a .npy file", what, name) end
    out[key] = call(qkv._npy_decode, bytes, what .. ": " .. name)
  end
  return out
end

return M
