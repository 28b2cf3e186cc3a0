-- doc/intro.lua: the texts of qkv.doc that are not one function's: help()
-- with no argument, the Tensor type, and each namespace's title, intro and
-- groups (the order of the groups is the order of the API reference).

local general = [[
$VERSION: Lua 5.4 with tensors and the attention primitives.

Using the REPL
  Type a statement or an expression. An expression's values print (tensors
  with the tensor printer); a trailing ; keeps them quiet, and _ holds the
  last result. An unfinished statement (a function, a loop) continues on a
  >> prompt. Errors print their message and a short traceback, and the
  session goes on.
  ?name or help(name) shows a function's signature and description:
  ?qkv.softmax, ?softmax, ?x:matmul, help(qkv.nn.Linear). help(qkv.nn)
  lists a namespace, help(x) for a tensor x lists the tensor methods.
  Tab completes globals, table fields, tensor methods and, inside a string,
  file names.
  Ctrl-C interrupts a running command, or clears the line at the prompt;
  Ctrl-D at an empty prompt exits.
  A command that takes over 10 ms shows its wall time at the right;
  qkv.repl.timing(false) turns that off.

Namespaces
  qkv        tensors, math and the attention primitives (help(qkv))
  x:method   tensor methods (help(x) for a tensor x, or help("Tensor"))
  qkv.nn     attention modules, with the methods m:parameters() etc.
  qkv.variants
             attention's variants as mask_mods and score_mods for
             qkv.attention: sliding windows, documents, ALiBi, ...
  qkv.plot   heatmaps and figures, in the terminal or as PNG files
  qkv.test   assertions for LuaUnit suites, which qkv test runs
  qkv.repl   the REPL's settings

dtypes: "float32" (the default), "float64", "float16", "bfloat16" (2 bytes,
computed in float32), "int64", "int32", "bool"; also as qkv.float32, ...
Devices: "cpu", and "cuda" when qkv.cuda_available() says a GPU is there:
x:cuda(), or qkv.set_default_device("cuda") for new tensors.
Dims and indices count from 1; a negative one counts from the end.
PyTorch's keywords go in a table as the last argument:
x:sum{dim = 2, keepdim = true}, qkv.zeros(2, 3, {dtype = "float64"}).
]]

