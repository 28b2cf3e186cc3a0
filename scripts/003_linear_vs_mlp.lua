-- Seed 003, "Token Alignment and Multi-Head Cross-Attention": section 8,
-- the same image tokens through a linear and an MLP TokenAligner.

local d_vision, d_text = 64, 32

qkv.seed(42)
local linear_aligner = qkv.nn.TokenAligner(d_vision, d_text, "linear")
local mlp_aligner = qkv.nn.TokenAligner(d_vision, d_text, "mlp")

local image_tok = qkv.randn(9, d_vision)

local linear_out = linear_aligner(image_tok)
local mlp_out = mlp_aligner(image_tok)

local function picture(m, title, ylabel)
  return {m, {kind = "image", cmap = "coolwarm", title = title,
              xlabel = "Dimension", ylabel = ylabel}}
end
qkv.plot.grid({picture(image_tok, ("Original (%d-dim)"):format(d_vision), "Patch Index"),
               picture(linear_out, ("Linear Projection (%d-dim)"):format(d_text)),
               picture(mlp_out, ("MLP Projection (%d-dim)"):format(d_text))},
              {rows = 1, cols = 3, title = "Token Representations: Original vs Projected",
               file = qkv.plot.out("003_linear_vs_mlp.png")})

print("Key difference: MLP introduces a nonlinearity (GELU),")
print("which lets it learn more complex mappings between spaces.")
print("Linear is simpler but works surprisingly well (as shown in LLaVA).")

return {image_tok = image_tok, linear_out = linear_out, mlp_out = mlp_out,
        linear = linear_aligner:state_dict(), mlp = mlp_aligner:state_dict()}
