-- Seed 003, "Token Alignment and Multi-Head Cross-Attention": section 7,
-- truncating the image tokens to d_text vs aligning them with a projection.

local d_vision, d_text = 64, 32

qkv.seed(42)
local text_tok = qkv.randn(4, d_text)
local image_tok = qkv.randn(9, d_vision)

-- Without alignment: the document zero-pads a (9, d_text) buffer and copies
-- the first d_text columns over all of it, which is plain truncation
local image_padded = image_tok:narrow(2, 1, d_text)

-- With alignment: learned projection
local aligner = qkv.nn.TokenAligner(d_vision, d_text, "linear")
local image_aligned = aligner(image_tok)

-- Compare information content
local function stats(x) return x:std():item(), x:mean():item() end
print("Information comparison:")
print(("  Original image tokens — std: %.4f, mean: %.4f"):format(stats(image_tok)))
print(("  Truncated (naive)    — std: %.4f, mean: %.4f"):format(stats(image_padded)))
print(("  Aligned (learned)    — std: %.4f, mean: %.4f"):format(stats(image_aligned)))
print(("\nTruncation loses %d dimensions of information!"):format(d_vision - d_text))
-- "preserves" in that every output mixes all 64 inputs: a 64x32 matrix has
-- rank at most 32, so it cannot keep all of their information either
print(("Learned alignment preserves ALL %d dimensions via a %dx%d matrix.")
      :format(d_vision, d_vision, d_text))

return {text_tok = text_tok, image_tok = image_tok, image_padded = image_padded,
        image_aligned = image_aligned, aligner = aligner:state_dict()}
