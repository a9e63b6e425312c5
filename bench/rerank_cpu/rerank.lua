-- wrk script: one rerank request per call, its body the next line of the
-- file in $QAC_BENCH_BODIES (one JSON body a line, cycled), POSTed to
-- $QAC_BENCH_PATH (qac's /rerank or /v1/rerank, infinity's /rerank).
local bodies = {}
for line in io.lines(os.getenv("QAC_BENCH_BODIES")) do
  if #line > 0 then bodies[#bodies + 1] = line end
end
local target = os.getenv("QAC_BENCH_PATH") or "/rerank"
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
  return wrk.format("POST", target, {["Content-Type"] = "application/json"}, bodies[(i % #bodies) + 1])
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("STATUS non2xx=%d connect=%d read=%d write=%d timeout=%d\n", e.status, e.connect, e.read,
                         e.write, e.timeout))
  io.write(string.format("LATENCY p50=%.3f p90=%.3f p99=%.3f mean=%.3f\n", latency:percentile(50) / 1000,
                         latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.mean / 1000))
  io.write(string.format("THROUGHPUT %.2f\n", summary.requests / (summary.duration / 1e6)))
end
