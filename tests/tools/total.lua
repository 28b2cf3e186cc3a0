-- total.lua -- the closing line of `make test`: the passes' results summed
-- from the log that tests/tools/passes.sh wrote, saying which passes
-- failed, and the exit status (0 when every pass ran to its end with
-- status 0 and no test failed).
--
--   build/qkv tests/tools/total.lua LOG
--
-- A pass is the text between "== pass NAME: COMMAND" and "== pass NAME:
-- exit STATUS"; its counts are the last runner's closing line inside it
-- ("N passed, N failed[, N skipped]"). A pass with no exit line did not
-- finish (the run was stopped); one with no closing line, or a status
-- other than 0, failed however its counts read. Each failed test LuaUnit
-- listed ("N) TestX.testY" in a suite's "== FILE" part) is named on a
-- line of its own above the closing line, with its message's first line,
-- so that the log's tail says what failed.
local log = arg[1]
if not log then
  io.stderr:write("usage: build/qkv tests/tools/total.lua LOG\n")
  os.exit(2)
end

local f, err = io.open(log)
if not f then io.stderr:write("total.lua: ", err, "\n"); os.exit(2) end
local text = f:read("a")
f:close()

local passes, cur = {}, nil
local failures, file, want = {}, nil, nil   -- want: the failure whose message comes next
for line in text:gmatch("[^\n]+") do
  local name, rest = line:match("^== pass (%S+): (.*)$")
  local test = cur and line:match("^%d+%) (Test[%w_]+%.[%w_]+)$")
  if name and not rest:match("^exit %-?%d+$") then
    cur = {name = name}
    passes[#passes + 1] = cur
  elseif name and cur and name == cur.name then
    cur.rc = tonumber(rest:match("%-?%d+"))
    cur = nil
  elseif cur and line:match("^== %S+%.lua$") then
    file, want = line:sub(4), nil
  elseif test then
    want = {pass = cur.name, file = file or "?", test = test}
    failures[#failures + 1] = want
  elseif want then
    want.msg, want = line:sub(1, 200), nil
  end
  if cur and not name then
    local p, fl, s = line:match("^(%d+) passed, (%d+) failed, (%d+) skipped$")
    if not p then
      p, fl = line:match("^(%d+) passed, (%d+) failed$")
      s = "0"
    end
    if p then cur.counts = {tonumber(p), tonumber(fl), tonumber(s)} end
  end
end

local sum, bad = {0, 0, 0}, {}
for _, p in ipairs(passes) do
  local c = p.counts
  if c then for i = 1, 3 do sum[i] = sum[i] + c[i] end end
  local why
  if not p.rc then why = "did not finish"
  elseif not c then why = "exit " .. p.rc .. ", no closing line"
  elseif c[2] > 0 then why = c[2] .. " failed"
  elseif p.rc ~= 0 then why = "exit " .. p.rc end
  if why then bad[#bad + 1] = p.name .. " (" .. why .. ")" end
end
if #passes == 0 then bad[1] = "no pass ran" end

for i, f in ipairs(failures) do
  if i > 12 then print(("... and %d more failed tests"):format(#failures - 12)); break end
  print(("failed in %s: %s %s: %s"):format(f.pass, f.file, f.test, f.msg or ""))
end

print(("all %d passes: %d passed, %d failed, %d skipped%s"):format(#passes, sum[1], sum[2],
      sum[3], #bad == 0 and "" or "; failed: " .. table.concat(bad, ", ")))
os.exit(#bad == 0 and 0 or 1)
