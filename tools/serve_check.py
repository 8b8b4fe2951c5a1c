#!/usr/bin/env python3
"""Proves that `deepinfer serve` holds up on one device: API checks, load, memory, clean shutdown.

Why this exists: CI proves the server with tests/sdk/*.mjs (the `openai` and `@anthropic-ai/sdk`
npm clients, and load.test.mjs's 256 streaming clients), but the GPU machine has no node, no
network and no openai/httpx Python packages. This script holds the server to the same contract
with the Python standard library alone (http.client, threads), so it runs wherever python3 does.

    python3 tools/serve_check.py --deepinfer build/deepinfer --model DIR [--tokenizer FILE]
        [--device cuda] [--clients 256] [--max-tokens 16] [--port 0] [--extra-args "..."]
        [--json OUT.json]

1. Starts `deepinfer serve` (stdout and stderr to a log file; MALLOC_ARENA_MAX=1 unless set, as
   load.test.mjs runs it, so per-thread malloc arenas do not blur the resident-memory figure),
   waits for GET /health and prints the startup lines (the device line names device and memory).
2. Functional checks, each PASS/FAIL with a reason: /v1/models, chat with and without streaming
   (greedy: the stream's deltas equal the whole answer, thinking on and off), /v1/completions,
   malformed body -> 400 and unknown model -> 404 with OpenAI error objects, Anthropic
   /v1/messages, seeded sampling repeatable.
3. Load: a warm-up wave, then two waves of --clients concurrent streaming chat requests (one
   prompt per client, each a little different; thinking off, greedy). Every one must answer 200
   and stream to `data: [DONE]` with one finish reason and one id, and the first --verify
   prompts' streams must equal their non-streaming answers. A 429 (waiting queue full) is a
   failure unless --allow-429. Reports TTFT and latency p50 / p90 / max. Afterwards /health is
   200 and /metrics' requests_total for chat equals what the clients received.
4. Memory: VmRSS of the server after the warm-up (baseline) and after the waves; FAIL above
   baseline + max(64 MiB, 10%). The warm-up is a full wave by default, as in load.test.mjs: a
   step of N sequences holds N x vocab floats of logits (126 MiB for 256 x 129,280) and the
   allocator keeps such peaks resident, growth to a high-water mark that is not a leak (after a
   16-stream warm-up, 256 clients on the CPU: 80 -> 193 MiB after wave 1, 222 after wave 2).
   GPU memory of the process (nvidia-smi; skipped when absent or on the CPU): FAIL if it grew
   by more than 16 MiB after the first wave (the arena is sized at load; what may still come is
   a CUDA graph for a batch bucket the second wave was first to reach, about a MiB each and at
   most 512 kept, so more than 16 MiB is a leak). /metrics num_requests_running,
   num_requests_waiting and kv_cache_blocks_in_use must be back to 0.
5. SIGTERM; the server must exit 0 within 30 s. Exit code 0 only when everything passed.

The model must encode chat prompts: a model whose vocabulary is smaller than the tokenizer's
(tests/data/golden/v4/tiny_fp8: 512 ids) refuses them with 400; the SDK tests serve
tests/data/golden/v4/real_vocab (random weights, the full 129,280 ids) for this reason.
"""
import argparse
import collections
import http.client
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BASE_PROMPTS = ["Hello there", "Write a haiku about the sea", "1 2 3 4", "What is a monad?",
                'Translate "cat" to French', "Name three colours", "Why is the sky blue?", "Say hi"]
IDLE_GAUGES = ("deepinfer:num_requests_running", "deepinfer:num_requests_waiting",
               "deepinfer:kv_cache_blocks_in_use")
MIB = 1 << 20


class CheckFailed(Exception):
    pass


def expect(condition, reason):
    if not condition:
        raise CheckFailed(reason)


