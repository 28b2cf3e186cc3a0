-- 000_cross_attention.lua: "Self-Attention and Cross-Attention from Scratch",
-- section 5: TODO 1 (Q from the text, K and V from the image) and the
-- verification cell, with qkv.nn.CrossAttention as the student.

-- the reference, step by step with the primitives; an instance holds only
-- its weights, so that student:load(ref) reads it as a state_dict
local Ref = {}
function Ref.__call(self, text_tokens, image_tokens)
  local Q = qkv.project(text_tokens, self.W_Q)
  local K = qkv.project(image_tokens, self.W_K)
  local V = qkv.project(image_tokens, self.W_V)
  local weights = qkv.softmax(qkv.scores(Q, K))            -- Q K^T / sqrt(d_k)
  return weights:matmul(V), weights
end

local function CrossAttentionRef(d_model, d_k)
  local function W() return qkv.nn.Linear(d_model, d_k, {bias = false}).weight:t() end
  return setmetatable({W_Q = W(), W_K = W(), W_V = W()}, Ref)
end

local function allclose(a, b, atol) return (a - b):abs():max():item() <= atol end

qkv.seed(42)
local ref = CrossAttentionRef(8, 4)
qkv.seed(42)
local student = qkv.nn.CrossAttention(8, 4)

-- copy weights to ensure the same initialisation
student:load(ref)

local text = qkv.randn(3, 8)    -- 3 text tokens
local image = qkv.randn(6, 8)   -- 6 image patches

local ref_out, ref_w = ref(text, image)
local stu_out, stu_w
local ok, err = pcall(function()
  stu_out, stu_w = student(text, image)
  assert(stu_out.shape == {3, 4}, "Output shape should be (3, 4), got " .. tostring(stu_out.shape))
  assert(stu_w.shape == {3, 6}, "Weights shape should be (3, 6), got " .. tostring(stu_w.shape))
  assert(allclose(stu_out, ref_out, 1e-5), "Output values don't match")
  assert(allclose(stu_w, ref_w, 1e-5), "Weights don't match")
  print("Correct! Your cross-attention implementation works perfectly.")
  print("  Output shape: " .. tostring(stu_out.shape) .. " (3 text tokens, d_k=4)")
  print("  Weights shape: " .. tostring(stu_w.shape) .. " (3 text tokens attending to 6 image patches)")
end)
if not ok then
  print("Not quite: " .. tostring(err))
  print("Hint: Q = qkv.project(text_tokens, W_Q), K = qkv.project(image_tokens, W_K),"
        .. " V = qkv.project(image_tokens, W_V)")
end

return {text = text, image = image, ref_out = ref_out, ref_w = ref_w,
        stu_out = stu_out, stu_w = stu_w, params = student:state_dict()}
