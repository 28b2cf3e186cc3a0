-- wordpiece.lua: qkv.wordpiece, BERT's tokenizer from a vocab.txt, as the
-- tokenizers package runs it (BertTokenizerFast): the normaliser and
-- pre-tokenizer (qkv.text, libutf8proc: control characters dropped, lower
-- case a character at a time, accents stripped, punctuation and CJK
-- ideographs split), then greedy
-- longest-match-first word pieces ("##" marks a piece inside a word; a
-- word with no split, or over 100 characters, is [UNK]).
--
--   local tok = qkv.wordpiece.load("vocab.txt" [, {lower = true, max_length = 512}])
--   tok:tokenize("the river bank")      -> {"the", "river", "bank"}
--   tok:encode({"a", "b c"})            -> tokens, input_ids, attention_mask, token_type_ids
--   tok:decode(ids)                     -> text
--
-- The special tokens ([CLS], [SEP], [PAD], [MASK], [UNK]) written in a
-- text stay whole, as transformers keeps them. Ids are 0-based, the line
-- numbers of vocab.txt less one.

local qkv = require "qkv"
local text = require "qkv.text"
local caller = require "qkv.caller"

local M = {}
local SOURCE = debug.getinfo(1, "S").source
local MAX_WORD = 100          -- BertTokenizer's max_input_chars_per_word

local function fail(msg, ...)
  error(string.format(msg, ...), caller(SOURCE, true))
end

local Tokenizer = {}
Tokenizer.__index = Tokenizer
M.Tokenizer = Tokenizer       -- the class, for qkv.doc

local SPECIALS = {"[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"}