def option_value(args, name):
    """The value of `name VALUE` or `name=VALUE` in a list of command-line words, else None."""
    for i, word in enumerate(args):
        if word == name and i + 1 < len(args):
            return args[i + 1]
        if word.startswith(name + "="):
            return word[len(name) + 1:]
    return None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentiles(values):
    """p50, p90 and max (nearest rank), or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = lambda p: ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
    return {"p50": rank(50), "p90": rank(90), "max": ordered[-1]}


def fmt_ms(stats):
    if not stats:
        return "n/a"
    return " / ".join(f"{1000 * stats[k]:.0f}" for k in ("p50", "p90", "max")) + " ms"


# ---------------------------------------------------------------------------------------------
# The server process


class Server:
    def __init__(self, args, port, log_path):
        self.port = port
        self.log_path = log_path
        self.command = [args.deepinfer, "serve", "--model", args.model, "--port", str(port),
                        "--device", args.device]
        if args.tokenizer:
            self.command += ["--tokenizer", args.tokenizer]
        self.command += shlex.split(args.extra_args)
        self.process = None

    def start(self):
        env = dict(os.environ)
        env.setdefault("MALLOC_ARENA_MAX", "1")
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, env=env)
        log.close()

    @property
    def pid(self):
        return self.process.pid

    def log_lines(self):
        with open(self.log_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()

    def log_tail(self, n=30):
        return "\n".join(self.log_lines()[-n:])

    def wait_healthy(self, client, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode} before answering "
                                   f"/health; log tail:\n{self.log_tail()}")
            try:
                if client.request("GET", "/health", timeout=5).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"/health did not answer 200 in {timeout} s; log tail:\n{self.log_tail()}")

    def stop(self, timeout=30):
        """SIGTERM, then the exit code; None when it did not exit in time (then it is killed)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


# ---------------------------------------------------------------------------------------------
# HTTP


class Reply:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)


class Stream:
    """What one SSE response carried (Chat Completions or Completions chunks)."""

    def __init__(self):
        self.status = None
        self.content_type = None
        self.error = None           # set for a non-200, an error frame or a broken stream
        self.broken = False         # 200, but the stream did not end with [DONE] cleanly
        self.done = False
        self.content = ""
        self.reasoning = ""
        self.text = ""              # Completions
        self.roles = []
        self.finishes = []
        self.ids = set()
        self.usage = None
        self.chunks = 0
        self.ttft = None            # seconds from sending to the first non-empty delta
        self.latency = None         # seconds from sending to [DONE] (or the failure)


