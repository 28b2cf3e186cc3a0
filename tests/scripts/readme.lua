-- readme.lua: scripts/README.md maps every script to its document section
-- with its line counts; keep the table true to the files.
local lu = require "luaunit"

local function lines(path)
  local all, code = 0, 0
  for l in io.lines(path) do
    all = all + 1
    if not l:match("^%s*$") and not l:match("^%s*%-%-") then code = code + 1 end
  end
  return all, code
end

local TestScriptsReadme = {}

function TestScriptsReadme:testEveryScriptIsListedWithItsLineCounts()
  local listed, sum_doc, sum_qkv = {}, 0, 0
  local total
  for row in io.lines("scripts/README.md") do
    local name, doc, qkv_, file = row:match("| `(%d%d%d_[%w_]+%.lua)` | (%d+) | (%d+) | (%d+) |$")
    if name then
      local all, code = lines("scripts/" .. name)
      lu.assertEquals({name, tonumber(qkv_), tonumber(file)}, {name, code, all})
      lu.assertTrue(all <= 60, name .. " is longer than 60 lines")
      listed[name] = true
      sum_doc, sum_qkv = sum_doc + tonumber(doc), sum_qkv + tonumber(qkv_)
    end
    local d, q = row:match("^| all | | %d+ scripts | (%d+) | (%d+) |")
    if d then total = {tonumber(d), tonumber(q)} end
  end
  local p = io.popen("ls scripts")
  for f in p:lines() do
    if f:match("^%d%d%d_.*%.lua$") then lu.assertTrue(listed[f], f .. " is not in scripts/README.md") end
  end
  p:close()
  -- the helpers row of seed 002 counts for the documents, not for qkv
  for row in io.lines("scripts/README.md") do
    local d = row:match("| `qkv.attention`, `qkv.plot.heatmap` | (%d+) | 0 |")
    if d then sum_doc = sum_doc + tonumber(d) end
  end
  lu.assertEquals(total, {sum_doc, sum_qkv})
end

return {TestScriptsReadme = TestScriptsReadme}
