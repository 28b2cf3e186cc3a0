-- caller.lua: where a library's error should point. Returns the level, for
-- error() in the function that calls this one, of the first frame outside
-- the library file `source` (C frames count as inside when skip_c is true),
-- so that errors name the script line that called into the library.
return function(source, skip_c)
  local level = 3     -- 1 is this function, 2 its caller, 3 the caller's caller
  while true do
    local info = debug.getinfo(level, "S")
    if info == nil or (info.source ~= source and not (skip_c and info.what == "C")) then
      return level - 1
    end
    level = level + 1
  end
end