class Client:
    def __init__(self, host, port, api_key=None, timeout=300):
        self.host, self.port, self.timeout = host, port, timeout
        self.headers = {"Content-Type": "application/json", "Connection": "close"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.answered = collections.Counter()  # (path, status) of every answer received
        self._lock = threading.Lock()

    def _send(self, method, path, body, timeout):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        connection.request(method, path, body=body, headers=self.headers)
        response = connection.getresponse()
        with self._lock:
            self.answered[(path, response.status)] += 1
        return connection, response

    def request(self, method, path, body=None, timeout=None):
        connection, response = self._send(method, path, body, timeout)
        try:
            return Reply(response.status, dict(response.getheaders()), response.read())
        finally:
            connection.close()

    def post(self, path, body):
        return self.request("POST", path, body)

    def stream(self, path, body):
        """POSTs a streaming request and reads its SSE frames to [DONE]; never raises."""
        out = Stream()
        started = time.monotonic()
        connection = None
        try:
            connection, response = self._send("POST", path, body, None)
            out.status = response.status
            out.content_type = response.getheader("Content-Type")
            if response.status != 200:
                out.error = f"status {response.status}: {response.read()[:200]!r}"
                return out
            for raw in iter(response.readline, b""):
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if out.done:
                    raise CheckFailed(f"data after [DONE]: {data[:200]}")
                if data == "[DONE]":
                    out.done = True
                    continue
                self._take_chunk(out, json.loads(data), started)
            if not out.done:
                raise CheckFailed("stream ended without data: [DONE]")
        except CheckFailed as error:
            out.broken, out.error = True, str(error)
        except (OSError, http.client.HTTPException, ValueError) as error:
            out.broken, out.error = True, f"broken stream: {type(error).__name__}: {error}"
        finally:
            out.latency = time.monotonic() - started
            if connection:
                connection.close()
        return out

    @staticmethod
    def _take_chunk(out, chunk, started):
        if "error" in chunk:
            raise CheckFailed(f"error frame: {json.dumps(chunk)[:300]}")
        out.chunks += 1
        out.ids.add(chunk.get("id"))
        if chunk.get("usage"):
            out.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("role"):
                out.roles.append(delta["role"])
            piece = (delta.get("content") or "") + (delta.get("reasoning_content") or "") + (choice.get("text") or "")
            out.content += delta.get("content") or ""
            out.reasoning += delta.get("reasoning_content") or ""
            out.text += choice.get("text") or ""
            if piece and out.ttft is None:
                out.ttft = time.monotonic() - started
            if choice.get("finish_reason"):
                out.finishes.append(choice["finish_reason"])


# ---------------------------------------------------------------------------------------------
# Server state: metrics, memory


def read_metrics(client):
    """/metrics as {"name{labels}": value}."""
    reply = client.request("GET", "/metrics")
    expect(reply.status == 200, f"/metrics answered {reply.status}")
    values = {}
    for line in reply.body.decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values


def metric(values, name, **labels):
    """Sum of the series of `name` whose labels include `labels` (model_name is always there)."""
    total, found = 0.0, False
    for key, value in values.items():
        series, _, rest = key.partition("{")
        if series != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total, found = total + value, True
    return total if found else None


def idle_gauges(client, timeout=10.0):
    """Polls until the running/waiting/in-use gauges read 0; returns the last values read."""
    deadline = time.monotonic() + timeout
    while True:
        values = read_metrics(client)
        seen = {name: metric(values, name) for name in IDLE_GAUGES}
        if all(v == 0 for v in seen.values()) or time.monotonic() > deadline:
            return seen
        time.sleep(0.1)


def process_tree(pid):
    """pid and its descendants (a `--data-parallel` front's engine ranks are its children)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    pending.extend(int(child) for child in f.read().split())
        except OSError:
            pass
    return found


def rss_bytes(pid):
    """VmRSS of the server: its process and its children together."""
    total = None
    for member in process_tree(pid):
        try:
            with open(f"/proc/{member}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total = (total or 0) + int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def nvidia_smi(*query):
    try:
        result = subprocess.run(["nvidia-smi", *query], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def gpu_memory_mib(pid, device):
    """(MiB, what was measured) for the server's GPU memory, or None where nvidia-smi cannot say.

    The process's own figure when nvidia-smi lists its pid; in a container whose PID namespace
    hides it, the used memory of its device instead (the server is then assumed to be its only
    user)."""
    if not device.startswith("cuda"):
        return None
    apps = nvidia_smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    if apps is None:
        return None
    members = {str(member) for member in process_tree(pid)}
    listed = []
    for line in apps.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] in members and fields[1].isdigit():
            listed.append(int(fields[1]))
    if listed:
        return sum(listed), "process" if len(listed) == 1 else f"{len(listed)} processes"
    index = device.partition(":")[2] or "0"
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible and int(index) < len(visible):
        index = visible[int(index)]
    used = nvidia_smi("--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", index)
    if used is None or not used.strip().isdigit():
        return None
    return int(used.strip()), f"device {index} (pid not listed)"


def memory_snapshot(server, device):
    gpu = gpu_memory_mib(server.pid, device)
    return {"rss_bytes": rss_bytes(server.pid), "gpu_mib": gpu[0] if gpu else None,
            "gpu_source": gpu[1] if gpu else None}


# ---------------------------------------------------------------------------------------------
# Functional checks: each returns a short PASS detail or raises CheckFailed


class Checks:
    def __init__(self, client, model, max_tokens):
        self.client, self.model, self.max_tokens = client, model, max_tokens
        self.results = []

    def run(self, name, function):
        try:
            detail = function()
            ok = True
        except CheckFailed as error:
            ok, detail = False, str(error)
        except Exception as error:  # a crash in a check is that check's failure
            ok, detail = False, f"{type(error).__name__}: {error}"
        return self.record(name, ok, detail)

    def record(self, name, ok, detail):
        self.results.append({"name": name, "ok": ok, "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)
        return ok

    def chat_body(self, prompt, stream=False, thinking=None, **extra):
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": self.max_tokens, "temperature": 0, **extra}
        if thinking:
            body["thinking"] = {"type": thinking}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return body

    def post_json(self, path, body):
        """POSTs and returns the 200 body's JSON; anything else fails the check."""
        reply = self.client.post(path, body)
        if reply.status == 400 and b"outside the model's vocabulary" in reply.body:
            raise CheckFailed(f"400 {reply.json()['error']['message']!r}: the model's vocabulary is "
                              "smaller than the tokenizer's, so prompts cannot encode; serve a model "
                              "with the full vocabulary (tests/data/golden/v4/real_vocab)")
        expect(reply.status == 200, f"status {reply.status}: {reply.body[:300]!r}")
        return reply.json()

    def chat_json(self, body):
        return self.post_json("/v1/chat/completions", body)

    def check_usage(self, usage, where):
        expect(isinstance(usage, dict), f"{where}: no usage")
        expect(usage.get("prompt_tokens", 0) > 0, f"{where}: prompt_tokens {usage.get('prompt_tokens')}")
        completion = usage.get("completion_tokens")
        expect(isinstance(completion, int) and 0 <= completion <= self.max_tokens,
               f"{where}: completion_tokens {completion} (max_tokens {self.max_tokens})")
        expect(usage.get("total_tokens") == usage["prompt_tokens"] + completion,
               f"{where}: total_tokens {usage.get('total_tokens')} != prompt + completion")

    def health(self):
        reply = self.client.request("GET", "/health")
        expect(reply.status == 200, f"status {reply.status}")
        expect(reply.json().get("status") == "ok", f"body {reply.body[:200]!r}")
        return "200 {\"status\": \"ok\"}"

    def models(self):
        reply = self.client.request("GET", "/v1/models")
        expect(reply.status == 200, f"status {reply.status}")
        data = reply.json().get("data") or []
        ids = [m.get("id") for m in data]
        expect(ids == [self.model], f"models {ids}, expected [{self.model!r}]")
        expect((data[0].get("max_model_len") or 0) > 0, f"max_model_len {data[0].get('max_model_len')}")
        return f"[{self.model!r}], max_model_len {data[0]['max_model_len']}"

    def chat(self):
        body = self.chat_json(self.chat_body("Hello there"))
        expect(body.get("object") == "chat.completion", f"object {body.get('object')!r}")
        expect(str(body.get("id", "")).startswith("chatcmpl-"), f"id {body.get('id')!r}")
        expect(body.get("model") == self.model, f"model {body.get('model')!r}")
        choice = body["choices"][0]
        message = choice.get("message")
        expect(isinstance(message, dict) and message.get("role") == "assistant", f"message {message!r}")
        expect(isinstance(message.get("content"), (str, type(None))), f"content {message.get('content')!r}")
        expect(choice.get("finish_reason") in ("stop", "length"), f"finish_reason {choice.get('finish_reason')!r}")
        self.check_usage(body.get("usage"), "usage")
        usage = body["usage"]
        return (f"finish {choice['finish_reason']}, prompt_tokens {usage['prompt_tokens']}, "
                f"completion_tokens {usage['completion_tokens']}")

    def chat_stream_equals_whole(self):
        details = []
        for prompt, thinking in (("Hello there", "enabled"), ("Write a haiku about the sea", "disabled")):
            whole = self.chat_json(self.chat_body(prompt, thinking=thinking))
            message, choice = whole["choices"][0]["message"], whole["choices"][0]
            streamed = self.client.stream("/v1/chat/completions", self.chat_body(prompt, stream=True, thinking=thinking))
            where = f"thinking {thinking}"
            expect(streamed.error is None, f"{where}: {streamed.error}")
            expect((streamed.content_type or "").startswith("text/event-stream"),
                   f"{where}: Content-Type {streamed.content_type!r}")
            expect(len(streamed.ids) == 1, f"{where}: {len(streamed.ids)} ids across the chunks")
            expect(streamed.roles == ["assistant"], f"{where}: role deltas {streamed.roles}")
            expect(streamed.content == (message.get("content") or ""),
                   f"{where}: streamed content {streamed.content!r} != {message.get('content')!r}")
            expect(streamed.reasoning == (message.get("reasoning_content") or ""),
                   f"{where}: streamed reasoning {streamed.reasoning!r} != {message.get('reasoning_content')!r}")
            expect(len(streamed.content + streamed.reasoning) > 0, f"{where}: empty answer")
            expect(streamed.finishes == [choice["finish_reason"]],
                   f"{where}: finish reasons {streamed.finishes} != [{choice['finish_reason']!r}]")
            self.check_usage(streamed.usage, f"{where}: stream usage")
            for key in ("prompt_tokens", "completion_tokens"):
                expect(streamed.usage[key] == whole["usage"][key],
                       f"{where}: stream {key} {streamed.usage[key]} != {whole['usage'][key]}")
            details.append(f"{where}: {streamed.chunks} chunks, {streamed.usage['completion_tokens']} tokens")
        return "; ".join(details) + ", equal to the whole answers"

    def completions(self):
        request = {"model": self.model, "prompt": "The quick brown fox", "max_tokens": self.max_tokens,
                   "temperature": 0}
        body = self.post_json("/v1/completions", request)
        expect(body.get("object") == "text_completion", f"object {body.get('object')!r}")
        choice = body["choices"][0]
        expect(isinstance(choice.get("text"), str), f"text {choice.get('text')!r}")
        expect(choice.get("finish_reason") in ("stop", "length"), f"finish_reason {choice.get('finish_reason')!r}")
        self.check_usage(body.get("usage"), "usage")
        streamed = self.client.stream("/v1/completions", {**request, "stream": True,
                                                          "stream_options": {"include_usage": True}})
        expect(streamed.error is None, f"stream: {streamed.error}")
        expect(streamed.text == choice["text"], f"streamed text {streamed.text!r} != {choice['text']!r}")
        expect(streamed.usage and streamed.usage.get("completion_tokens") == body["usage"]["completion_tokens"],
               f"stream usage {streamed.usage}")
        return f"{body['usage']['completion_tokens']} tokens, streamed text equal"

    def error_object(self, reply, status, where):
        expect(reply.status == status, f"{where}: status {reply.status}, expected {status}: {reply.body[:200]!r}")
        try:
            error = reply.json().get("error")
        except ValueError:
            raise CheckFailed(f"{where}: body is not JSON: {reply.body[:200]!r}")
        expect(isinstance(error, dict) and all(k in error for k in ("message", "type", "param", "code")),
               f"{where}: not an OpenAI error object: {reply.body[:200]!r}")
        expect(isinstance(error["message"], str) and error["message"], f"{where}: empty message")
        return error

    def malformed_body(self):
        error = self.error_object(self.client.post("/v1/chat/completions", '{"model": "x", "messages": ['),
                                  400, "invalid JSON")
        expect(error["type"] == "invalid_request_error", f"invalid JSON: type {error['type']!r}")
        missing = self.error_object(self.client.post("/v1/chat/completions", {"model": self.model}),
                                    400, "no messages")
        return f"400 {error['code'] or error['type']}; without messages: 400 {missing['message']!r}"

    def unknown_model(self):
        reply = self.client.post("/v1/chat/completions", {**self.chat_body("hi"), "model": "no-such-model"})
        error = self.error_object(reply, 404, "unknown model")
        expect(error["code"] == "model_not_found", f"code {error['code']!r}")
        return "404 model_not_found"

    def messages(self):
        body = self.post_json("/v1/messages", {"model": self.model, "max_tokens": self.max_tokens, "temperature": 0,
                                               "messages": [{"role": "user", "content": "Hello there"}]})
        expect(body.get("type") == "message" and body.get("role") == "assistant",
               f"type {body.get('type')!r}, role {body.get('role')!r}")
        expect(str(body.get("id", "")).startswith("msg_"), f"id {body.get('id')!r}")
        expect(body.get("stop_reason") in ("end_turn", "max_tokens", "tool_use"), f"stop_reason {body.get('stop_reason')!r}")
        blocks = body.get("content") or []
        expect(blocks and all(b.get("type") in ("text", "thinking", "tool_use") for b in blocks),
               f"content blocks {[b.get('type') for b in blocks]}")
        usage = body.get("usage") or {}
        expect(usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0) > 0, f"usage {usage}")
        expect(1 <= usage.get("output_tokens", 0) <= self.max_tokens, f"output_tokens {usage.get('output_tokens')}")
        return f"stop_reason {body['stop_reason']}, blocks {[b['type'] for b in blocks]}, output_tokens {usage['output_tokens']}"

    def seeded_sampling(self):
        request = self.chat_body("Tell me a story", thinking="disabled", temperature=1, seed=7)
        answers = []
        for _ in range(2):
            body = self.chat_json(request)
            message = body["choices"][0]["message"]
            answers.append(((message.get("reasoning_content") or ""), (message.get("content") or ""),
                            body["usage"]["completion_tokens"]))
        expect(answers[0] == answers[1], f"seed 7 gave {answers[0]!r} then {answers[1]!r}")
        return f"temperature 1, seed 7: the same {answers[0][2]} tokens twice"


