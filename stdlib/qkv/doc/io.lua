-- doc/io.lua: qkv.doc entries of the files qkv reads and writes: tensors
-- in NumPy's .npy files (qkv.save, qkv.load) and .npz archives (qkv.savez,
-- qkv.loadz), and Hugging Face's safetensors files (qkv.save_safetensors,
-- qkv.load_safetensors).

local ATOMIC = "A regular file is written atomically: a temp file in the " ..
  "same folder, synced and renamed over the target, so a failed or killed " ..
  "save leaves the old file whole. A character device or a FIFO is written " ..
  "in place (it stays what it is); a folder, a socket or a block device is " ..
  "an error, and so is a path that holds a NUL byte. "

return {
  {name = "qkv.save", sig = "qkv.save(path, x)", group = "files",
   doc = [[Writes x to path: a tensor as a NumPy .npy file with np.save's
header (every dtype; bfloat16 as '|V2', as NumPy writes ml_dtypes'), a
table as a checkpoint, as torch.save writes a dict: tables, tensors (each
once: one held twice comes back as one), numbers (integers and floats kept
apart), booleans and strings, in a safetensors file whose metadata holds
the table's shape as JSON, so that loading runs nothing of the file's; a
function, a module (save its state_dict()) or a cycle is an error naming
where. ]] .. ATOMIC .. [[As np.save and torch.save.]],
   example = [=[local path = os.tmpname()
qkv.save(path, qkv.tensor{{1, 2}, {3, 4}})
print(qkv.load(path))
--> tensor([[1., 2.],
-->         [3., 4.]])
qkv.save(path, {weights = {w = qkv.ones(2)}, epoch = 3})
local ck = qkv.load(path)
print(ck.epoch, ck.weights.w)   --> 3	tensor([1., 1.])
os.remove(path)]=]},

  {name = "qkv.load", sig = "qkv.load(path)", group = "files",
   doc = [[Reads what qkv.save wrote: a checkpoint as its table (its tensors
on the default device, as qkv.load_safetensors makes them; every part of
the file is checked, and a file that is not a checkpoint is an error
naming it and what is wrong), or a tensor from a .npy file, bit for bit. It reads
format versions 1.0, 2.0 and 3.0, either byte order, Fortran order (as the
same values in C order), float16, float32, float64, bool, int32, a 2-byte
void as bfloat16, and the other integer widths as int64. The header is checked against the
file's size before anything is allocated, so a truncated, corrupted or
lying file is an error naming the file and what is wrong: load: path:
shape (2, 3) needs 24 bytes of data but the file has 20. As np.load.]]},

  {name = "qkv.savez", sig = "qkv.savez(path, tensors)", group = "files",
   doc = [[Writes the table tensors, {name = tensor, ...}, to path as a
NumPy .npz archive: one stored .npy entry per tensor, named name.npy, as
np.savez(path, name=tensor) writes it. Names are non-empty strings that
may hold '/' but no empty, '.' or '..' part; anything else, or a value
that is not a tensor, is an error naming it. ]] .. ATOMIC .. [[As np.savez.]],
   example = [=[local path = os.tmpname()
qkv.savez(path, {w = qkv.eye(2), n = qkv.tensor({7}, "int64")})
local t = qkv.loadz(path)
print(t.w.shape, t.n)   --> (2, 2)	tensor([7])
os.remove(path)]=]},

  {name = "qkv.loadz", sig = "qkv.loadz(path)", group = "files",
   doc = [[Reads a NumPy .npz archive, as np.savez or np.savez_compressed
writes it, into a table {name = tensor, ...}, each entry as qkv.load reads
a .npy file. Every entry's size is checked against its compressed size
and the machine's memory before anything is inflated, so a zip bomb is
an error. A file that is not a zip archive, is truncated, or holds an
entry that is not a .npy file is an error naming the file and the entry.
As np.load on an .npz file.]]},

  {name = "qkv.save_safetensors", sig = "qkv.save_safetensors(path, tensors [, metadata])",
   group = "files",
   doc = [[Writes the table tensors, {name = tensor, ...}, to path as a
safetensors file: float32, float64, float16, bfloat16, int64, int32 and
bool as F32, F64, F16, BF16, I64, I32 and BOOL, each tensor's data in C
order (a view is written as its contiguous copy), the widest dtypes first
and then by name, so that every tensor starts aligned and the same tensors
always give the same bytes. metadata, if given, maps strings to strings
(it becomes the header's __metadata__). Names are UTF-8 strings without
NUL bytes, and "__metadata__" is the format's own; anything else, or a value
that is not a tensor, is an error naming it. ]] .. ATOMIC .. [[As
safetensors.torch.save_file.]],
   example = [=[local path = os.tmpname()
qkv.save_safetensors(path, {w = qkv.eye(2), ids = qkv.tensor({7, 8}, "int64")},
                     {format = "pt"})
local t, meta = qkv.load_safetensors(path)
print(t.w.shape, t.ids, meta.format)   --> (2, 2)	tensor([7, 8])	pt
os.remove(path)]=]},

  {name = "qkv.load_safetensors", sig = "qkv.load_safetensors(path)", group = "files",
   doc = [[Reads a safetensors file (Hugging Face's format for model weights)
into a table {name = tensor, ...}, and returns the header's __metadata__ as
a second table (empty when there is none). F64, F32, F16, BF16, I32 and
BOOL load as float64, float32, float16, bfloat16, int32 and bool; I64,
I16, I8, U32, U16, U8 and U64 (below 2^63) as int64. The file is mapped
with mmap and each tensor copied once out of the mapping (90 MB in about
40 ms). The header is parsed by libcjson and checked before anything is
allocated: a header longer than the file or than 100 MB, one that is not
a JSON object, a repeated name, an unknown dtype (or F8_E4M3/F8_E5M2, which
qkv cannot hold), a shape whose bytes are not its data_offsets', ranges that
run past the data, overlap or leave bytes to no tensor are each an error
naming the file and the tensor: load_safetensors: path: tensor 'w': shape
[3] of F32 is 12 bytes, but its data_offsets [0, 8] hold 8. As
safetensors.torch.load_file, with safe_open's metadata().]]},
}