local tensor = [[
Properties:
  x.shape     the sizes, a table that prints as (2, 3) and compares with ==
  x.dtype     "float32", "float64", "float16", "bfloat16", "int64",
              "int32" or "bool"
  x.device    "cpu" (or "cuda")
  x.ndim      the number of dims, as x:dim()
  #x          the size of dim 1
  x[i]        select along dim 1 (a number when x is 1-D); x[i] = v writes
  x[{i, {a, b}, {}}]  Torch7's indexing: a number selects, {a, b} narrows
              to a..b, {} keeps a dim; a view, and x[{...}] = v writes
  x.T, x.mT   a matrix's transpose; the transpose of the last two dims
Operators: + - * / ^ and unary - broadcast between tensors and numbers
(the product * is elementwise; the matrix product is x:matmul(y)).
tostring(x) and print(x) show the values as PyTorch does, and
local x <close> = ... frees x's storage at the end of its scope.]]

local namespaces = {
  {id = "qkv", title = "qkv",
   intro = "The qkv module: making tensors, math on them (each also a tensor " ..
     "method), the attention primitives, the runtime and files. In the qkv " ..
     "executable it is the global qkv; elsewhere require \"qkv\".",
   groups = {"making tensors", "math", "selection and indexing", "layers", "attention",
             "autograd", "mixed precision", "runtime", "files"}},
  {id = "Tensor", title = "Tensor methods",
   intro = "A tensor is a view (sizes, strides, offset, dtype) onto a " ..
     "reference-counted storage, with up to 8 dims. Methods are called as " ..
     "x:name(...); the math ones are also functions of qkv (x:sum(2) is " ..
     "qkv.sum(x, 2)).",
   groups = {"size and layout", "values", "views", "copies and devices",
             "math", "selection and indexing", "reductions", "in place", "attention",
             "autograd"}},
  {id = "qkv.variants", title = "qkv.variants",
   intro = "Attention's common variants, each a mask_mod (b, h, i, j) or a " ..
     "score_mod (score, b, h, i, j) for qkv.attention's options " ..
     "(stdlib/qkv/variants/, loaded on first use). The functions get " ..
     "symbolic values, counted from 1, traced once per call into a program " ..
     "the fused kernel runs per tile; docs/variants.md is the chapter.",
   groups = {"mask functions", "score functions"}},
  {id = "BlockMask", title = "BlockMask methods",
   intro = "What a block mask from qkv.block_mask has, called as bm:name(); " ..
     "its fields kinds, mask_mod, B, H, n_q, n_k and block say what it holds.",
   groups = {"block mask methods"}},
  {id = "qkv.nn", title = "qkv.nn",
   intro = "Attention modules in plain Lua on the primitives " ..
     "(stdlib/qkv/nn/, loaded on first use). A module is callable, " ..
     "keeps its weights as tensor fields stored (d_in, d_out), and prints " ..
     "like PyTorch's; weights initialise as PyTorch's nn.Linear from " ..
     "qkv.seed.",
   groups = {"modules", "functions"}},
  {id = "qkv.nn.functional", title = "qkv.nn.functional",
   intro = "PyTorch's torch.nn.functional names for qkv's functions, as " ..
     "local F = qkv.nn.functional: F.relu, F.gelu, F.silu, F.tanh, " ..
     "F.sigmoid, F.softmax, F.log_softmax, F.layer_norm, F.dropout and " ..
     "F.embedding are qkv's own (qkv.relu, ...; help(F.softmax) shows " ..
     "its entry), F.mse_loss, F.cross_entropy, F.nll_loss and F.cosine_similarity " ..
     "are qkv.nn's, with their arguments and 1-based dims and ids. Two are " ..
     "its own: linear, with PyTorch's (out, in) weight, and " ..
     "scaled_dot_product_attention, with PyTorch's masks. PyTorch's pad, " ..
     "one_hot, normalize and the other losses are not there.",
   groups = {"functions"}},
  {id = "qkv.optim", title = "qkv.optim",
   intro = "Optimizers for tensors that require grad (stdlib/qkv/optim/, " ..
     "loaded on first use), as PyTorch's torch.optim, and the schedulers " ..
     "of qkv.optim.lr_scheduler (stdlib/qkv/optim/lr_scheduler.lua), which set " ..
     "an optimizer's opt.lr as torch.optim.lr_scheduler's do.",
   groups = {"optimizers", "learning-rate schedulers"}},
  {id = "qkv.data", title = "qkv.data",
   intro = "PyTorch's torch.utils.data for tensors (stdlib/qkv/data.lua, " ..
     "loaded on first use): TensorDataset pairs tensors row by row, and " ..
     "DataLoader deals a dataset out in batches, in order or shuffled, for " ..
     "`for x, y in loader do`. Rows count from 1.",
   groups = {"data"}},
  {id = "qkv.amp", title = "qkv.amp",
   intro = "Mixed precision with PyTorch's names (stdlib/qkv/amp/, loaded on " ..
     "first use): GradScaler, torch.amp.GradScaler's dynamic loss scaling " ..
     "for float16 training; docs/mixed-precision.md tells the rest.",
   groups = {"loss scaling"}},
  {id = "GradScaler", title = "GradScaler methods",
   intro = "What a scaler from qkv.amp.GradScaler has, called as scaler:name().",
   groups = {"scaler methods"}},
  {id = "qkv.dist", title = "qkv.dist",
   intro = "One script run as several processes, the ranks, over Open MPI " ..
     "(stdlib/qkv/dist/ and the module qkv.mpi, loaded on first use): " ..
     "`mpirun -np 4 build/qkv script.lua`, or alone as a world of one. " ..
     "torch.distributed's names; docs/dist.md tells the rest.",
   groups = {"processes", "collectives", "point to point", "training", "attention"}},
  {id = "qkv.cuda", title = "qkv.cuda",
   intro = "The GPU (vm/cuda/, built into build/qkv_cuda.so when make finds " ..
     "nvcc and loaded on first use): memory, synchronisation, settings and " ..
     "events for timing. Each is an error saying why when qkv.cuda_available() is false.",
   groups = {"device", "timing"}},
  {id = "Event", title = "Event methods",
   intro = "What an event from qkv.cuda.Event has, called as event:name().",
   groups = {"event methods"}},
  {id = "Optimizer", title = "Optimizer methods",
   intro = "What every optimizer of qkv.optim has, called as opt:name().",
   groups = {"optimizer methods"}},
  {id = "LRScheduler", title = "LRScheduler methods",
   intro = "What every scheduler of qkv.optim.lr_scheduler has, called as sched:name().",
   groups = {"scheduler methods"}},
  {id = "qkv.bert", title = "qkv.bert",
   intro = "A pretrained BERT encoder (all-MiniLM-L6-v2 and its kin) read " ..
     "from a Hugging Face folder and run with the primitives " ..
     "(stdlib/qkv/bert.lua, loaded on first use); `make model` fetches the model.",
   groups = {"models"}},
  {id = "BertModel", title = "BertModel methods",
   intro = "What a model from qkv.bert.load has, called as model:name(...).",
   groups = {"model methods"}},
  {id = "qkv.wordpiece", title = "qkv.wordpiece",
   intro = "BERT's WordPiece tokenizer from a vocab.txt, as the tokenizers " ..
     "package runs it (stdlib/qkv/wordpiece.lua on qkv.text, libutf8proc; " ..
     "loaded on first use).",
   groups = {"tokenizers"}},
  {id = "Tokenizer", title = "Tokenizer methods",
   intro = "What a tokenizer from qkv.wordpiece.load has, called as tok:name(...).",
   groups = {"tokenizer methods"}},
  {id = "Module", title = "Module methods",
   intro = "What every qkv.nn module has, called as m:name(...) on a " ..
     "module m.",
   groups = {"module methods"}},
  {id = "qkv.plot", title = "qkv.plot",
   intro = "Heatmaps and figures (stdlib/qkv/plot/, loaded on first " ..
     "use). Without opts.file they draw in the terminal (24-bit colour, or " ..
     "plain text when stdout is not a terminal, NO_COLOR is set or " ..
     "TERM=dumb) and return nothing, so that the REPL does not print a " ..
     "figure twice; with opts.out = false they return the text instead of " ..
     "writing it (for tests and notebooks). With opts.file they write a PNG " ..
     "through cairo and return its layout in pixels.",
   groups = {"figures", "helpers"}},
  {id = "qkv.test", title = "qkv.test",
   intro = "Assertions for LuaUnit suites (stdlib/qkv/test.lua). The " ..
     "module also reaches LuaUnit's own functions, so qkv.test.assertEquals " ..
     "works too; in qkv, LuaUnit's assertEquals and assertNotEquals compare " ..
     "tensors (shape, dtype, values) and assertAlmostEquals(a, b, margin) " ..
     "on tensors is assertClose with atol = margin, rtol = 0.",
   groups = {"assertions"}},
  {id = "qkv.repl", title = "qkv.repl",
   intro = "The REPL's settings (stdlib/qkv/repl.lua).",
   groups = {"settings"}},
}

return {general = general, tensor = tensor, namespaces = namespaces}