# ---------------------------------------------------------------------------------------------
# Load


def load_prompt(client_index):
    return f"{BASE_PROMPTS[client_index % len(BASE_PROMPTS)]} (client {client_index})"


def greedy_answers(checks, prompts):
    """The non-streaming greedy answers the streams under load must equal: {prompt: answer}."""
    answers = {}
    for prompt in prompts:
        body = checks.chat_json(checks.chat_body(prompt, thinking="disabled"))
        message = body["choices"][0]["message"]
        answers[prompt] = {"content": message.get("content") or "", "reasoning": message.get("reasoning_content") or "",
                           "finish": body["choices"][0]["finish_reason"],
                           "tokens": body["usage"]["completion_tokens"]}
    return answers


def stream_problem(stream, want, max_tokens):
    """Why a load stream is not what a client may accept, or None."""
    if stream.error:
        return stream.error
    if len(stream.finishes) != 1:
        return f"finish reasons {stream.finishes}"
    if len(stream.ids) != 1:
        return f"{len(stream.ids)} ids in one stream"
    if not stream.usage or not 0 <= stream.usage.get("completion_tokens", -1) <= max_tokens:
        return f"usage {stream.usage}"
    if want and (stream.content, stream.reasoning, stream.finishes[0], stream.usage["completion_tokens"]) != \
            (want["content"], want["reasoning"], want["finish"], want["tokens"]):
        return (f"greedy mismatch: {stream.content!r} ({stream.usage['completion_tokens']} tokens, "
                f"{stream.finishes[0]}) != {want['content']!r} ({want['tokens']} tokens, {want['finish']})")
    return None


