-- caller.lua: where a library's error should point. Returns the level, for
-- error() in the function that calls this one, of the first frame outside
-- the library: `source` is its file's source, or a set of sources (source
-- -> true) for a library of several files (C frames count as inside when
-- skip_c is true), so that errors name the script line that called into
-- the library.
return function(source, skip_c)
  local set = type(source) == "table"
  local level = 3     -- 1 is this function, 2 its caller, 3 the caller's caller
  while true do
    local info = debug.getinfo(level, "S")
    if info == nil then return level - 1 end
    local inside = set and source[info.source] or info.source == source
    if not inside and not (skip_c and info.what == "C") then return level - 1 end
    level = level + 1
  end
end
