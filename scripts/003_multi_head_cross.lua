-- Seed 003, "Token Alignment and Multi-Head Cross-Attention": section 4.2,
-- multi-head cross-attention, and section 5, TODO 2 with its verification.

-- Section 4.2: Q from text, K/V from image, 4 heads of d_k = 4
qkv.seed(42)
local d_model, num_heads = 16, 4
local mhca = qkv.nn.MultiHeadCrossAttention(d_model, num_heads)

local text = qkv.randn(3, d_model)    -- 3 text tokens
local image = qkv.randn(9, d_model)   -- 9 image patches (3x3)

local output, attn = mhca(text, image)
print(("Output shape: %s — same as text input (3 tokens, d_model=16)"):format(output.shape))
print(("Attention shape: %s — %d heads, each 3x9"):format(attn.shape, num_heads))

-- Section 5: AlignedCrossAttention's forward is TODO 2's answer,
-- aligned_image = aligner(image_tokens), then cross_attn(text_tokens, aligned_image)
local d_vision, d_text = 768, 256
local model = qkv.nn.AlignedCrossAttention(d_vision, d_text, num_heads)

local text_in = qkv.randn(5, d_text)      -- 5 text tokens, 256-dim
local image_in = qkv.randn(16, d_vision)  -- 16 patches, 768-dim

local out, attn_in = model(text_in, image_in)
assert(out.shape == {5, d_text}, ("Expected (5, %d), got %s"):format(d_text, out.shape))
assert(attn_in.shape == {num_heads, 5, 16},
       ("Expected (%d, 5, 16), got %s"):format(num_heads, attn_in.shape))
print("Correct! Your aligned cross-attention pipeline works.")
print(("  Input:  text %s, image %s"):format(text_in.shape, image_in.shape))
print(("  Output: %s"):format(out.shape))
print(("  Attention: %s"):format(attn_in.shape))
print(("\nDimension mismatch (%d vs %d) handled by alignment!"):format(d_vision, d_text))

return {text = text, image = image, output = output, attn = attn, mhca = mhca:state_dict(),
        text_in = text_in, image_in = image_in, out = out, attn_in = attn_in,
        model = model:state_dict()}
