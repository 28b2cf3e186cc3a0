-- interrupt.lua -- how long SIGINT takes to stop each long-running op kind
-- (the cases of tests/helpers/sigint.lua): the child gets SIGINT inside the op and
-- the time is from the kill to the op's error line in its output, the
-- median of 3 runs. The aim is ~100 ms or less for every kind.
--
--   build/qkv bench/interrupt.lua          the table (run by `make bench`)

local S = dofile("tests/helpers/sigint.lua")
local EXE = arg[-1]

if not S.available() then
  print("interrupt: needs Linux /proc and GNU date; skipped")
  return
end
print("interrupt: SIGINT inside the op to its error, median of 3 runs")
print(string.format("%-18s %10s  %s", "op", "ms", "error"))
for _, c in ipairs(S.cases) do
  local t, err = {}, nil
  for i = 1, 3 do
    local r = S.run_inside(EXE, c)
    t[i], err = r.latency or math.huge, r.err
  end
  table.sort(t)
  print(string.format("%-18s %10.1f  %s", c[1], t[2] * 1e3, (err or "?"):gsub("^%(command line%):1: ", "")))
end
