-- wrk script: one text per request, cycled from the file in
-- $QAC_BENCH_QUERIES (one JSON-escaped string per line), POSTed to
-- $QAC_BENCH_ENCODE_PATH: "/encode" gets qac's body {"texts": [t],
-- "kind": $QAC_BENCH_ENCODE_KIND}; any other path (infinity's /embeddings,
-- qac's /v1/embeddings) the OpenAI body {"input": [t], "model": $QAC_BENCH_MODEL}.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk_common.lua")
local queries = wrk_lines("QAC_BENCH_QUERIES")
local target = os.getenv("QAC_BENCH_ENCODE_PATH") or "/encode"
local kind = os.getenv("QAC_BENCH_ENCODE_KIND") or "passage"
local model = os.getenv("QAC_BENCH_MODEL") or "default"

function request()
  local q = wrk_next(queries)
  if target == "/encode" then
    return wrk_post(target, '{"texts":[' .. q .. '],"kind":"' .. kind .. '"}')
  end
  return wrk_post(target, '{"input":[' .. q .. '],"model":"' .. model .. '"}')
end
