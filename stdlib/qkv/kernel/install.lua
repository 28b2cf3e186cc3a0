-- kernel/install.lua: `qkv kernel install [--user | --prefix DIR]` writes
-- the kernelspec where `jupyter kernelspec list` finds it: kernel.json
-- (argv, display name "qkv", language "lua", interrupt_mode "signal") and
-- the logos (an attention map, drawn with qkv.cairo).
--   (none)        /usr/local/share/jupyter/kernels/qkv (as jupyter
--                 kernelspec install: for every user)
--   --user        $JUPYTER_DATA_DIR, else $XDG_DATA_HOME/jupyter, else
--                 ~/.local/share/jupyter, then kernels/qkv
--   --prefix DIR  DIR/share/jupyter/kernels/qkv (a venv's sys.prefix)
local json = require "qkv.json"

local M = {}

local function usage(progname, why)
  if why then io.stderr:write(("%s kernel install: %s\n"):format(progname, why)) end
  io.stderr:write(("usage: %s kernel install [--user | --prefix DIR]\n"):format(progname))
  return 2
end

-- the message for an argument install does not take, naming the nearest
-- option as qkv's other command lines do (qkv._nearest)
local function unknown(a)
  if a == "--prefix" or a == "--prefix=" then return "option '--prefix' needs a folder" end
  local near = a:sub(1, 1) == "-" and
    require("qkv")._nearest("--" .. a:match("^%-+([^=]*)"), {"--user", "--prefix"})
  if near then return ("unknown option '%s' (did you mean '%s'?)"):format(a, near) end
  return ("unknown %s '%s'"):format(a:sub(1, 1) == "-" and "option" or "argument", a)
end

-- the kernel's folder, or nil and what is wrong with the arguments
local function folder(args)
  local where, prefix = "system", nil
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--user" then where = "user"
    elseif a == "--prefix" and args[i + 1] then where, prefix = "prefix", args[i + 1]; i = i + 1
    elseif a:match("^%-%-prefix=.") then where, prefix = "prefix", a:sub(10)
    else return nil, unknown(a) end
    i = i + 1
  end
  if where == "prefix" then return prefix .. "/share/jupyter/kernels/qkv" end
  if where == "system" then return "/usr/local/share/jupyter/kernels/qkv" end
  local data = os.getenv("JUPYTER_DATA_DIR")
  if not data then
    local xdg = os.getenv("XDG_DATA_HOME")
    data = (xdg and xdg ~= "" and xdg or (os.getenv("HOME") or ".") .. "/.local/share") .. "/jupyter"
  end
  return data .. "/kernels/qkv"
end

-- a causal attention map: each row spreads its weight over the tokens
-- before it, in viridis' ends
local function logo(path, size)
  local cairo = require "qkv.cairo"
  local n, rgb = 6, {}
  for i = 1, n do
    for j = 1, n do
      local w = j <= i and 1 / i or 0
      local a = {68, 1, 84}
      local b = {253, 231, 37}
      for c = 1, 3 do rgb[#rgb + 1] = string.char(math.floor(a[c] + (b[c] - a[c]) * w ^ 0.5 + 0.5)) end
    end
  end
  local cv = cairo.new(size, size)
  cv:rgb(1, 1, 1)
  cv:rect(0, 0, size, size)
  cv:fill()
  local cw = size // n
  local pad = (size - cw * n) // 2
  cv:image(pad, pad, n, n, cw, cw, table.concat(rgb))
  cv:write_png(path)
  cv:close()
end

function M.main(args, progname)
  local dir, why = folder(args)
  if not dir then return usage(progname, why) end
  local cairo = require "qkv.cairo"
  local made, err = cairo.mkdir(dir)
  if not made then
    io.stderr:write(("qkv kernel install: cannot make %s: %s\n"):format(dir, tostring(err)))
    return 1
  end
  local spec = {argv = json.array{progname, "kernel", "-f", "{connection_file}"},
                display_name = "qkv", language = "lua", interrupt_mode = "signal",
                metadata = {}, env = {}}
  -- each file written as qkv.save writes: a failed write (a full disk) is
  -- an error and leaves an old file of that name as it was
  local ok, why = pcall(function()
    require("qkv")._write_file(dir .. "/kernel.json", json.encode(spec) .. "\n", "install")
    logo(dir .. "/logo-32x32.png", 32)
    logo(dir .. "/logo-64x64.png", 64)
  end)
  if not ok then
    why = tostring(why):gsub("^[^\n]-install%.lua:%d+: ", ""):gsub("^install: ", "")
    io.stderr:write(("qkv kernel install: %s\n"):format(why))
    return 1
  end
  print(("Installed kernelspec qkv in %s"):format(dir))
  return 0
end

return M
