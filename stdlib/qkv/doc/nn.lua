-- doc/nn.lua: qkv.doc entries of qkv.nn, the attention modules, of the
-- Module methods every module has (and ModuleList's), and of
-- qkv.nn.functional's own functions. (qkv.nn.cosine_similarity is written
-- once with qkv.cosine_similarity, in doc/core.lua.)

local INIT = "Weights are stored (d_in, d_out), the transpose of PyTorch's " ..
  "Linear.weight, and initialise as PyTorch's nn.Linear does, uniform in " ..
  "±1/sqrt(d_in), from qkv's generator (qkv.seed makes them reproducible). "

local OPTS = "opts go to qkv.attention: mask, causal, scale. "

-- PyTorch's factory keywords, in every constructor that makes parameters
local FACTORY = "dtype (\"float32\"; \"float64\" draws in float64, \"float16\" and " ..
  "\"bfloat16\" hold the float32 draws converted, as m:to(dtype) gives them) " ..
  "and device (\"cpu\" or \"cuda\": the parameters made there, as m:to(device)), " ..
  "PyTorch's factory keywords"

local entries = {
  ---------------------------------------------------------------- modules
  {name = "qkv.nn.Linear", sig = "qkv.nn.Linear(d_in, d_out [, opts])", group = "modules",
   doc = [[A fully connected layer: m(x) is x weightᵀ + bias, with PyTorch's
weight (d_out, d_in) and bias (d_out,), so x (..., d_in) gives (..., d_out).
opts: bias (default true; false leaves bias nil), ]] .. FACTORY .. [[. ]] .. INIT .. [[d_in or d_out may be 0 (d_in = 0: a bias of
zeros, m(x) the bias on each row); sizes that are not non-negative
integers, or an x that is not a tensor, are errors naming them. As
torch.nn.Linear.]],
   example = [=[qkv.seed(1)
local m = qkv.nn.Linear(4, 2)
print(m, m(qkv.ones(3, 4)).shape)
--> Linear(in_features=4, out_features=2, bias=true)	(3, 2)]=]},

  {name = "qkv.nn.GELU", sig = "qkv.nn.GELU([approximate])", group = "modules",
   doc = [[The GELU activation as a module: m(x) is qkv.gelu(x), the exact
form with erf, with approximate "none" (the default); with "tanh" (or
{approximate = "tanh"}) PyTorch's approximation 0.5 x (1 + tanh(sqrt(2/pi)
(x + 0.044715 x^3))), in float32 for float16 and bfloat16. m.approximate
is read at each call. It has no weights. An x that is not a tensor is an
error. As torch.nn.GELU.]]},

  {name = "qkv.nn.ReLU", sig = "qkv.nn.ReLU()", group = "modules",
   doc = [[The ReLU activation as a module: m(x) is qkv.relu(x), max(x, 0)
elementwise. It has no weights. PyTorch's inplace has no counterpart, so
any argument is an error rather than ignored. As torch.nn.ReLU.]],
   example = [=[print(qkv.nn.ReLU()(qkv.tensor{-1, 0, 2}))   --> tensor([0., 0., 2.])]=]},

  {name = "qkv.nn.SiLU", sig = "qkv.nn.SiLU()", group = "modules",
   doc = [[The SiLU (swish) activation as a module: m(x) is qkv.silu(x),
x sigmoid(x) elementwise. It has no weights. Any argument is an error
(no inplace). As torch.nn.SiLU.]],
   example = [=[print(qkv.nn.SiLU()(qkv.tensor{0, 1}))   --> tensor([0.0000, 0.7311])]=]},

  {name = "qkv.nn.Tanh", sig = "qkv.nn.Tanh()", group = "modules",
   doc = [[The tanh activation as a module: m(x) is qkv.tanh(x)
elementwise. It has no weights. Any argument is an error. As
torch.nn.Tanh.]],
   example = [=[print(qkv.nn.Tanh()(qkv.tensor{0, 100}))   --> tensor([0., 1.])]=]},

  {name = "qkv.nn.Softmax", sig = "qkv.nn.Softmax(dim)", group = "modules",
   doc = [[Softmax along dim as a module: m(x) is qkv.softmax(x, m.dim).
dim counts from 1, or from the end when negative (-1 is the last), and
may come as PyTorch's keyword, Softmax{dim = -1}. It is required: PyTorch's
implicit dim is deprecated, so Softmax() is an error, as are a dim of 0
and one out of x's range. It has no weights. As torch.nn.Softmax(dim),
whose dim counts from 0.]],
   example = [=[local m = qkv.nn.Softmax(-1)
print(m, m(qkv.tensor{{0, 0}, {0, math.log(3)}}))
--> Softmax(dim=-1)	tensor([[0.5000, 0.5000],
-->         [0.2500, 0.7500]])]=]},

  {name = "qkv.nn.RMSNorm", sig = "qkv.nn.RMSNorm(shape [, opts])", group = "modules",
   doc = [[Root-mean-square normalisation over the last dims given by shape (a
size or a table of sizes): m(x) is qkv.rms_norm(x, shape, m.weight, m.eps).
weight starts at ones, of that shape. opts: eps (nil: the machine epsilon
of x's computed dtype, as qkv.rms_norm), elementwise_affine (true; false:
no weight), ]] .. FACTORY .. [[. As torch.nn.RMSNorm.]],
   example = [=[local m = qkv.nn.RMSNorm(2)
print(m)
print(m(qkv.tensor{{3, 4}}):detach())
--> RMSNorm((2,), eps=None, elementwise_affine=true)
--> tensor([[0.8485, 1.1314]])]=]},

  {name = "qkv.nn.LayerNorm", sig = "qkv.nn.LayerNorm(shape [, opts])", group = "modules",
   doc = [[Layer normalisation over the last dims given by shape (a size or a
table of sizes): m(x) is qkv.layer_norm(x, shape, m.weight, m.bias, m.eps).
weight starts at ones and bias at zeros, of that shape. opts: eps (1e-5),
elementwise_affine (true; false: no weight and bias), bias (true), ]] .. FACTORY .. [[. As
torch.nn.LayerNorm.]],
   example = [=[local ln = qkv.nn.LayerNorm(3)
print(ln)
print(ln(qkv.tensor{{1, 2, 3}}))
--> LayerNorm((3,), eps=1e-05, elementwise_affine=true)
--> tensor([[-1.2247,  0.0000,  1.2247]], grad_fn=<NativeLayerNormBackward0>)]=]},

  {name = "qkv.nn.Dropout", sig = "qkv.nn.Dropout([p])", group = "modules",
   doc = [[Dropout as a module: m(x) is qkv.dropout(x, m.p, m.training), so it
zeros elements with probability p (default 0.5) while training and is the
identity after m:eval(). It has no weights. PyTorch's inplace has no
counterpart, so a second argument is an error rather than ignored. As
torch.nn.Dropout.]]},

  {name = "qkv.nn.Embedding", sig = "qkv.nn.Embedding(num_embeddings, dim [, opts])",
   group = "modules",
   doc = [[A lookup table of num_embeddings rows of dim: m(ids) is
qkv.embedding(ids, m.weight), for int64 ids (1-based) of any shape. weight starts
from N(0, 1), as PyTorch's, drawn from qkv's generator. opts:
]] .. FACTORY .. [[. As torch.nn.Embedding.]],
   example = [=[qkv.seed(0)
local e = qkv.nn.Embedding(10, 4)
print(e, e(qkv.tensor({{1, 2}, {3, 4}}, "int64")).shape)
--> Embedding(10, 4)	(2, 2, 4)]=]},

  {name = "qkv.nn.Identity", sig = "qkv.nn.Identity()", group = "modules",
   doc = [[A module that returns its input: m(x) is x. It has no weights.
TokenAligner's "identity" method uses it. As torch.nn.Identity.]]},

  {name = "qkv.nn.Sequential", sig = "qkv.nn.Sequential(m1, m2, ...)", group = "modules",
   doc = [[Modules chained in order: m(x) passes x through m1, then m2, and
so on. The modules are m[1], m[2], ... and #m counts them; their weights
are named "1.weight", "2.bias", ... in m:named_parameters(). m[i] = module replaces one
(m[-1] the last); past the end, nil or anything not a module is an error,
as is an argument that is not a module. As torch.nn.Sequential.]]},

  {name = "qkv.nn.ModuleList", sig = "qkv.nn.ModuleList([modules])", group = "modules",
   doc = [[Modules held in a list: m[1], m[2], ..., with #m and ipairs(m),
and m[-1] for the last (m[0] is an error: positions count from 1). Their
weights are named by position in m:parameters() and m:named_parameters()
("1.weight", "3.bias"), as Sequential's, and m:to, m:train and m:load reach them.
m:append(module), m:extend(modules) and m:insert(index, module) add to it;
m[i] = module replaces one (m[-1] the last), and past the end (PyTorch's
IndexError), nil or anything not a module is an error. It has no forward:
call its modules in a loop. As torch.nn.ModuleList.]],
   example = [=[local layers = qkv.nn.ModuleList{qkv.nn.Linear(4, 4), qkv.nn.ReLU()}
layers:append(qkv.nn.Linear(4, 2))
local x = qkv.ones(3, 4)
for _, layer in ipairs(layers) do x = layer(x) end
print(#layers, x.shape, layers[-1])
--> 3	(3, 2)	Linear(in_features=4, out_features=2, bias=true)]=]},

  {name = "qkv.nn.TransformerEncoderLayer",
   sig = "qkv.nn.TransformerEncoderLayer(d_model, nhead [, opts])", group = "modules",
   doc = [[PyTorch's transformer encoder layer built from qkv's modules:
self-attention (m.self_attn, a MultiHeadAttention with biases), then a
feed-forward block (m.linear1, activation, m.dropout, m.linear2), each
with its residual and LayerNorm (m.norm1, m.norm2) after it, or before it
with norm_first. opts: dim_feedforward (2048), dropout (0.1, also on the
attention weights), activation ("relu", "gelu", a function or a module),
layer_norm_eps (1e-5), batch_first (true: src is (N, L, d_model); false:
(L, N, d_model); (L, d_model) unbatched either way), norm_first (false),
bias (true), ]] .. FACTORY .. [[. m(src [, {src_mask =, src_key_padding_mask =, is_causal =}])
takes PyTorch's masks: bool true = not allowed, float added to the
scores; src_mask is (L, L) or (N * nhead, L, L), src_key_padding_mask (N,
L), and is_causal = true applies the causal mask (PyTorch wants src_mask
beside it, as a hint). As torch.nn.TransformerEncoderLayer, whose weights
load after splitting in_proj into W_Q, W_K, W_V and transposing each.]],
   example = [=[qkv.seed(0)
local layer = qkv.nn.TransformerEncoderLayer(16, 4, {dim_feedforward = 32, dropout = 0})
local pad = qkv.tensor{{false, false, false}, {false, false, true}}
print(layer(qkv.randn(2, 3, 16), {src_key_padding_mask = pad}).shape)   --> (2, 3, 16)
print(layer:nparams())   --> 2224]=]},

  {name = "qkv.nn.SelfAttention", sig = "qkv.nn.SelfAttention(d_model, d_k [, opts])",
   group = "modules",
   doc = [[Single-head self-attention: out, weights = m(x [, opts]), with Q,
K and V projected from x by W_Q, W_K, W_V (d_model, d_k). x is
(..., n, d_model), out (..., n, d_k) and weights (..., n, n).
]] .. OPTS .. INIT .. [[The constructor's opts: bias (false; true adds b_Q,
b_K, b_V), ]] .. FACTORY .. [[. Sizes that are not positive integers are errors.]],
   example = [=[qkv.seed(1)
local out, w = qkv.nn.SelfAttention(8, 4)(qkv.randn(2, 5, 8))
print(out.shape, w.shape)   --> (2, 5, 4)	(2, 5, 5)]=]},

  {name = "qkv.nn.CrossAttention", sig = "qkv.nn.CrossAttention(d_model, d_k [, opts])",
   group = "modules",
   doc = [[Single-head cross-attention: out, weights = m(text, image
[, opts]), with Q from text and K, V from image. The weights W_Q, W_K, W_V
are (d_model, d_k); text is (..., n_q, d_model), image (..., n_kv,
d_model), out (..., n_q, d_k) and weights (..., n_q, n_kv).
]] .. OPTS .. INIT .. [[The constructor's opts are SelfAttention's.]]},

  {name = "qkv.nn.MultiHeadAttention", sig = "qkv.nn.MultiHeadAttention(d_model, h [, opts])",
   group = "modules",
   doc = [[Multi-head self-attention: out, weights = m(x [, opts]), with h
heads and projections W_Q, W_K, W_V, W_O (d_model, d_model). It projects x
(..., n, d_model), splits the heads (qkv.heads), attends, merges them and
projects by W_O: out is (..., n, d_model) and weights (..., h, n, n), and a
(B, 1, n) padding mask in opts.mask, or a (B, n) opts.key_padding_mask,
gets its head dim added. Called as PyTorch's, m(query, key, value
[, opts]) takes Q, K and V from the three; d_model must be divisible by h.
]] .. INIT .. [[The constructor's opts: bias (false; true adds b_Q, b_K,
b_V, b_O), ]] .. FACTORY .. [[; as torch.nn.MultiheadAttention with
batch_first (and, by default, no biases).]]},

  {name = "qkv.nn.MultiHeadCrossAttention",
   sig = "qkv.nn.MultiHeadCrossAttention(d_model, h [, opts])", group = "modules",
   doc = [[Multi-head cross-attention: out, weights = m(text, image
[, opts]), with h heads, Q from text and K, V from image. text is
(..., n_text, d_model) and image (..., n_image, d_model), the weights W_Q,
W_K, W_V, W_O are (d_model, d_model), out is (..., n_text, d_model) and
weights (..., h, n_text, n_image). d_model must be divisible by h.
]] .. INIT .. [[The constructor's opts are MultiHeadAttention's.]],
   example = [=[qkv.seed(42)
local mhca = qkv.nn.MultiHeadCrossAttention(16, 4)
local out, w = mhca(qkv.randn(3, 16), qkv.randn(9, 16))
print(out.shape, w.shape)   --> (3, 16)	(4, 3, 9)]=]},

  {name = "qkv.nn.TokenAligner",
   sig = "qkv.nn.TokenAligner(d_vision, d_text [, method] [, opts])", group = "modules",
   doc = [[Maps image tokens (..., n, d_vision) into the text space
(..., n, d_text) through qkv.align: m(image_tokens). method is "linear"
(the default: m.proj is a Linear), "mlp" (m.proj is Sequential(Linear,
GELU, Linear), the hidden size d_text) or "identity" (which needs
d_vision == d_text). opts: ]] .. FACTORY .. [[. Another method, or sizes
that are not positive integers, are errors. ]] .. INIT,
   example = [=[print(qkv.nn.TokenAligner(768, 512):nparams())   --> 393728]=]},

  {name = "qkv.nn.AlignedCrossAttention",
   sig = "qkv.nn.AlignedCrossAttention(d_vision, d_text, h [, method] [, opts])",
   group = "modules",
   doc = [[Aligns the image tokens, then lets the text attend to them:
out, weights = m(text, image [, opts]) is m.cross_attn(text,
m.aligner(image), opts). m.aligner is a TokenAligner(d_vision, d_text,
method) and m.cross_attn a MultiHeadCrossAttention(d_text, h). text is
(..., n_text, d_text), image (..., n_image, d_vision), out
(..., n_text, d_text) and weights (..., h, n_text, n_image). opts: ]] .. FACTORY .. [[.]]},

  ---------------------------------------------------------------- Module methods
  {name = "Module:forward", sig = "m:forward(...)", group = "module methods",
   doc = [[Runs the module: calling m(...) is m:forward(...). The arguments
and results are each class's, as its entry says: m(x) for Linear, GELU,
Identity, Sequential and TokenAligner; out, weights = m(x [, opts]) for
the self-attention modules and m(text, image [, opts]) for the cross ones.
As torch.nn.Module.forward.]]},

  {name = "Module:parameters", sig = "m:parameters()", group = "module methods",
   doc = [[The module's weights as a list of tensors. Its own come first, in
the order they were made, then its submodules'. The tensors are the
module's own, not copies. A tensor held in two places (a layer used twice,
a tied weight) is listed once; a weight set to nil (m.bias = nil,
PyTorch's m.bias = None) is not listed. m:named_parameters() gives the
same tensors with their dotted names. As torch.nn.Module.parameters (a
list here).]],
   example = [=[for _, p in ipairs(qkv.nn.Linear(2, 3):parameters()) do print(p.shape) end
--> (3, 2)
--> (3,)]=]},

  {name = "Module:named_parameters", sig = "m:named_parameters([opts])", group = "module methods",
   doc = [[An iterator over the module's weights as name, tensor, for a
generic for: the tensors of m:parameters(), in its order, with their dotted
names ("aligner.proj.weight"; a tensor held in two places under its first). A Sequential's submodules are named by their 1-based positions, as
m[1] reaches them ("1.weight"), where PyTorch counts from 0 ("0.weight"). opts:
prefix (put before each name, with a dot), recurse (true; false gives m's
own weights only). As torch.nn.Module.named_parameters.]],
   example = [=[local m = qkv.nn.Sequential(qkv.nn.Linear(2, 3), qkv.nn.GELU(), qkv.nn.Linear(3, 1))
for name, p in m:named_parameters() do print(name, p.shape) end
--> 1.weight	(3, 2)
--> 1.bias	(3,)
--> 3.weight	(1, 3)
--> 3.bias	(1,)]=]},

  {name = "Module:append", sig = "m:append(module)", group = "module methods",
   doc = [[Adds module at the end of a ModuleList m, at position #m + 1, and
returns m. Its weights are named by that position. Anything but a module
is an error. As torch.nn.ModuleList.append.]],
   example = [=[local l = qkv.nn.ModuleList():append(qkv.nn.Tanh())
print(#l, l[1])   --> 1	Tanh()]=]},

  {name = "Module:extend", sig = "m:extend(modules)", group = "module methods",
   doc = [[Adds each of modules (a list, or another ModuleList) at the end of
a ModuleList m, in order, and returns m. Every item is checked first, so
a list with something that is not a module adds nothing. As
torch.nn.ModuleList.extend.]],
   example = [=[local l = qkv.nn.ModuleList{qkv.nn.ReLU()}:extend{qkv.nn.Linear(2, 2), qkv.nn.Tanh()}
print(#l, l[3])   --> 3	Tanh()]=]},

  {name = "Module:insert", sig = "m:insert(index, module)", group = "module methods",
   doc = [[Puts module at position index of a ModuleList m (1 to #m + 1, or
negative from the end: -1 puts it before the last), moving the later ones
up, and returns m. The moved modules' weights are named by their new
positions. An index out of range, or 0, is an error. As
torch.nn.ModuleList.insert, whose index counts from 0.]],
   example = [=[local l = qkv.nn.ModuleList{qkv.nn.ReLU(), qkv.nn.Tanh()}:insert(1, qkv.nn.SiLU())
print(l[1], l[2], l[3])   --> SiLU()	ReLU()	Tanh()]=]},

  {name = "Module:state_dict", sig = "m:state_dict()", group = "module methods",
   doc = [[The module's weights as a table from dotted name to tensor, the
names of m:named_parameters() and, for a tensor held in two places, each place's
name. The tensors are shared with the module, not copied.
m:load(state_dict) reads it back. As torch.nn.Module.state_dict.]]},

  {name = "Module:nparams", sig = "m:nparams()", group = "module methods",
   doc = [[The number of weights of the module and its submodules, the sum
of numel over m:parameters(). It is an integer. As
sum(p.numel() for p in m.parameters()) in PyTorch.]]},

  {name = "Module:train", sig = "m:train([mode])", group = "module methods",
   doc = [[Puts m and its submodules in training mode (mode true, the
default) or evaluation mode (false), and returns m. Only Dropout behaves
differently; m.training says which mode a module is in. As
torch.nn.Module.train.]],
   example = [=[local m = qkv.nn.Sequential(qkv.nn.Linear(2, 2), qkv.nn.Dropout(0.1))
m:eval()
print(m.training, m[2].training, m:train()[2].training)
--> false	false	true]=]},

  {name = "Module:to", sig = "m:to(device_or_dtype)", group = "module methods",
   doc = [[Moves every parameter of m and its submodules to a device, "cpu"
or "cuda", or converts it to a float dtype ("float32", "float64",
"float16", "bfloat16"), and returns m; the parameters are new tensors that
still require grad, so make an optimizer after this (one made before says
so at its step). m:cuda(), m:cpu(), m:double() and m:float() are
m:to("cuda"), m:to("cpu"), m:to("float64") and m:to("float32"). Another
name is an error. As torch.nn.Module.to.]],
   example = [=[local m = qkv.nn.Linear(2, 2):to("cpu")
print(m.weight.device, m:double().weight.dtype)   --> cpu	float64]=]},

  {name = "Module:double", sig = "m:double()", group = "module methods",
   doc = [[m:to("float64"): every parameter converted to float64, children's
too, and m returned. The parameters are new tensors that require grad. The
module then takes float64 inputs. As torch.nn.Module.double.]]},

  {name = "Module:float", sig = "m:float()", group = "module methods",
   doc = [[m:to("float32"): every parameter converted to float32, children's
too, and m returned. The parameters are new tensors that require grad. The
module then takes float32 inputs. As torch.nn.Module.float.]]},

  {name = "Module:cuda", sig = "m:cuda()", group = "module methods",
   doc = [[m:to("cuda"): every parameter moved to the GPU, in place. The
module then takes GPU tensors. As torch.nn.Module.cuda.]]},

  {name = "Module:cpu", sig = "m:cpu()", group = "module methods",
   doc = [[m:to("cpu"): every parameter moved back to the host, in place.
The module then takes CPU tensors. As torch.nn.Module.cpu.]]},

  {name = "Module:eval", sig = "m:eval()", group = "module methods",
   doc = [[Puts m and its submodules in evaluation mode, m:train(false), and
returns m. Dropout then passes its input through. As
torch.nn.Module.eval.]]},

  {name = "Module:load", sig = "m:load(src)", group = "module methods",
   doc = [[Copies the weights of src, a module of the same structure or a
state_dict, into m's own tensors, and returns m: whoever holds them (an
optimizer) sees the new values. Every name must be present with the same
shape and a float dtype (converted as copy_ converts) and no other name may
be there; a missing tensor, a shape that differs, a dtype that is not a
float or an unexpected name is an error naming it, raised before anything
is copied. The copies share nothing with src. As
torch.nn.Module.load_state_dict.]]},

  {name = "Module:load_state_dict", sig = "m:load_state_dict(sd [, {strict = true}])",
   group = "module methods",
   doc = [[Copies a state_dict into m, as PyTorch's load_state_dict: sd has
qkv's names (m:state_dict()) or PyTorch's for the same architecture, as
PyTorch saved it (safetensors.torch.save_file, read by
qkv.load_safetensors): Linear, LayerNorm, Embedding and
TransformerEncoderLayer have PyTorch's names and layouts, and an
nn.MultiheadAttention's packed in_proj_weight, in_proj_bias and out_proj
become a MultiHeadAttention's W_Q, W_K, W_V, W_O and biases. It returns
{missing_keys = {...}, unexpected_keys = {...}}; with strict (the default)
either list not empty is an error naming them, raised before anything is
copied, and a shape that differs is an error always. As
torch.nn.Module.load_state_dict.]],
   example = [=[local a, b = qkv.nn.Linear(2, 2), qkv.nn.Linear(2, 2)
local r = b:load_state_dict(a:state_dict())
print(#r.missing_keys, qkv.allclose(a.weight, b.weight))   --> 0	true]=]},

  {name = "Module:half", sig = "m:half()", group = "module methods",
   doc = [[m:to("float16"): every parameter and float buffer converted to
float16, children's too, and m returned. The parameters are new tensors
that require grad. As torch.nn.Module.half.]]},

  {name = "Module:bfloat16", sig = "m:bfloat16()", group = "module methods",
   doc = [[m:to("bfloat16"): every parameter and float buffer converted to
bfloat16, children's too, and m returned. The parameters are new tensors
that require grad. As torch.nn.Module.bfloat16.]]},

  {name = "qkv.nn.Module", sig = "qkv.nn.Module(name)", group = "modules",
   doc = [[A module class of your own, as `class Name(nn.Module)`: give the
class an init(self, ...) method (PyTorch's __init__, with no super call:
the instance is ready when init runs) and a forward(self, ...); calling
the class makes one, and calling that runs forward. A module put in a field is a submodule, a
qkv.nn.Parameter a parameter and self:register_buffer(name, t) a buffer, as
PyTorch's assignments register them; every module method (parameters,
state_dict, load, to, train, apply...) works on it, and an error in its
forward names the class. The class is yours, not put in qkv.nn.]],
   example = [=[local Scale = qkv.nn.Module("Scale")
function Scale:init(d) self.g = qkv.nn.Parameter(qkv.ones(d)) end
function Scale:forward(x) return x * self.g end
local m = Scale(2)
print(m(qkv.tensor{1, 2}), m:nparams())   --> tensor([1., 2.], grad_fn=<MulBackward0>)	2]=]},

  {name = "qkv.nn.Parameter", sig = "qkv.nn.Parameter(t [, requires_grad])", group = "modules",
   doc = [[t as a parameter: a leaf tensor that requires grad (unless
requires_grad is false), t itself when it is a leaf, else a detached
tensor sharing its data. Put in a field of a module it is registered as
that module's parameter, as nn.Parameter is; a plain tensor in a field is
not. Only float tensors can require grad. As torch.nn.Parameter.]]},

  {name = "Module:register_buffer", sig = "m:register_buffer(name, t [, persistent])",
   group = "module methods",
   doc = [[Registers t as a buffer of m under name: state that is not a
parameter (a mask, running statistics), held in m[name]. to, cuda and
double move it (a float buffer also takes the dtype), state_dict holds it
unless persistent is false, and load fills it. A name that is already a
parameter or a submodule is an error. As torch.nn.Module.register_buffer.]]},

  {name = "Module:named_buffers", sig = "m:named_buffers()", group = "module methods",
   doc = [[Iterates over every buffer of m and its submodules: for name, t
in m:named_buffers() do, names dotted as state_dict's. Buffers set to nil
are skipped. The order is registration order, own first. As
torch.nn.Module.named_buffers.]]},

  {name = "Module:buffers", sig = "m:buffers()", group = "module methods",
   doc = [[The buffers of m and its submodules as a list of tensors, in
named_buffers' order. Buffers set to nil are left out. Use named_buffers
for their names. As torch.nn.Module.buffers (a list here).]]},

  {name = "Module:named_modules", sig = "m:named_modules()", group = "module methods",
   doc = [[Iterates over m and every module under it: for name, sub in
m:named_modules() do, m first under "", each module before its children,
names dotted as state_dict's ("layers.1.attn"). A module held in two places
comes under both names. As torch.nn.Module.named_modules.]]},

  {name = "Module:named_children", sig = "m:named_children()", group = "module methods",
   doc = [[Iterates over m's direct submodules: for name, sub in
m:named_children() do, in registration order. Their own submodules are not
listed. As torch.nn.Module.named_children.]]},

  {name = "Module:children", sig = "m:children()", group = "module methods",
   doc = [[m's direct submodules as a list, in registration order. Their own
submodules are not listed. As torch.nn.Module.children (a list here).]]},

  {name = "Module:apply", sig = "m:apply(f)", group = "module methods",
   doc = [[Calls f(sub) for every module under m, children before their
parents and m last, and returns m. It is the way to initialise weights
your own way. As torch.nn.Module.apply.]],
   example = [=[local m = qkv.nn.Sequential(qkv.nn.Linear(2, 2), qkv.nn.Linear(2, 1))
m:apply(function(sub)                           -- PyTorch's isinstance(sub, nn.Linear)
  if getmetatable(sub) == qkv.nn.Linear then qkv.no_grad(function() sub.weight:fill_(0.5) end) end
end)
print(m[2].weight)   --> tensor([[0.5000, 0.5000]], requires_grad=True)]=]},

  {name = "Module:requires_grad_", sig = "m:requires_grad_([flag])", group = "module methods",
   doc = [[Sets requires_grad of every parameter of m and its submodules to
flag (true by default) and returns m. m:requires_grad_(false) freezes a
part of a model: its parameters get no .grad. As
torch.nn.Module.requires_grad_.]]},

  ---------------------------------------------------------------- qkv.nn.functional
  {name = "qkv.nn.functional.linear", sig = "qkv.nn.functional.linear(input, weight [, bias])",
   group = "functions",
   doc = [[A linear map with PyTorch's layout, input weightᵀ + bias: weight is
(out_features, in_features) and bias (out_features,), so input (...,
in_features) gives (..., out_features), as nn.Linear's m.weight is:
F.linear(x, m.weight, m.bias) equals m(x); qkv.project takes the
transpose, (in, out). As PyTorch's, a 1-D weight (in_features,) gives
input's shape less its last dim, and bias may be 0-d (added to every
output; also (1,) with a 2-D weight). Shapes that disagree are an error
naming both. As torch.nn.functional.linear.]],
   example = [=[local F = qkv.nn.functional
local W = qkv.tensor{{1, 0, 0}, {0, 1, 1}}          -- (out 2, in 3)
print(F.linear(qkv.tensor{{1, 2, 3}}, W, qkv.tensor{10, 20}))   --> tensor([[11., 25.]])]=]},

  {name = "qkv.nn.functional.scaled_dot_product_attention",
   sig = "qkv.nn.functional.scaled_dot_product_attention(query, key, value [, opts])",
   group = "functions",
   doc = [[PyTorch's attention, softmax(Q Kᵀ · scale + mask) V, returning out
alone: query (..., L, E), key (..., S, E), value (..., S, Ev) give
(..., L, Ev). opts: attn_mask, a bool tensor (true = takes part, as
PyTorch's F takes it; nn.MultiheadAttention's is the opposite) or a float
one added to the scores, broadcast to (..., L, S); is_causal (query i sees
keys j <= i, aligned to the first key as PyTorch's, not beside attn_mask);
scale (1/sqrt(E)); dropout_p (0: the weights are dropped whenever it is
above 0, as PyTorch's F does, training or not); enable_gqa (false: key
and value with fewer heads than query, PyTorch's grouped-query heads, as
qkv.attention's). A query that may see no
key gives zeros, as PyTorch's. It runs qkv.attention (the fused kernel
without dropout) or, for a float mask, the scores, softmax and product.]],
   example = [=[local F = qkv.nn.functional
local q = qkv.tensor{{1, 0}}
local k = qkv.tensor{{1, 0}, {0, 1}}
local v = qkv.tensor{{1, 2}, {3, 4}}
print(F.scaled_dot_product_attention(q, k, v, {attn_mask = qkv.tensor{{true, false}}}))
--> tensor([[1., 2.]])
print(F.scaled_dot_product_attention(q, k, v, {attn_mask = qkv.tensor{{0, -math.huge}}}))
--> tensor([[1., 2.]])]=]},
}

-- examples of entries made by the helpers above
local EXAMPLES = {
  ["Module:eval"] = [=[local m = qkv.nn.Dropout()
print(m:eval().training)
--> false]=],
  ["qkv.nn.Dropout"] = [=[local d = qkv.nn.Dropout(0.2)
print(d, d:eval()(qkv.ones(2)))
--> Dropout(p=0.2)	tensor([1., 1.])]=],
}
for _, e in ipairs(entries) do e.example = e.example or EXAMPLES[e.name] end

return entries