def run_wave(checks, clients, expected, allow_429, label):
    """`clients` threads, released together, each streaming one chat completion to [DONE]."""
    results = [None] * clients
    barrier = threading.Barrier(clients + 1)

    def one(index):
        barrier.wait()
        prompt = load_prompt(index)
        results[index] = checks.client.stream("/v1/chat/completions",
                                              checks.chat_body(prompt, stream=True, thinking="disabled"))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.monotonic()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started

    statuses = collections.Counter(r.status or 0 for r in results)
    failures, kinds, allowed_429 = [], collections.Counter(), 0
    for index, stream in enumerate(results):
        if stream.status == 429 and allow_429:
            allowed_429 += 1
            continue
        problem = stream_problem(stream, expected.get(load_prompt(index)), checks.max_tokens)
        if problem:
            kind = ("no answer" if stream.status is None else "non-200" if stream.status != 200
                    else "broken stream" if stream.broken
                    else "greedy mismatch" if problem.startswith("greedy") else "protocol")
            kinds[kind] += 1
            failures.append(f"client {index}: {problem}")
    ok = [r for r in results if r.status == 200 and not r.error]
    tokens = sum((r.usage or {}).get("completion_tokens", 0) for r in ok)
    wave = {"label": label, "clients": clients, "ok": len(ok), "failed": len(failures),
            "statuses": {str(k): v for k, v in sorted(statuses.items())}, "failure_kinds": dict(kinds),
            "allowed_429": allowed_429, "failures": failures[:20], "wall_s": wall, "completion_tokens": tokens,
            "tokens_per_s": tokens / wall if wall > 0 else None,
            "verified_greedy": sum(1 for i in range(clients) if load_prompt(i) in expected),
            "ttft_s": percentiles([r.ttft for r in ok if r.ttft is not None]),
            "latency_s": percentiles([r.latency for r in ok])}
    detail = (f"{len(ok)}/{clients} streams ok in {wall:.1f} s, {tokens} tokens "
              f"({wave['tokens_per_s']:.0f}/s), statuses {wave['statuses']}, "
              f"TTFT p50/p90/max {fmt_ms(wave['ttft_s'])}, latency {fmt_ms(wave['latency_s'])}"
              + (f"; {allowed_429} answered 429 (--allow-429)" if allowed_429 else "")
              + (f"; failures {dict(kinds)}" if kinds else ""))
    checks.record(f"load {label}", not failures, detail)
    for failure in failures[:5]:
        print(f"        {failure}")
    return wave


