-- wrk script: POST /search with queries cycled from the file in
-- $QAC_BENCH_QUERIES (one JSON-escaped query string per line).
local queries = {}
local path = os.getenv("QAC_BENCH_QUERIES")
for line in io.lines(path) do
  if #line > 0 then queries[#queries + 1] = line end
end
local k = os.getenv("QAC_BENCH_K") or "10"
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
  local body = '{"query":' .. q .. ',"k":' .. k .. '}'
  return wrk.format("POST", "/search", {["Content-Type"] = "application/json"}, body)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("STATUS non2xx=%d connect=%d read=%d write=%d timeout=%d\n", e.status, e.connect, e.read,
                         e.write, e.timeout))
  io.write(string.format("LATENCY p50=%.3f p90=%.3f p99=%.3f mean=%.3f\n", latency:percentile(50) / 1000,
                         latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.mean / 1000))
  io.write(string.format("THROUGHPUT %.2f\n", summary.requests / (summary.duration / 1e6)))
end
