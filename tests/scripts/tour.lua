-- tour.lua: scripts/tour.lua (run by `make run`) prints seed 001's worked
-- example step by step; its weights and output are checked against float64
-- values worked out by hand: scores 0 and 4/sqrt(2) = 2.8284, weights
-- e^0 / (1 + 2 e^2.8284) = 0.0287 and e^2.8284 / (...) = 0.4856.
local lu = require "luaunit"
local U = dofile("tests/scripts/util.lua")

local run
local function tour()
  run = run or U.run("scripts/tour.lua")
  return run
end

local TestTour = {}

function TestTour:testPrintsTheWorkedExample()
  local out = tour().stdout
  local e = math.exp(4 / math.sqrt(2))
  local small, big = 1 / (1 + 2 * e), e / (1 + 2 * e)
  lu.assertStrContains(out, string.format("tensor([[%.4f, %.4f, %.4f],", small, big, big))
  lu.assertStrContains(out, "[0.0000, 2.8284, 2.8284]")
  lu.assertStrContains(out, "[2.8284, 0.0000,   -inf]")
  -- output row 1 = 0.0287 (2, 0) + 0.4856 (0, 2) + 0.4856 (2, 2)
  lu.assertStrContains(out, string.format("tensor([[%.4f, %.4f],", 2 * small + 2 * big, 4 * big))
  lu.assertStrContains(out, "self-attention weights")
  lu.assertStrContains(out, "(1, 8, 10, 64)\t(1, 10, 512)")
  lu.assertStrContains(out, "rows sum to 1:\ttrue")
  lu.assertStrContains(out, "false\tscores: Q is (3, 2) but K is (5, 3)")
  lu.assertEquals(#tour().pngs, 0)
  U.clean(tour())
end

return {TestTour = TestTour}
