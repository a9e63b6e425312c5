-- What the wrk scripts share (bench/serve/search.lua and encode.lua,
-- bench/rerank_cpu/rerank.lua): each thread starts at its own place in the
-- cycled lines (offset 7919 lines per thread), and done() prints the lines
-- bench_serve.py's run_wrk reads (STATUS, LATENCY in ms, THROUGHPUT in
-- requests/s). A script loads it with
--   dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk_common.lua")
-- (the path beside the script, as wrk was given it) and defines request().
local counter = 0

-- The non-empty lines of the file named by $var.
function wrk_lines(var)
  local out = {}
  for line in io.lines(os.getenv(var)) do
    if #line > 0 then out[#out + 1] = line end
  end
  return out
end

-- The next of lines, cycled from the thread's offset.
function wrk_next(lines)
  i = i + 1
  return lines[(i % #lines) + 1]
end

function wrk_post(path, body)
  return wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
end

function setup(thread)
  thread:set("offset", counter * 7919)
  counter = counter + 1
end

function init(args)
  i = offset or 0
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("STATUS non2xx=%d connect=%d read=%d write=%d timeout=%d\n", e.status, e.connect, e.read,
                         e.write, e.timeout))
  io.write(string.format("LATENCY p50=%.3f p90=%.3f p99=%.3f mean=%.3f\n", latency:percentile(50) / 1000,
                         latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.mean / 1000))
  io.write(string.format("THROUGHPUT %.2f\n", summary.requests / (summary.duration / 1e6)))
end
