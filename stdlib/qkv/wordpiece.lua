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
  if opts ~= nil and type(opts) ~= "table" then
    fail("wordpiece.load: bad argument #2 (options table expected, got %s)", type(opts))
  end
  opts = opts or {}
  local f, why = io.open(path, "rb")
  if not f then fail("wordpiece.load: cannot open %s", why) end
  local text, rerr = f:read("a")      -- nil for a folder
  f:close()
  if not text then fail("wordpiece.load: cannot read %s: %s", path, tostring(rerr)) end
  local vocab, itos = {}, {}
  if text ~= "" and text:sub(-1) ~= "\n" then text = text .. "\n" end
  for line in text:gmatch("(.-)\n") do   -- as load_vocab: a token per line, the id its row
    itos[#itos + 1] = line
    vocab[line] = #itos - 1
  end
  if #itos == 0 then fail("wordpiece.load: %s holds no tokens", path) end
  local self = setmetatable({vocab = vocab, itos = itos, path = path,
                             lower = opts.lower ~= false,
                             max_length = opts.max_length or 512}, Tokenizer)
  self.strip_accents = opts.strip_accents
  if self.strip_accents == nil then self.strip_accents = self.lower end
  if math.type(self.max_length) ~= "integer" or self.max_length < 2 then
    fail("wordpiece.load: max_length must be an integer >= 2, got %s", tostring(opts.max_length))
  end
  for _, s in ipairs(SPECIALS) do
    local key = s:sub(2, -2):lower()
    if vocab[s] == nil and s ~= "[MASK]" then
      fail("wordpiece.load: %s has no %s token", path, s)
    end
    self[key] = s
  end
  return self
end

-- one word's pieces appended to out
local function pieces(self, word, out)
  local at = {}                       -- byte offset of each character
  for p in utf8.codes(word) do at[#at + 1] = p end
  local n = #at
  at[n + 1] = #word + 1
  if n > MAX_WORD then out[#out + 1] = self.unk; return end
  local got, start = {}, 1
  while start <= n do
    local stop, piece = n, nil
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

-- the special token that starts earliest at or after i in s, and where
local function next_special(self, s, i)
  local best, at
  for _, t in ipairs(SPECIALS) do
    if self.vocab[t] then
      local p = s:find(t, i, true)
      if p and (at == nil or p < at) then best, at = t, p end
    end
  end
  return best, at
end

-- tok:tokenize(text) -> the word pieces of one text, without [CLS]/[SEP]
function Tokenizer:tokenize(s)
  if type(s) ~= "string" then
    fail("tokenize: bad argument #1 (a string expected, got %s)", type(s))
  end
  local out, i = {}, 1
  while i <= #s do
    local special, at = next_special(self, s, i)
    local chunk = s:sub(i, (at or #s + 1) - 1)
    local ok, words = pcall(text.bert_words, chunk, self.lower, self.strip_accents)
    if not ok then fail("tokenize: %s", (tostring(words):gsub("^bert_words: ", ""))) end
    for _, w in ipairs(words) do pieces(self, w, out) end
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
  local words = {}
  for i, id in ipairs(ids) do
    local t = math.type(id) == "integer" and self.itos[id + 1]
    if not t then fail("decode: id %d is %s, not an id of the vocabulary (0 to %d)", i,
                       tostring(id), #self.itos - 1) end
    if t ~= self.pad then
      if t:sub(1, 2) == "##" and #words > 0 then words[#words] = words[#words] .. t:sub(3)
      else words[#words + 1] = t end
    end
  end
  return table.concat(words, " ")
end

return M