# ---------------------------------------------------------------------------------------------


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deepinfer", required=True, help="the deepinfer binary")
    parser.add_argument("--model", required=True, help="checkpoint folder to serve")
    parser.add_argument("--tokenizer", help="tokenizer.json (default: the server's choice)")
    parser.add_argument("--device", default="cuda", help="cpu, cuda or cuda:N (default cuda)")
    parser.add_argument("--clients", type=int, default=256, help="concurrent streams per load wave (256)")
    parser.add_argument("--max-tokens", type=int, default=16, help="max_tokens of every request (16)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default)")
    parser.add_argument("--extra-args", default="", help="more `deepinfer serve` options, one string "
                        "(a single option without a space: --extra-args=--no-prefix-caching)")
    parser.add_argument("--json", help="write every figure to this JSON file")
    parser.add_argument("--allow-429", action="store_true", help="429 (waiting queue full) is no failure")
    parser.add_argument("--verify", type=int, default=16,
                        help="load prompts whose streams must equal their greedy answer (16)")
    parser.add_argument("--warmup", type=int, help="concurrent streams before the memory baseline "
                        "(default: --clients, as load.test.mjs: the baseline then holds the buffers a full batch needs)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per HTTP read (300)")
    parser.add_argument("--log", help="server log file (default: a temporary file, kept)")
    return parser.parse_args()


