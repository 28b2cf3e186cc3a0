-- corpus_safetensors.lua: writes the seed corpus for qkv.load_safetensors
-- into tests/fuzz/corpus_safetensors/ (build/qkv tests/fuzz/corpus_safetensors.lua):
-- good files (the reference's fixture, one of qkv's, edge shapes) and one
-- of each malformation tests/bindings/test_safetensors.lua names. The suite loads
-- each and damages them at random; test-asan runs that under ASan.
local DIR = "tests/fuzz/corpus_safetensors/"
os.execute("mkdir -p " .. DIR)

local function put(name, bytes)
  local f = assert(io.open(DIR .. name, "wb"))
  f:write(bytes)
  f:close()
end

local function file(name, header, data)
  put(name, string.pack("<I8", #header) .. header .. (data or ""))
end

local function entry(dt, shape, b, e)
  return ('{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}'):format(dt, shape, b, e)
end

local f = assert(io.open("tests/fixtures/safetensors/dtypes.safetensors", "rb"))
put("ok_reference.safetensors", f:read("a"))
f:close()
qkv.seed(1)
qkv.save_safetensors(DIR .. "ok_qkv.safetensors",
  {w = qkv.randn(4, 3), b = qkv.zeros(3, "int64"), h = qkv.randn(5):to("bfloat16"),
   m = qkv.tensor({true, false}, "bool"), s = qkv.tensor(1.5)}, {format = "pt"})
file("ok_empty.safetensors", "{}")
file("ok_meta_only.safetensors", '{"__metadata__":{"a":"b"}}  ')
file("ok_zero_size.safetensors", '{"e":' .. entry("F32", "0,5", 0, 0) .. '}')

local d8 = ("\0"):rep(8)
file("bad_zero_length", "")
put("bad_tiny", "abc")
put("bad_length_past_end", string.pack("<I8", 1000) .. "{}")
put("bad_length_max", string.pack("<I8", -1) .. "{}")
file("bad_array", "[1, 2]")
file("bad_json", '{"a": {"dtype": "F32",')
file("bad_trailing", "{} x")
file("bad_duplicate", '{"a":' .. entry("F32", "1", 0, 4) .. ',"a":' .. entry("F32", "1", 4, 8) .. '}', d8)
file("bad_entry_number", '{"a": 3}')
file("bad_metadata_value", '{"__metadata__": {"k": 1}}')
file("bad_dtype", '{"a":' .. entry("F17", "2", 0, 8) .. '}', d8)
file("bad_f8", '{"a":' .. entry("F8_E4M3", "8", 0, 8) .. '}', d8)
file("bad_no_dtype", '{"a":{"shape":[2],"data_offsets":[0,8]}}', d8)
file("bad_negative_shape", '{"a":' .. entry("F32", "-2", 0, 8) .. '}', d8)
file("bad_nine_dims", '{"a":' .. entry("F32", "1,1,1,1,1,1,1,1,2", 0, 8) .. '}', d8)
file("bad_one_offset", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}', d8)
file("bad_shape_bytes", '{"a":' .. entry("F32", "3", 0, 8) .. '}', d8)
file("bad_past_data", '{"a":' .. entry("F32", "4", 0, 16) .. '}', d8)
file("bad_backwards", '{"a":' .. entry("F32", "0", 8, 4) .. '}', d8)
file("bad_overlap", '{"a":' .. entry("F32", "2", 0, 8) .. ',"b":' .. entry("F32", "1", 4, 8) .. '}', d8)
file("bad_gap", '{"a":' .. entry("F32", "1", 0, 4) .. '}', d8)
file("bad_huge_shape", '{"a":' .. entry("F64", "4294967296,4294967296", 0, 8) .. '}', d8)
file("bad_bool_byte", '{"a":' .. entry("BOOL", "2", 0, 2) .. '}', "\1\2")
file("bad_u64", '{"a":' .. entry("U64", "1", 0, 8) .. '}', ("\255"):rep(8))
file("bad_deep", ('{"a":'):rep(2000) .. "1" .. ("}"):rep(2000))
print("wrote " .. DIR)
