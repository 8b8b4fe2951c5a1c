-- wrk script: streaming chat completions (16 tokens, ignore_eos) on the tiny test model.
-- wrk's latency is each response's whole time (the stream's end); bench/http_stream_bench.mjs
-- measures the time to the first byte.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"tiny","stream":true,"max_tokens":16,"ignore_eos":true,' ..
           '"messages":[{"role":"user","content":"Count to ten, please."}]}'
