-- decoder.lua: scripts/decoder.lua, the small decoder-only model (GQA,
-- rotary positions, RMSNorm, SwiGLU) trained on characters, writing from a
-- KV cache, its attention maps drawn. Run for 60 steps
-- (QKV_DECODER_STEPS), not its two minutes: the loss falls from about
-- uniform guessing, the text it writes is the prompt and then the asked
-- number of characters of its vocabulary, the cached step equals the whole
-- line recomputed, the figure is written; and it runs from another folder.
local lu = require "luaunit"
local U = dofile("tests/scripts/util.lua")
local quote = dofile("tests/helpers/shell.lua").quote

local STEPS = 60
local function run() return U.cached("scripts/decoder.lua", "QKV_DECODER_STEPS=" .. STEPS .. " ") end

local TestDecoderScript = {}

function TestDecoderScript:testTheLossFalls()
  local r = run()
  lu.assertEquals(r.results.steps, STEPS)
  local L = r.results.losses
  lu.assertEquals(#L, STEPS)
  local V = r.results.vocab
  lu.assertTrue(V > 40 and V <= 96, "vocabulary " .. V)
  -- the first step guesses about uniformly: ln V, give or take the init
  lu.assertTrue(math.abs(L[1] - math.log(V)) < 0.7, ("first loss %.3f, ln V %.3f"):format(L[1], math.log(V)))
  local tail = 0
  for i = STEPS - 9, STEPS do tail = tail + L[i] / 10 end
  lu.assertTrue(tail < L[1] - 1, ("loss %.3f -> %.3f over the last ten steps"):format(L[1], tail))
  lu.assertStrContains(r.stdout, ("trained %d steps"):format(STEPS))
  lu.assertStrContains(r.stdout, "4 query heads on 2 key/value heads")
end

function TestDecoderScript:testItWritesFromTheCache()
  local r = run()
  local text, prompt = r.results.text, r.results.prompt
  lu.assertEquals(#text, #prompt + r.results.new)
  lu.assertEquals(text:sub(1, #prompt), prompt)
  lu.assertNil(text:find("[^\n\32-\126]"), "only characters of its vocabulary")
  lu.assertStrContains(r.stdout, "it writes:\n" .. prompt)
  lu.assertTrue(r.results.per_token > 0)
  -- the cached decode step against the whole line recomputed, float32
  lu.assertTrue(r.results.diff < 1e-4, "max |logit difference| " .. r.results.diff)
end

function TestDecoderScript:testTheMapsAreDrawn()
  U.assertPng(run(), "decoder_attention.png", 800, 800)
end

function TestDecoderScript:testRunsFromAnyFolder()
  local p = io.popen("mktemp -d")
  local dir = p:read("l")
  p:close()
  local exe = arg and arg[-1] or "build/qkv"
  if exe:sub(1, 1) ~= "/" then exe = (os.getenv("PWD") or ".") .. "/" .. exe end
  local script = (os.getenv("PWD") or ".") .. "/scripts/decoder.lua"
  -- on the CPU: the folder is the point (the suites' device pass names its
  -- fake device's plugin by a path from the repository)
  local cmd = ("cd %s && QKV_DECODER_STEPS=2 QKV_OUT=%s %s %s 2>&1"):format(quote(dir), quote(dir), quote(exe),
                                                                         quote(script))
  p = io.popen(cmd)
  local out = p:read("a")
  local ok = p:close()
  local png = io.open(dir .. "/decoder_attention.png")
  os.execute("rm -rf " .. quote(dir))
  lu.assertTrue(ok, out)
  lu.assertNotNil(png, "no figure in the folder it ran from:\n" .. out)
  png:close()
end

return {TestDecoderScript = TestDecoderScript}
