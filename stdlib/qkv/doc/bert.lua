-- doc/bert.lua: qkv.doc entries of qkv.bert (stdlib/qkv/bert.lua) and of
-- the model it loads. The examples need the real model, so they live in
-- docs/model.md (its blocks run where `make model` fetched it).

return {
  {name = "qkv.bert.load", sig = "qkv.bert.load([dir])", group = "models",
   doc = [[Loads a BERT encoder from a Hugging Face model folder: config.json
(read with qkv.json), model.safetensors (qkv.load_safetensors; names with or
without BertForX's "bert." prefix) and vocab.txt (qkv.wordpiece), with
sentence-transformers' pooling settings when 1_Pooling/ and modules.json are
there (mean pooling and L2 normalisation otherwise). Without dir it loads
all-MiniLM-L6-v2 from $QKV_MODEL_DIR, else from the repository's build/models/
where `make model` puts it (qkv.bert.default_dir() says where), from any
working folder; when it is not there the error says how to get it. A missing file, a config this encoder
would run wrongly (hidden_act other than "gelu", relative positions, heads
that do not divide hidden_size) and a missing or misshapen weight are
errors naming the file and the tensor. As transformers'
BertModel.from_pretrained(dir).]]},

  {name = "qkv.bert.default_dir", sig = "qkv.bert.default_dir()", group = "models",
   doc = [[The folder qkv.bert.load() reads when given none. It is $QKV_MODEL_DIR
when that is set. Else it is build/models/all-MiniLM-L6-v2 in the repository
whose stdlib this qkv runs, where `make model` fetches it.]]},

  {name = "BertModel:encode", sig = "model:encode(texts [, opts])", group = "model methods",
   doc = [[Tokenises texts (a string or a list of strings, padded into one
batch) and runs the encoder. Returns a table: tokens (each sentence's word
pieces, [CLS] ... [SEP]), input_ids and attention_mask (int64 (B, n); ids
0-based as in vocab.txt), last_hidden_state (B, n, hidden), hidden_states
(the embeddings and each layer's output), attentions (one (B, heads, n, n)
tensor a layer, unless opts.attentions is false) and embeddings (B,
hidden), the sentence embeddings of sentence-transformers. Padding gets
exactly zero weight. As a tokenizer call and BertModel(...,
output_attentions=True, output_hidden_states=True).]]},

  {name = "BertModel:embed", sig = "model:embed(texts)", group = "model methods",
   doc = [[The sentence embeddings (B, hidden) of texts alone. They are computed
with the fused attention (weights = false), which never holds the n × n
weights, and equal encode's embeddings. As sentence-transformers'
model.encode(texts).]]},

  {name = "BertModel:forward", sig = "model:forward(input_ids [, attention_mask [, token_type_ids [, opts]]])",
   group = "model methods",
   doc = [[The encoder on token ids: input_ids is an int64 (B, n) tensor of
0-based vocabulary ids, attention_mask (default all ones) has 1 for tokens
and 0 for padding, token_type_ids defaults to zeros. Returns
last_hidden_state, hidden_states and (unless opts.attentions is false) the
list of every layer's (B, heads, n, n) weights. More tokens than the model
has positions, or ids that are not int64 (B, n), are errors. As
transformers' BertModel.forward.]]},

  {name = "BertModel:pool", sig = "model:pool(hidden, attention_mask)", group = "model methods",
   doc = [[Sentence embeddings from hidden states (B, n, hidden): the mean over
the positions where attention_mask is nonzero (or the [CLS] row, when the
model's pooling config says so). The result is L2-normalised when the
model has a Normalize module. As sentence-transformers' Pooling and
Normalize.]]},

  {name = "qkv.wordpiece.load", sig = "qkv.wordpiece.load(path [, opts])", group = "tokenizers",
   doc = [[Reads a BERT vocabulary (vocab.txt: one token a line, its id the
line number less one) into a tokenizer. opts: lower (default true: lower
case and accents stripped, as uncased models want), strip_accents (default:
lower), max_length (default 512: encode cuts each text to this many tokens,
[CLS] and [SEP] included). The vocabulary must hold [CLS], [SEP], [PAD]
and [UNK]. qkv.bert.load makes one from the model folder (model.tokenizer).
As transformers' BertTokenizerFast(vocab_file).]],
   example = [=[local path = os.tmpname()
local f = io.open(path, "w")
f:write("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nriver\nbank\n##s\n,\n")
f:close()
local tok = qkv.wordpiece.load(path)
print(table.concat(tok:tokenize("The river, banks"), " "))   --> the river , bank ##s
os.remove(path)]=]},

  {name = "Tokenizer:tokenize", sig = "tok:tokenize(text)", group = "tokenizer methods",
   doc = [[The word pieces of one text, without [CLS] and [SEP]: control
characters dropped, the text lower-cased and its accents stripped (when the
tokenizer lowers; NFC-normalised when it keeps accents), split at whitespace, punctuation and
CJK ideographs, then each word cut greedily into the longest pieces the
vocabulary holds ("##" marks a piece inside a word); a word with no such
cut, or longer than 100 characters (code points; known from its first
101, the rest not walked), is [UNK]. Special tokens written in
the text ([MASK], [SEP], ...) stay whole. Invalid UTF-8 is an error. As
tokenizers' BertNormalizer, BertPreTokenizer and WordPiece, character for
character (Unicode from libutf8proc).]]},

  {name = "Tokenizer:encode", sig = "tok:encode(texts)", group = "tokenizer methods",
   doc = [[Tokenises texts (a string or a list of strings) into one padded
batch. Returns a table: tokens (each text's pieces, [CLS] ... [SEP], cut
to max_length), input_ids (int64 (B, n), 0-based ids, [PAD] after each
text's end), attention_mask (int64 (B, n): 1 for tokens, 0 for padding)
and token_type_ids (zeros). As tokenizer(texts, padding=True,
truncation=True) in transformers.]]},

  {name = "Tokenizer:decode", sig = "tok:decode(ids)", group = "tokenizer methods",
   doc = [[The text of 0-based ids (a list or a 1-D tensor): tokens joined by
spaces, each "##" piece glued to the word before it, [PAD] left out. An id
outside the vocabulary is an error naming it. As tokenizer.decode(ids).]]},
}
