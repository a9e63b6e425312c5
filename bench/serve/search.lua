-- wrk script: POST /search with queries cycled from the file in
-- $QAC_BENCH_QUERIES (one JSON-escaped query string per line).
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk_common.lua")
local queries = wrk_lines("QAC_BENCH_QUERIES")
local k = os.getenv("QAC_BENCH_K") or "10"

function request()
  return wrk_post("/search", '{"query":' .. wrk_next(queries) .. ',"k":' .. k .. '}')
end
