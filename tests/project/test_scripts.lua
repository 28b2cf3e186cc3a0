-- test_scripts.lua: every script in scripts/ runs (PNGs into a temp folder)
-- and prints and returns the right numbers. The checks for each seed
-- document live in tests/scripts/seedNNN.lua (the tour's in tour.lua), each
-- returning its Test* tables; the deterministic worked examples are checked against float64
-- values computed by hand or by loops, the random ones by properties.
local lu = require "luaunit"

for _, name in ipairs{"seed000", "seed001", "seed002", "seed003", "seed004", "real", "tour",
                      "readme", "decoder"} do
  local f = "tests/scripts/" .. name .. ".lua"
  local h = io.open(f)
  if h then
    h:close()
    for name, suite in pairs(dofile(f)) do
      assert(_G[name] == nil, f .. ": " .. name .. " is defined twice")
      _G[name] = suite
    end
  end
end

os.exit(lu.LuaUnit.run(), true)
