-- documents.lua: the documents whose examples and calls the suites check,
-- README.md and every chapter in docs/ (test_readme.lua, test_doc.lua,
-- test_make.lua; run_block for the GPU's blocks, cuda/test_device.lua and
-- test_cudnn.lua). The chapters are found by listing docs/, so a new one
-- is checked without being named anywhere.
local M = {}

-- root: the repository's folder, ending in "/" (or "" for the current one)
function M.list(root)
  root = root or ""
  local list = {"README.md"}
  local p = io.popen("ls " .. "'" .. (root .. "docs"):gsub("'", "'\\''") .. "' 2>/dev/null")
  local names = {}
  for name in p:lines() do
    if name:match("^[%w_%-]+%.md$") then names[#names + 1] = name end
  end
  p:close()
  table.sort(names)
  for _, name in ipairs(names) do list[#list + 1] = "docs/" .. name end
  return list
end

function M.read(root, path)
  local f = assert(io.open((root or "") .. path, "rb"))
  local text = f:read("a")
  f:close()
  return text
end

-- every document's text, each under its path: {{path = ..., text = ...}, ...}
function M.all(root)
  local out = {}
  for _, path in ipairs(M.list(root)) do
    out[#out + 1] = {path = path, text = M.read(root, path)}
  end
  return out
end

-- the first ```lua block under the heading `section` (a "## " line's
-- text) of the document at path, run with print collecting each call's
-- arguments as one line (tostring, joined by spaces): the lines printed,
-- or an error naming the document when it has no such block
function M.run_block(path, section)
  local text = M.read(nil, path)
  local code = text:match("## " .. section:gsub("%p", "%%%0") .. "\n.-```lua\n(.-)```")
  assert(code, path .. ": no lua block under '## " .. section .. "'")
  local printed = {}
  local env = setmetatable({print = function(...)
    local o = table.pack(...)
    for i = 1, o.n do o[i] = tostring(o[i]) end
    printed[#printed + 1] = table.concat(o, " ")
  end}, {__index = _G})
  assert(load(code, "=" .. path, "t", env))()
  return printed
end

return M
