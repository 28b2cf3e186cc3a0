-- 000_worked_example.lua: "Self-Attention and Cross-Attention from Scratch",
-- section 3 (why the scaling factor) and 4.1 (manual dot-product attention).

-- section 3: a raw score of 3.0 next to a 0, with d_k = 3
local peaked = qkv.softmax(qkv.tensor{3, 0})[1]
local gentle = qkv.softmax(qkv.tensor{3 / math.sqrt(3), 0})[1]
print(string.format("Without scaling: softmax([3.0, 0]) = %.4f (very peaked)", peaked))
print(string.format("With scaling: softmax([3.0/1.73, 0]) = %.4f (gentler)\n", gentle))

-- the document's function: one primitive a step, printing as it goes
local function scaled_dot_product_attention(Q, K, V)
  local d_k = Q:size(-1)
  local scores = qkv.scores(Q, K, {scale = 1})            -- Q K^T, unscaled
  print("  Raw scores shape: " .. tostring(scores.shape))
  print("  Raw scores:\n" .. tostring(scores))
  local scores_scaled = scores / math.sqrt(d_k)
  print("\n  Scaled scores:\n" .. tostring(scores_scaled))
  local weights = qkv.softmax(scores_scaled)               -- along each row
  print("\n  Attention weights (each row sums to 1):\n" .. tostring(weights))
  print("  Row sums: " .. tostring(weights:sum(-1)))
  return weights:matmul(V), weights
end

-- the exact example from the article
local Q = qkv.tensor{{1, 0, 1}, {0, 1, 0}}
local K = qkv.tensor{{1, 1, 0}, {0, 0, 1}}
local V = qkv.tensor{{1, 2}, {3, 4}}

print("=== Self-Attention Example ===")
print("Q shape: " .. tostring(Q.shape) .. " (2 tokens, d_k=3)")
print("K shape: " .. tostring(K.shape) .. " (2 tokens, d_k=3)")
print("V shape: " .. tostring(V.shape) .. " (2 tokens, d_v=2)\n")

local output, weights = scaled_dot_product_attention(Q, K, V)
print("\n  Output:\n" .. tostring(output))
print("  Output shape: " .. tostring(output.shape))

-- the checkpoint; token 2's weights are softmax([1/sqrt(3), 0]), not the
-- document's [0.644, 0.356]
local w = weights:tolist()
print(string.format("\nToken 1 weights: [%.4f, %.4f] -> the average of V's rows", w[1][1], w[1][2]))
print(string.format("Token 2 weights: [%.4f, %.4f] -> leans toward token 1's value", w[2][1], w[2][2]))

return {peaked = peaked, gentle = gentle, scores = qkv.scores(Q, K, {scale = 1}),
        scores_scaled = qkv.scores(Q, K), weights = weights, output = output}
