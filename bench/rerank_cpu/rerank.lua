-- wrk script: one rerank request per call, its body the next line of the
-- file in $QAC_BENCH_BODIES (one JSON body a line, cycled), POSTed to
-- $QAC_BENCH_PATH (qac's /rerank or /v1/rerank, infinity's /rerank).
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "../serve/wrk_common.lua")
local bodies = wrk_lines("QAC_BENCH_BODIES")
local target = os.getenv("QAC_BENCH_PATH") or "/rerank"

function request()
  return wrk_post(target, wrk_next(bodies))
end