function M.load(path, opts)
  if type(path) ~= "string" then
    fail("wordpiece.load: bad argument #1 (a vocab.txt path expected, got %s)", type(path))
  end
  if path:find("%z") then       -- the system would open the path before the NUL
    fail("wordpiece.load: bad argument #1 (the path holds a NUL byte)")
  end
  if opts ~= nil and type(opts) ~= "table" then
    fail("wordpiece.load: bad argument #2 (options table expected, got %s)", type(opts))
  end
  local bad
  bad, opts = qkv._checkopts("wordpiece.load", opts, {"lower", "strip_accents", "max_length"},
                             {"lower", "strip_accents"})
  if bad then fail("%s", bad) end
  local f, why = io.open(path, "rb")
  if not f then fail("wordpiece.load: cannot open %s", why) end
  local text, rerr = f:read("a")      -- nil for a folder
  f:close()
  if not text then fail("wordpiece.load: cannot read %s: %s", path, tostring(rerr)) end
  local vocab, itos, longest = {}, {}, 0
  if text ~= "" and text:sub(-1) ~= "\n" then text = text .. "\n" end
  for line in text:gmatch("(.-)\n") do   -- as load_vocab: a token per line, the id its row
    itos[#itos + 1] = line
    vocab[line] = #itos - 1
    longest = math.max(longest, #line)
  end
  if #itos == 0 then fail("wordpiece.load: %s holds no tokens", path) end
  local self = setmetatable({vocab = vocab, itos = itos, path = path, longest = longest,
                             lower = opts.lower ~= false,
                             max_length = opts.max_length or 512}, Tokenizer)
  self.strip_accents = opts.strip_accents
  if self.strip_accents == nil then self.strip_accents = self.lower end
  if math.type(self.max_length) ~= "integer" or self.max_length < 2 then
    fail("wordpiece.load: max_length must be an integer >= 2, got %s", tostring(opts.max_length))
  end
  self.specials = {}                  -- those in the vocabulary, which stay whole
  for _, s in ipairs(SPECIALS) do
    local key = s:sub(2, -2):lower()
    if vocab[s] == nil and s ~= "[MASK]" then
      fail("wordpiece.load: %s has no %s token", path, s)
    end
    self[key] = s
    if vocab[s] then self.specials[#self.specials + 1] = s end
  end
  return self
end

-- one word's pieces appended to out
local function pieces(self, word, out)
  -- over MAX_WORD characters (code points, as the reference counts them)
  -- it is [UNK], known from where its character MAX_WORD + 1 starts: the
  -- rest is never walked (a 10 MB word took seconds to index)
  local over = #word > MAX_WORD and utf8.offset(word, MAX_WORD + 1)
  if over and over <= #word then out[#out + 1] = self.unk; return end
  local at = {}                       -- byte offset of each character
  for p in utf8.codes(word) do at[#at + 1] = p end
  local n = #at
  at[n + 1] = #word + 1
  local got, start, last, longest = {}, 1, 0, self.longest
  while start <= n do
    -- the last character a piece from start may reach: none is longer
    -- than the vocabulary's longest token (trying up to 100 characters at
    -- each start cost 10 µs a byte of text)
    last = math.max(last, start - 1)
    while last < n and at[last + 2] - at[start] <= longest do last = last + 1 end
    local stop, piece = last, nil
    while stop >= start do
      local s = word:sub(at[start], at[stop + 1] - 1)
      if start > 1 then s = "##" .. s end
      if self.vocab[s] then piece = s; break end
      stop = stop - 1
    end
    if piece == nil then out[#out + 1] = self.unk; return end
    got[#got + 1] = piece
    start = stop + 1
  end
  table.move(got, 1, #got, #out + 1, out)
end

-- the special token that starts earliest at or after i in s, and where;
-- next_at keeps where each was found, and a token is looked for again
-- only once i has passed that place, so the scan reads the text about
-- once per special token (looking for each from i every time read the
-- rest of the text for each token found: 24 s for ("[CLS]"):rep(40000))
local function next_special(self, s, i, next_at)
  local best, at
  for _, t in ipairs(self.specials) do
    local p = next_at[t]
    if p ~= false and (p == nil or p < i) then
      p = s:find(t, i, true) or false
      next_at[t] = p
    end
    if p and (at == nil or p < at) then best, at = t, p end
  end
  return best, at
end

-- bert_words on s[i, j], cut into calls of about CHUNK bytes so that no
-- one C call runs long (the hook that stops a script on Ctrl-C runs
-- between calls). A cut goes before an ASCII space or punctuation
-- character: it ends a word anyway, no normalisation joins it to what
-- comes before, and so the words are the same as from one call.
local CHUNK = 1 << 16
local CUT = "[ \t\n\r!-/:-@%[-`{-~]"         -- BERT's ASCII whitespace and punctuation

local function words(self, s, i, j, out)
  while i <= j do
    local stop = j
    if j - i >= CHUNK then stop = math.min(j, (s:find(CUT, i + CHUNK) or j + 1) - 1) end
    local ok, w = pcall(text.bert_words, s:sub(i, stop), self.lower, self.strip_accents)
    if not ok then             -- where in the whole text, not in this call's part
      fail("tokenize: %s", (tostring(w):gsub("^bert_words: ", "")
        :gsub("%(at byte (%d+)%)", function(b) return ("(at byte %d)"):format(i + b - 1) end)))
    end
    for _, word in ipairs(w) do pieces(self, word, out) end
    i = stop + 1
  end
end

-- tok:tokenize(text) -> the word pieces of one text, without [CLS]/[SEP]
function Tokenizer:tokenize(s)
  if type(s) ~= "string" then
    fail("tokenize: bad argument #1 (a string expected, got %s)", type(s))
  end
  local out, i, next_at = {}, 1, {}
  while i <= #s do
    local special, at = next_special(self, s, i, next_at)
    words(self, s, i, (at or #s + 1) - 1, out)
    if not special then break end
    out[#out + 1] = special
    i = at + #special
  end
  return out
end

local function texts_of(texts)
  if type(texts) == "string" then return {texts} end
  if type(texts) ~= "table" or #texts == 0 then
    fail("encode: texts must be a string or a non-empty list of strings, got %s",
         type(texts) == "table" and "an empty table" or type(texts))
  end
  for i, t in ipairs(texts) do
    if type(t) ~= "string" then fail("encode: text %d is a %s, not a string", i, type(t)) end
  end
  return texts
end

-- tok:encode(texts) -> {tokens, input_ids, attention_mask, token_type_ids}:
-- each text as [CLS] pieces [SEP], cut to max_length, padded with [PAD]
-- to the longest; ids (B, n) int64
function Tokenizer:encode(texts)
  texts = texts_of(texts)
  local rows, n = {}, 0
  for b, s in ipairs(texts) do
    local ok, p = pcall(self.tokenize, self, s)
    if not ok then fail("encode: text %d: %s", b, (tostring(p):gsub("^.-tokenize: ", ""))) end
    if #p > self.max_length - 2 then p = table.move(p, 1, self.max_length - 2, 1, {}) end
    table.insert(p, 1, self.cls)
    p[#p + 1] = self.sep
    rows[b] = p
    n = math.max(n, #p)
  end
  local B, pad = #rows, self.vocab[self.pad]
  local ids, mask = {}, {}
  for b, p in ipairs(rows) do
    local ri, rm = {}, {}
    for j = 1, n do
      ri[j] = p[j] and self.vocab[p[j]] or pad
      rm[j] = p[j] and 1 or 0
    end
    ids[b], mask[b] = ri, rm
  end
  return {tokens = rows, input_ids = qkv.tensor(ids, "int64"),
          attention_mask = qkv.tensor(mask, "int64"),
          token_type_ids = qkv.zeros({B, n}, "int64")}
end

-- tok:decode(ids) -> the text of 0-based ids (a list or a 1-D tensor),
-- pieces joined to their words and [PAD] left out
function Tokenizer:decode(ids)
  if qkv.is_tensor(ids) then ids = ids:tolist() end
  if type(ids) ~= "table" then
    fail("decode: bad argument #1 (a list or 1-D tensor of ids expected, got %s)", type(ids))
  end
  -- a word's pieces are gathered and joined once (appending each to the
  -- word so far copied it again for every piece)
  local words, word = {}, nil
  for i, id in ipairs(ids) do
    local t = math.type(id) == "integer" and self.itos[id + 1]
    if not t then fail("decode: id %d is %s, not an id of the vocabulary (0 to %d)", i,
                       tostring(id), #self.itos - 1) end
    if t ~= self.pad then
      if t:sub(1, 2) == "##" and word then word[#word + 1] = t:sub(3)
      else
        word = {t}
        words[#words + 1] = word
      end
    end
  end
  for k, w in ipairs(words) do words[k] = table.concat(w) end
  return table.concat(words, " ")
end

require("qkv.methods").guard(Tokenizer, "tok", "Tokenizer")   -- tok.encode() says so

return qkv._strict(M, "qkv.wordpiece")      -- a misspelt name is an error, not nil