def main():
    args = parse_args()
    extra = shlex.split(args.extra_args)
    model_name = option_value(extra, "--served-model-name") or os.path.basename(os.path.normpath(args.model))
    host = option_value(extra, "--host") or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    port = args.port or free_port()
    log_path = args.log or tempfile.mkstemp(prefix="deepinfer-serve-", suffix=".log")[1]
    client = Client(host, port, option_value(extra, "--api-key") or os.environ.get("DEEPINFER_API_KEY"),
                    args.timeout)
    checks = Checks(client, model_name, args.max_tokens)
    server = Server(args, port, log_path)
    report = {"command": server.command, "log": log_path, "model": model_name, "device": args.device,
              "clients": args.clients, "max_tokens": args.max_tokens}
    print("starting:", shlex.join(server.command), f"(log {log_path})", flush=True)
    server.start()
    try:
        if startup(checks, server, report) and functional(checks):
            run_load(args, checks, server, report)
        elif server.process.poll() is None:
            print("SKIP  load and memory: the server does not answer chat completions")
    except KeyboardInterrupt:  # leave no server behind
        server.process.kill()
        server.process.wait()
        raise
    except Exception as error:  # e.g. the server died under load: still stop it and summarise
        checks.record("load and memory", False, f"{type(error).__name__}: {error}; log tail:\n{server.log_tail(10)}")
    shutdown(checks, server, report)
    return summary(args, report, checks, server)


def startup(checks, server, report):
    started = time.monotonic()
    try:
        server.wait_healthy(checks.client, 300)
    except RuntimeError as error:
        return checks.record("startup", False, str(error))
    report["startup_s"] = time.monotonic() - started
    report["startup_lines"] = [line for line in server.log_lines() if line.startswith("deepinfer serve:")]
    for line in report["startup_lines"]:
        print("   ", line)
    return checks.record("startup", True, f"/health 200 after {report['startup_s']:.1f} s")


def functional(checks):
    """Runs every functional check; True when chat completions work (the load needs them)."""
    chat_ok = True
    for name, function in (("health", checks.health), ("models", checks.models), ("chat", checks.chat),
                           ("chat stream == whole", checks.chat_stream_equals_whole),
                           ("completions", checks.completions), ("malformed body", checks.malformed_body),
                           ("unknown model", checks.unknown_model), ("messages", checks.messages),
                           ("seeded sampling", checks.seeded_sampling)):
        ok = checks.run(name, function)
        chat_ok = chat_ok and (ok or name != "chat")
    return chat_ok


def run_load(args, checks, server, report):
    """Warm-up, baseline, two waves, then the server's state against the baseline."""
    client = checks.client
    expected = {}

    def answers():
        expected.update(greedy_answers(checks, [load_prompt(i) for i in range(min(args.verify, args.clients))]))
        return f"{len(expected)} prompts answered without streaming (greedy)"

    checks.run("greedy answers for the load", answers)
    warmup_clients = args.clients if args.warmup is None else min(args.warmup, args.clients)
    if warmup_clients > 0:
        warmup = run_wave(checks, warmup_clients, expected, args.allow_429, "warm-up")
        report["warmup"] = warmup
    checks.run("idle before the load", lambda: idle_detail(idle_gauges(client)))
    baseline = memory_snapshot(server, args.device)
    report["waves"] = []
    for label in ("wave 1", "wave 2"):
        wave = run_wave(checks, args.clients, expected, args.allow_429, label)
        report["waves"].append(wave)
        if server.process.poll() is not None:
            checks.record("server alive under load", False, f"exited with {server.process.returncode} in {label}; "
                          f"log tail:\n{server.log_tail(10)}")
            return
        if label == "wave 1":
            after_wave1 = memory_snapshot(server, args.device)
    checks.run("metrics count every request", lambda: counted_detail(client))
    checks.run("idle after the load", lambda: idle_detail(idle_gauges(client)))
    checks.run("healthy after the load", checks.health)
    report["memory"] = check_memory(checks, server, args.device, baseline, after_wave1)
    metrics_after = read_metrics(client)
    report["metrics"] = {name: metric(metrics_after, name) for name in
                         IDLE_GAUGES + ("deepinfer:kv_cache_usage_perc", "deepinfer:kv_cache_snapshot_blocks",
                                        "deepinfer:kv_cache_blocks_total", "deepinfer:num_preemptions_total")}


def idle_detail(seen):
    expect(all(v == 0 for v in seen.values()), f"gauges not 0 after 10 s: {seen}")
    return ", ".join(f"{name.split(':')[1]} 0" for name in seen)


