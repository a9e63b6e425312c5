-- wrk script: one text per request, cycled from the file in
-- $QAC_BENCH_QUERIES (one JSON-escaped string per line), POSTed to
-- $QAC_BENCH_ENCODE_PATH: "/encode" gets qac's body {"texts": [t],
-- "kind": $QAC_BENCH_ENCODE_KIND}; any other path (infinity's /embeddings,
-- qac's /v1/embeddings) the OpenAI body {"input": [t], "model": $QAC_BENCH_MODEL}.
local queries = {}
local path = os.getenv("QAC_BENCH_QUERIES")
for line in io.lines(path) do
  if #line > 0 then queries[#queries + 1] = line end
end
local target = os.getenv("QAC_BENCH_ENCODE_PATH") or "/encode"
local kind = os.getenv("QAC_BENCH_ENCODE_KIND") or "passage"
local model = os.getenv("QAC_BENCH_MODEL") or "default"
local counter = 0

function setup(thread)
  thread:set("offset", counter * 7919)
  counter = counter + 1
end

function init(args)
  i = offset or 0
end

function request()
  i = i + 1
  local q = queries[(i % #queries) + 1]
  local body
  if target == "/encode" then
    body = '{"texts":[' .. q .. '],"kind":"' .. kind .. '"}'
  else
    body = '{"input":[' .. q .. '],"model":"' .. model .. '"}'
  end
  return wrk.format("POST", target, {["Content-Type"] = "application/json"}, body)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("STATUS non2xx=%d connect=%d read=%d write=%d timeout=%d\n", e.status, e.connect, e.read,
                         e.write, e.timeout))
  io.write(string.format("LATENCY p50=%.3f p90=%.3f p99=%.3f mean=%.3f\n", latency:percentile(50) / 1000,
                         latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.mean / 1000))
  io.write(string.format("THROUGHPUT %.2f\n", summary.requests / (summary.duration / 1e6)))
end
