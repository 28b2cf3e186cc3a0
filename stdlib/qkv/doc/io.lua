-- doc/io.lua: qkv.doc entries of the files qkv reads and writes: tensors
-- in NumPy's .npy files (qkv.save, qkv.load) and .npz archives (qkv.savez,
-- qkv.loadz).

local ATOMIC = "A regular file is written atomically: a temp file in the " ..
  "same folder, synced and renamed over the target, so a failed or killed " ..
  "save leaves the old file whole. A character device or a FIFO is written " ..
  "in place (it stays what it is); a folder, a socket or a block device is " ..
  "an error, and so is a path that holds a NUL byte. "

return {
  {name = "qkv.save", sig = "qkv.save(path, x)", group = "files",
   doc = [[Writes the tensor x to path as a NumPy .npy file, with the header
that np.save writes. float32, float64, float16, int64, int32 and bool are
'<f4', '<f8', '<f2', '<i8', '<i4' and '|b1', bfloat16 '|V2' (as NumPy
writes ml_dtypes' bfloat16), in C order (a non-contiguous view is written as its
contiguous copy), 0-d and empty tensors included. ]] .. ATOMIC .. [[A file
that cannot be written is an error naming it: save: path: Permission
denied. As np.save.]],
   example = [=[local path = os.tmpname()
qkv.save(path, qkv.tensor{{1, 2}, {3, 4}})
print(qkv.load(path))
--> tensor([[1., 2.],
-->         [3., 4.]])
os.remove(path)]=]},

  {name = "qkv.load", sig = "qkv.load(path)", group = "files",
   doc = [[Reads a tensor from the .npy file at path, bit for bit. It reads
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
}
