-- total.lua -- the closing line of `make test`: the runner's closing lines
-- ("N passed, N failed[, N skipped]", one a pass: every suite, every suite
-- on the device, the cross-backend suite on the simulation twice) summed
-- from the log the passes wrote, and the passes' exit status given back.
--
--   build/qkv tests/tools/total.lua LOG STATUS
--
-- STATUS is a file holding the passes' exit status (the log is read
-- through a pipe, so the status comes aside).
local log, status = arg[1], arg[2]
if not log or not status then
  io.stderr:write("usage: build/qkv tests/tools/total.lua LOG STATUS\n")
  os.exit(2)
end

local function slurp(path)
  local f, err = io.open(path)
  if not f then io.stderr:write("total.lua: ", err, "\n"); os.exit(2) end
  local s = f:read("a")
  f:close()
  return s
end

local passes, sum = 0, {0, 0, 0}
for line in slurp(log):gmatch("[^\n]+") do
  local p, f, s = line:match("^(%d+) passed, (%d+) failed, (%d+) skipped$")
  if not p then
    p, f = line:match("^(%d+) passed, (%d+) failed$")
    s = "0"
  end
  if p then
    passes = passes + 1
    sum[1], sum[2], sum[3] = sum[1] + p, sum[2] + f, sum[3] + s
  end
end
local rc = math.tointeger(tonumber(slurp(status):match("%d+"))) or 1
print(("all %d passes: %d passed, %d failed, %d skipped%s"):format(passes, sum[1], sum[2],
      sum[3], rc == 0 and "" or " (a pass failed: it stopped there)"))
os.exit(rc == 0 and sum[2] == 0 and 0 or 1)
