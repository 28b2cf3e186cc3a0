-- Seed 003, "Token Alignment and Multi-Head Cross-Attention": section 3's
-- numerical example and section 4.1, the TokenAligner and its histograms.

-- Section 3: one 4-dim image token projected to 3 dims, Z = X W
local X = qkv.tensor{1, 2, 3, 4}
local W = qkv.tensor{{0.1, 0.2, 0.3},
                     {0.4, 0.5, 0.6},
                     {0.7, 0.8, 0.9},
                     {1.0, 1.1, 1.2}}
local Z = qkv.project(X, W)
print("Z = X W = " .. tostring(Z))

-- Section 4.1: project from 768-dim vision to 512-dim text
qkv.seed(42)
local aligner = qkv.nn.TokenAligner(768, 512, "linear")
local dummy_image = qkv.randn(16, 768)   -- 16 patches, 768-dim (like ViT-B)
local projected = aligner(dummy_image)

print(("Input:  %s (16 patches, 768-dim vision space)"):format(dummy_image.shape))
print(("Output: %s (16 patches, 512-dim text space)"):format(projected.shape))
-- weight (d_text, d_vision), as PyTorch's: the projection is x weightᵀ + bias
print(("\nProjection matrix shape: %s"):format(aligner.proj.weight.shape))
local function commas(n)   -- 393216 -> "393,216"
  return (tostring(n):reverse():gsub("%d%d%d", "%0,"):reverse():gsub("^,", ""))
end
print(("  That's %s learnable parameters just for alignment!"):format(commas(768 * 512)))
print(("  (%s with the 512 biases)"):format(commas(aligner:nparams())))

-- How does projection change the token distributions?
local function hist(x, title, color)   -- all the token values, 50 bins
  return {x, {kind = "hist", bins = 50, color = color, alpha = 0.7, title = title,
              xlabel = "Value", ylabel = "Count"}}
end
qkv.plot.grid({hist(dummy_image, "Image Token Values (768-dim)", "#3498db"),
               hist(projected, "Projected Token Values (512-dim)", "#e74c3c")},
              {rows = 1, cols = 2, title = "Token Distribution Before and After Projection",
               file = qkv.plot.out("003_token_histograms.png")})

print("The projection changes the distribution — the model learns")
print("to map vision features into a space that language tokens can use.")

-- the first 8 output dims are enough for the tests to redo the projection
return {Z = Z, dummy_image = dummy_image, projected = projected,
        W8 = aligner.proj.weight:t():narrow(2, 1, 8), b8 = aligner.proj.bias:narrow(1, 1, 8),
        nparams = aligner:nparams()}
