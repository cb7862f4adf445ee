-- wrk script of `make bench` (bench/wrk.py): every request is a distinct event, so the controller's
-- duplicate limiter never answers 429 and every 202 is a real ingest.
--
--   wrk ... -s bench/wrk.lua URL -- TEMPLATES FIRST THREADS [HEADER ...]
--
-- TEMPLATES is a file of request bodies, one per line, each holding the marker @@N@@ one or more times
-- (bench/workloads.py writes them). Request n (n = FIRST + thread id, + THREADS at each request) sends
-- template n mod #templates with every marker replaced by n: distinct across threads and runs (the
-- driver hands each run its own FIRST). A HEADER is "Name: value" and may hold the marker too (a
-- distinct X-GitHub-Delivery). Bodies are split at the marker once, in init(), so a request costs a
-- few concatenations: the generator stays cheap next to the Python servers it measures.
--
-- done() prints one line, "WRK_JSON {...}": requests, duration, errors, latency percentiles (µs) and
-- the count of every HTTP status, which bench/wrk.py parses.

local MARKER = "@@N@@"

local function split(text)
  local parts, start = {}, 1
  while true do
    local i, j = string.find(text, MARKER, start, true)
    if i == nil then
      parts[#parts + 1] = string.sub(text, start)
      return parts
    end
    parts[#parts + 1] = string.sub(text, start, i - 1)
    start = j + 1
  end
end

local function fill(parts, value)
  if #parts == 1 then
    return parts[1]
  end
  local out = { parts[1] }
  for i = 2, #parts do
    out[#out + 1] = value
    out[#out + 1] = parts[i]
  end
  return table.concat(out)
end

-- setup phase (the main Lua state): number the threads, keep them for done()
local threads = {}
function setup(thread)
  thread:set("thread_id", #threads)
  threads[#threads + 1] = thread
end

-- running phase (one Lua state per thread)
local templates, header_parts = {}, {}
local counter, step = 0, 1
statuses = {}

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then
      templates[#templates + 1] = split(line)
    end
  end
  assert(#templates > 0, "no request templates in " .. args[1])
  step = tonumber(args[3])
  counter = tonumber(args[2]) + thread_id
  for i = 4, #args do
    local name, value = string.match(args[i], "^([^:]+):%s*(.*)$")
    header_parts[name] = split(value)
  end
  header_parts["Content-Type"] = header_parts["Content-Type"] or { "application/json" }
end

function request()
  local n = counter
  counter = counter + step
  local value = string.format("%d", n)
  local headers = {}
  for name, parts in pairs(header_parts) do
    headers[name] = fill(parts, value)
  end
  return wrk.format("POST", nil, headers, fill(templates[(n % #templates) + 1], value))
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

-- done phase (the main Lua state again)
function done(summary, latency, requests)
  local counts = {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do
      counts[status] = (counts[status] or 0) + n
    end
  end
  local codes = {}
  for status, n in pairs(counts) do
    codes[#codes + 1] = string.format('"%d":%d', status, n)
  end
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f},"statuses":{%s}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    table.concat(codes, ",")))
end
