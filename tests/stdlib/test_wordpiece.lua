-- test_wordpiece.lua: qkv.wordpiece (and qkv.text under it) against
-- Hugging Face's tokenizers package on all-MiniLM-L6-v2's vocabulary:
-- 39 hand-picked texts from a fixture (tests/fixtures/tokenizer/
-- make_tokens.py: accents, CJK, Greek, special tokens, long words (in
-- characters, not bytes; a million of them), odd whitespace and control
-- characters, unassigned code points), and random texts tokenised by both
-- in the same run when build/pyref has the package (`make peers`). A tiny
-- vocabulary checks the rest without the model: pieces, [UNK], padding,
-- cutting to max_length, decode and the errors.
local lu = require "luaunit"
local S = dofile("tests/helpers/shell.lua")
local H = dofile("tests/helpers/npy_helpers.lua")

local DIR = os.getenv("QKV_MODEL_DIR") or "build/models/all-MiniLM-L6-v2"
local PY = "build/pyref/bin/python"
local TMP, cleanup = H.tmpdir()
local _ <close> = cleanup

local function real()
  if not io.open(DIR .. "/vocab.txt") then
    lu.skip("the real model is not in " .. DIR .. " (`make model` fetches it)")
  end
  return qkv.wordpiece.load(DIR .. "/vocab.txt")
end

local function row(t, b) return t[b]:narrow(1, 1, t:size(2)):tolist() end

TestWordpieceReference = {}