def counted_detail(client, path="/v1/chat/completions", timeout=10.0):
    """requests_total{endpoint=path} by status equals what this client received. The server
    records a request after its last byte, so the counts are polled for up to `timeout`."""
    want = {str(status): n for (p, status), n in client.answered.items() if p == path}
    deadline = time.monotonic() + timeout
    while True:
        values = read_metrics(client)
        counted = {}
        for key, value in values.items():
            status = re.search(r'status="(\d+)"', key)
            if key.startswith("deepinfer:requests_total{") and f'endpoint="{path}"' in key and status:
                counted[status.group(1)] = counted.get(status.group(1), 0) + int(value)  # summed over engine ranks
        if counted == want or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    expect(counted == want, f"requests_total{{endpoint={path}}} {counted}, the client received {want}")
    return f"requests_total{{endpoint={path}}} = what the client received: {dict(sorted(want.items()))}"


# New CUDA graphs (batch buckets first reached in the second wave) may add this much.
GRAPH_SLACK_MIB = 16


def check_memory(checks, server, device, baseline, after_wave1):
    """RSS back near the baseline (polled up to 10 s), GPU memory flat after the first wave."""
    limit = baseline["rss_bytes"] + max(64 * MIB, baseline["rss_bytes"] // 10)
    deadline = time.monotonic() + 10
    after = memory_snapshot(server, device)
    while after["rss_bytes"] > limit and time.monotonic() < deadline:
        time.sleep(0.25)
        after = memory_snapshot(server, device)
    memory = {"baseline": baseline, "after_wave1": after_wave1, "after": after, "rss_limit_bytes": limit}

    def rss():
        figures = (f"VmRSS {baseline['rss_bytes'] / MIB:.1f} MiB after warm-up, "
                   f"{after_wave1['rss_bytes'] / MIB:.1f} after wave 1, {after['rss_bytes'] / MIB:.1f} after "
                   f"the load (limit {limit / MIB:.1f})")
        expect(after["rss_bytes"] <= limit, f"grew too much: {figures}")
        return figures

    def gpu():
        if after["gpu_mib"] is None or after_wave1["gpu_mib"] is None:
            return "not measured (no nvidia-smi, or the CPU)"
        figures = (f"{baseline['gpu_mib']} MiB after warm-up, {after_wave1['gpu_mib']} after wave 1, "
                   f"{after['gpu_mib']} after the load ({after['gpu_source']})")
        expect(after["gpu_mib"] <= after_wave1["gpu_mib"] + GRAPH_SLACK_MIB,
               f"grew by more than {GRAPH_SLACK_MIB} MiB after the first wave: {figures}")
        return figures

    checks.run("resident memory back to baseline", rss)
    checks.run("GPU memory flat after the first wave (16 MiB for new graphs)", gpu)
    return memory


def shutdown(checks, server, report):
    if server.process.poll() is not None:
        report["exit_code"] = server.process.returncode
        checks.record("SIGTERM exits 0", False, f"the server had already exited with {report['exit_code']}")
        return
    code = server.stop(30)
    report["exit_code"] = code
    checks.record("SIGTERM exits 0", code == 0,
                  "no exit within 30 s (killed)" if code is None else f"exit code {code}")


def summary(args, report, checks, server):
    statuses = collections.Counter()
    for line in server.log_lines():
        match = re.match(r"request id=\S+ endpoint=\S+ status=(\d+)", line)
        if match:
            statuses[match.group(1)] += 1
    report["log_request_statuses"] = dict(sorted(statuses.items()))
    report["checks"] = checks.results
    failed = [c for c in checks.results if not c["ok"]]
    report["passed"] = not failed

    print("\nsummary")
    print(f"  checks: {len(checks.results) - len(failed)} passed, {len(failed)} failed"
          + (": " + ", ".join(c["name"] for c in failed) if failed else ""))
    for wave in report.get("waves", []):
        print(f"  load {wave['label']}: {wave['ok']}/{wave['clients']} ok in {wave['wall_s']:.1f} s, "
              f"TTFT {fmt_ms(wave['ttft_s'])}, latency {fmt_ms(wave['latency_s'])} (p50 / p90 / max)")
    memory = report.get("memory")
    if memory:
        b, w, a = memory["baseline"], memory["after_wave1"], memory["after"]
        print(f"  VmRSS: {b['rss_bytes'] / MIB:.1f} MiB baseline, {w['rss_bytes'] / MIB:.1f} after wave 1, "
              f"{a['rss_bytes'] / MIB:.1f} after the load (limit {memory['rss_limit_bytes'] / MIB:.1f})")
        if a["gpu_mib"] is not None:
            print(f"  GPU: {b['gpu_mib']} MiB baseline, {w['gpu_mib']} after wave 1, {a['gpu_mib']} after the load "
                  f"({a['gpu_source']})")
    print(f"  server log: {report['log']} (request statuses {report['log_request_statuses']})")
    print(f"  server exit code: {report['exit_code']}")
    print("ALL PASSED" if not failed else "FAILED")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