function TestWordpieceReference:testTheFixturesTexts()
  local tok = real()
  local ref = dofile("tests/fixtures/tokenizer/tokens_ref.lua")
  lu.assertEquals(#ref, 39)
  for i, r in ipairs(ref) do
    local e = tok:encode(r.text)
    lu.assertEquals(e.tokens[1], r.tokens, "text " .. i)
    lu.assertEquals(row(e.input_ids, 1), r.ids, "text " .. i)
  end
end

-- a word over 100 characters (code points, as the reference counts them:
-- 99 a's and a ж are 100 characters in 101 bytes) is [UNK] from its first
-- 101 characters: the fixture's million-character words are [UNK], as the
-- reference's, and no character past those is walked (utf8.codes, which
-- the pieces read, counts what it yields)
function TestWordpieceReference:testALongWordIsUnkFromItsFirstCharacters()
  local tok = real()
  local ref = dofile("tests/fixtures/tokenizer/tokens_ref.lua")
  local codes, walked = utf8.codes, 0
  utf8.codes = function(s)
    local f, st, i = codes(s)
    return function(a, b)
      local p, c = f(a, b)
      if p then walked = walked + 1 end
      return p, c
    end, st, i
  end
  local ok, err = pcall(function()
    for i = #ref - 1, #ref do             -- the last two
      lu.assertTrue(#ref[i].text >= 1000000, "text " .. i)
      walked = 0
      lu.assertEquals(tok:encode(ref[i].text).tokens[1], ref[i].tokens, "text " .. i)
      lu.assertTrue(walked <= 101, ("text %d: %d characters walked"):format(i, walked))
    end
    lu.assertEquals(tok:tokenize(("a"):rep(99) .. "ж")[1], "aaa")
    lu.assertEquals(tok:tokenize(("ж"):rep(50) .. ("a"):rep(51)), {"[UNK]"})
  end)
  utf8.codes = codes
  if not ok then error(err, 0) end
end

-- random texts from pieces that exercise every rule, tokenised by both
local ALPHABET = {"a", "b", "e", "the", "bank", "river", "ing", "un", "Q", "Z", " ", " ", "  ",
  "\t", "\n", ".", ",", "!", "'", "-", "$", "^", "`", "~", "é", "É", "ñ", "ü", "ß", "œ",
  "北", "京", "の", "テ", "한", "α", "Σ", "Ω", "й", "Ж", "ا", "😀", "©", "™", "…", "—", "«",
  "\u{00a0}", "\u{2003}", "\u{200b}", "\u{2028}", "\u{0301}", "\u{0308}", "\u{ff21}",
  "\u{fb01}", "İ", "[MASK]", "[SEP]", "[UNK]", "1", "42", "3.14", "\7", "\0", "\u{fffd}",
  "x", "y", "antidisestablishmentarianism"}

function TestWordpieceReference:testRandomTextsAgainstTheTokenizersPackage()
  local tok = real()
  local f = io.open(PY)
  if not f then lu.skip("no " .. PY .. " with tokenizers (`make peers`)") end
  f:close()
  local rng, texts = 7, {}
  local function rand(n)
    rng = (rng * 1103515245 + 12345) % 2147483648
    return rng % n + 1
  end
  for i = 1, 300 do
    local parts = {}
    for j = 1, rand(12) do parts[j] = ALPHABET[rand(#ALPHABET)] end
    texts[i] = table.concat(parts)
  end
  local hex = {}
  for i, t in ipairs(texts) do hex[i] = (t:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
  S.write(TMP .. "/texts.hex", table.concat(hex, "\n") .. "\n")
  local out, code = S.sh(PY .. " -c " .. S.quote([[
import sys, tokenizers
tok = tokenizers.Tokenizer.from_file(sys.argv[1])
tok.no_padding(); tok.no_truncation()
for line in open(sys.argv[2]):
    print(" ".join(map(str, tok.encode(bytes.fromhex(line.strip()).decode()).ids)))
]]) .. " " .. S.quote(DIR .. "/tokenizer.json") .. " " .. S.quote(TMP .. "/texts.hex") .. " 2>&1")
  lu.assertEquals(code, 0, out)
  local i = 0
  for line in out:gmatch("([^\n]*)\n") do
    i = i + 1
    local want = {}
    for id in line:gmatch("%d+") do want[#want + 1] = tonumber(id) end
    lu.assertEquals(row(tok:encode(texts[i]).input_ids, 1), want, ("%q"):format(texts[i]))
  end
  lu.assertEquals(i, #texts)
end

-- what tokenize cuts into parts (texts over 64 KB) and the long runs of
-- combining marks that qkv.text orders itself: the same as the package's
function TestWordpieceReference:testLongTextsAgainstTheTokenizersPackage()
  local tok = real()
  local f = io.open(PY)
  if not f then lu.skip("no " .. PY .. " with tokenizers (`make peers`)") end
  f:close()
  local rng = 9
  local function rand(n)
    rng = (rng * 1103515245 + 12345) % 2147483648
    return rng % n + 1
  end
  local parts = {}
  for i = 1, 150000 do parts[i] = ALPHABET[rand(#ALPHABET)] end
  -- marks of several classes in random order, under a letter: only the
  -- marks' canonical order decides what NFC makes of them
  local MARKS = {"\u{301}", "\u{316}", "\u{327}", "\u{334}", "\u{5b0}", "\u{f71}", "\u{f72}",
                 "\u{93c}", "\u{94d}", "\u{1dce}", "\u{308}", "\u{345}"}
  local marks = {"a"}
  for i = 2, 200001 do marks[i] = MARKS[rand(#MARKS)] end
  local long, run = table.concat(parts), table.concat(marks)
  lu.assertTrue(#long > 3 * 65536, #long)
  S.write(TMP .. "/long.txt", long)
  S.write(TMP .. "/run.txt", run)
  local out, code = S.sh(PY .. " -c " .. S.quote([[
import sys, tokenizers
from tokenizers import normalizers
tok = tokenizers.Tokenizer.from_file(sys.argv[1])
tok.no_padding(); tok.no_truncation()
print(" ".join(map(str, tok.encode(open(sys.argv[2], encoding="utf-8").read()).ids)))
print(normalizers.NFC().normalize_str(open(sys.argv[3], encoding="utf-8").read()).encode().hex())
]]) .. " " .. S.quote(DIR .. "/tokenizer.json") .. " " .. S.quote(TMP .. "/long.txt") .. " " ..
     S.quote(TMP .. "/run.txt") .. " 2>&1")
  lu.assertEquals(code, 0, out)
  local ids, nfc = out:match("^([^\n]*)\n([^\n]*)\n$")
  local want = {}
  for id in ids:gmatch("%d+") do want[#want + 1] = tonumber(id) end
  local got = {tok.vocab["[CLS]"]}
  for _, t in ipairs(tok:tokenize(long)) do got[#got + 1] = tok.vocab[t] end
  got[#got + 1] = tok.vocab["[SEP]"]
  local i = 1
  while i <= #want and got[i] == want[i] do i = i + 1 end
  lu.assertEquals({table.unpack(got, i, i + 5)}, {table.unpack(want, i, i + 5)}, "from id " .. i)
  lu.assertEquals(#got, #want)
  local words = require("qkv.text").bert_words(run, false, false)
  lu.assertEquals(#words, 1)
  lu.assertTrue(words[1] == (nfc:gsub("..", function(h) return string.char(tonumber(h, 16)) end)),
                "the marks' canonical order")
end

-- a tiny vocabulary
local VOCAB = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "river", "bank", "##s",
               "un", "##believ", "##able", ",", "é", "北"}

local function tiny(opts, vocab)
  local path = TMP .. "/vocab" .. tostring(opts and next(opts) or "") .. ".txt"
  S.write(path, table.concat(vocab or VOCAB, "\n") .. "\n")
  return qkv.wordpiece.load(path, opts)
end

TestWordpieceTiny = {}

function TestWordpieceTiny:testPiecesAndUnknowns()
  local tok = tiny()
  lu.assertEquals(tok:tokenize("The banks, UNBELIEVABLE river"),
                  {"the", "bank", "##s", ",", "un", "##believ", "##able", "river"})
  lu.assertEquals(tok:tokenize("unbelievablex banky"), {"[UNK]", "[UNK]"})
  lu.assertEquals(tok:tokenize("the " .. ("s"):rep(101)), {"the", "[UNK]"})
  lu.assertEquals(tok:tokenize("北北 é"), {"北", "北", "[UNK]"})         -- é lowered and stripped: e
  lu.assertEquals(tok:tokenize(""), {})
  lu.assertEquals(tok:tokenize("the [MASK] river[SEP]"), {"the", "[MASK]", "river", "[SEP]"})
  local cased = tiny({lower = false})
  lu.assertEquals(cased:tokenize("é The"), {"é", "[UNK]"})
  lu.assertEquals(tiny({strip_accents = false}):tokenize("É"), {"é"})
end

function TestWordpieceTiny:testEncodePadsAndCuts()
  local tok = tiny()
  local e = tok:encode({"the river bank", "banks"})
  lu.assertEquals(e.tokens, {{"[CLS]", "the", "river", "bank", "[SEP]"},
                             {"[CLS]", "bank", "##s", "[SEP]"}})
  lu.assertEquals(e.input_ids:tolist(), {{2, 5, 6, 7, 3}, {2, 7, 8, 3, 0}})
  lu.assertEquals(e.attention_mask:tolist(), {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 0}})
  lu.assertEquals(e.token_type_ids:tolist(), {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}})
  lu.assertEquals(e.input_ids.dtype, "int64")
  local short = tiny({max_length = 4})
  lu.assertEquals(short:encode("the river bank river").tokens[1], {"[CLS]", "the", "river", "[SEP]"})
  lu.assertEquals(tok:decode(e.input_ids[2]), "[CLS] banks [SEP]")
  lu.assertEquals(tok:decode({5, 6, 8}), "the rivers")
end

function TestWordpieceTiny:testErrors()
  local tok = tiny()
  local function fails(want, f, ...)
    local ok, err = pcall(f, ...)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), want)
    lu.assertStrContains(tostring(err), "test_wordpiece.lua")   -- the caller's line
  end
  fails("wordpiece.load: cannot open", qkv.wordpiece.load, TMP .. "/none.txt")
  fails("bad argument #1", qkv.wordpiece.load, 3)
  tiny()
  fails("wordpiece.load: bad argument #1 (the path holds a NUL byte)", qkv.wordpiece.load,
        TMP .. "/vocab.txt\0.bak")
  fails("wordpiece.load: cannot read " .. TMP, qkv.wordpiece.load, TMP)   -- a folder
  S.write(TMP .. "/empty.txt", "")
  fails("holds no tokens", qkv.wordpiece.load, TMP .. "/empty.txt")
  fails("max_length must be an integer >= 2", tiny, {max_length = 1})
  fails("wordpiece.load: unknown option 'lowr' (did you mean 'lower'?)", tiny, {lowr = false})
  fails("wordpiece.load: unknown option 'do_lower_case'", tiny, {do_lower_case = false})
  fails("wordpiece.load: unknown option 'strip_accent' (did you mean 'strip_accents'?)", tiny,
        {strip_accent = true})
  fails("wordpiece.load: option 'lower' must be a boolean, got number", tiny, {lower = 0})
  fails("has no [CLS] token", tiny, nil, {"[PAD]", "[UNK]", "[SEP]", "a"})
  fails("encode: texts must be a string or a non-empty list of strings, got number",
        tok.encode, tok, 5)
  fails("encode: texts must be a string or a non-empty list of strings, got an empty table",
        tok.encode, tok, {})
  fails("encode: text 2 is a boolean", tok.encode, tok, {"a", true})
  fails("encode: text 1: the text is not valid UTF-8 (at byte 2)", tok.encode, tok, "a\255")
  fails("tokenize: bad argument #1", tok.tokenize, tok, nil)
  -- where in the whole text, past special tokens and the parts of a long text
  fails("tokenize: the text is not valid UTF-8 (at byte 10)", tok.tokenize, tok, "[CLS] ok \255")
  fails("(at byte 200002)", tok.tokenize, tok, ("the "):rep(50000) .. "a\255")
  fails("decode: id 2 is 99", tok.decode, tok, {1, 99})
  fails("decode: bad argument #1", tok.decode, tok, "x")
end

-- the work tokenize does grows with the text, counted without a clock:
-- the bytes its special-token scan reads, the length of what one call of
-- qkv.text gets (the hook that stops a script on Ctrl-C runs between
-- calls), the pieces looked up in the vocabulary
TestWordpieceWork = {}

-- f() with string[name] replaced by count(original, ...)
local function counting(name, count, f)
  local original = string[name]
  string[name] = function(...) return count(original, ...) end
  local ok, r = pcall(f)
  string[name] = original
  if not ok then error(r, 0) end
  return r
end

function TestWordpieceWork:testTheSpecialTokenScanReadsTheTextOnce()
  local tok = tiny()
  local texts = {("[CLS]"):rep(40000), ("the [SEP] "):rep(20000), "x" .. ("[MASK]"):rep(30000)}
  for _, s in ipairs(texts) do
    local read = 0
    local got = counting("find", function(find, str, p, init, plain)
      local a, b = find(str, p, init, plain)
      read = read + (b or #str) - (init or 1) + 1
      return a, b
    end, function() return tok:tokenize(s) end)
    lu.assertEquals(got[#got], s:match("(%[%u+%])%s*$"))
    lu.assertTrue(read <= 6 * #s, ("%d bytes read for a text of %d"):format(read, #s))
  end
  lu.assertEquals(#tok:tokenize(("[CLS]"):rep(40000)), 40000)
  lu.assertEquals(tok:tokenize("[SEP][MASK]the[PAD] [UNK]x"),
                  {"[SEP]", "[MASK]", "the", "[PAD]", "[UNK]", "[UNK]"})
end

function TestWordpieceWork:testLongTextsGoToQkvTextInParts()
  local tok, text = tiny(), require "qkv.text"
  local s = ("the river bank, unbelievable banks. "):rep(30000)      -- 1 MB
  local original, longest, calls = text.bert_words, 0, 0
  text.bert_words = function(t, ...)
    longest, calls = math.max(longest, #t), calls + 1
    return original(t, ...)
  end
  local ok, got = pcall(tok.tokenize, tok, s)
  text.bert_words = original
  lu.assertTrue(ok, got)
  lu.assertTrue(longest <= 65536 + 64, longest .. " bytes in one call")
  lu.assertTrue(calls >= 16, calls .. " calls")
  lu.assertEquals(#got, 30000 * 10)
  lu.assertEquals({table.unpack(got, 1, 9)},
                  {"the", "river", "bank", ",", "un", "##believ", "##able", "bank", "##s"})
end

-- no piece is looked for that is longer than the longest token
function TestWordpieceWork:testPiecesAreNoLongerThanTheLongestToken()
  local vocab = {table.unpack(VOCAB)}
  for _, t in ipairs{"a", "##a", "##b"} do vocab[#vocab + 1] = t end
  local tok = tiny({lower = true}, vocab)
  local s = (("ab"):rep(50) .. " "):rep(100)
  local subs = 0
  local got = counting("sub", function(sub, ...)
    subs = subs + 1
    return sub(...)
  end, function() return tok:tokenize(s) end)
  lu.assertEquals(#got, 100 * 100)
  lu.assertEquals({got[1], got[2], got[3]}, {"a", "##b", "##a"})
  lu.assertTrue(subs <= 10 * #s, subs .. " pieces looked up for a text of " .. #s)
end

os.exit(lu.LuaUnit.run(), true)
