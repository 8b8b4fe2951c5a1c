#!/usr/bin/env python3
"""Synthetic chat data for the embedded model (issue 7), stdlib only, seeded.

Writes Chat Completions request bodies (one JSON object a line) whose LAST message is the
assistant answer to learn, for `deepinfer render --train`:

  OUT/chat_train.jsonl, OUT/chat_test.jsonl   request bodies (messages, tools, response_format,
                                              thinking), final assistant message included
  OUT/heldout_arithmetic.jsonl                the proof test's prompts: {"messages": [...],
                                              "answer": "85"}; none of them is in the train split
  OUT/code_train.jsonl, OUT/code_test.jsonl   raw code text (a JSON string a line) from Debian's
                                              Python library and C headers
  OUT/data_stats.json                         counts per task

Tasks: arithmetic and unit conversions with short <think> reasoning, string tasks (reverse,
count, upper-case), JSON answers in JSON mode, DSML tool calls to get_weather / calculator /
search with their results and a final answer, greetings. Usage:
  python3 make_data.py --out scratch/train/data [--seed 7] [--scale 1.0]
"""

import argparse
import glob
import json
import os
import random

SYSTEMS = [None, None, None, "You are a helpful assistant.", "You are deepinfer-mini, a small assistant."]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 12*7+3"}},
            "required": ["expression"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web and return the top results.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Search query"},
                "max_results": {"type": "integer", "description": "How many results"},
            },
            "required": ["query"],
        },
    },
}
TOOLS = [WEATHER_TOOL, CALC_TOOL, SEARCH_TOOL]

CITIES = ["Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Lisbon", "Oslo", "Cairo", "Lima",
          "Sydney", "Toronto", "Nairobi", "Seoul", "Mumbai", "Dublin", "Vienna", "Prague", "Athens", "Boston"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear"]
WORDS = ["apple", "banana", "cherry", "river", "mountain", "planet", "window", "garden", "pencil", "rocket",
         "silver", "orange", "purple", "castle", "dragon", "forest", "island", "jungle", "kitten", "lemon",
         "market", "number", "ocean", "pirate", "queen", "rabbit", "summer", "tomato", "violin", "winter",
         "yellow", "zebra", "bridge", "candle", "dinner", "engine", "flower", "guitar", "hammer", "jacket",
         "ladder", "mirror", "needle", "pepper", "rubber", "saddle", "tunnel", "wallet", "butter", "coffee",
         "hello", "world", "python", "kernel", "matrix", "vector", "cookie", "banjo", "sphinx", "quartz"]
TOPICS = ["the Eiffel Tower", "photosynthesis", "the Python language", "black holes", "the Nile river",
          "honey bees", "the Moon landing", "volcanoes", "the Linux kernel", "jazz music", "coral reefs",
          "the printing press", "glaciers", "the Roman empire", "solar panels"]
NAMES = ["Alice", "Bob", "Carol", "Dave", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Olivia"]
COLORS = ["red", "green", "blue", "black", "white", "yellow"]
FRUITS = ["apple", "banana", "cherry", "grape", "mango", "pear", "plum", "kiwi"]


def user(text):
    return {"role": "user", "content": text}


def assistant(content, reasoning=None, tool_calls=None):
    m = {"role": "assistant", "content": content}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    if tool_calls:
        m["tool_calls"] = tool_calls
    return m


def request(rng, messages, thinking=True, tools=None, json_mode=False, system=True):
    sysmsg = rng.choice(SYSTEMS) if system else None
    body = {"model": "deepinfer-mini"}
    msgs = ([{"role": "system", "content": sysmsg}] if sysmsg else []) + messages
    if not thinking:
        # the answer must not carry reasoning the prompt format drops
        msgs = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in msgs]
    body["messages"] = msgs
    body["thinking"] = {"type": "enabled" if thinking else "disabled"}
    if tools:
        body["tools"] = tools
    if json_mode:
        body["response_format"] = {"type": "json_object"}
    return body


# ---------------------------------------------------------------------------------------------
# Arithmetic: digit-by-digit reasoning a small model can follow.


def digits(n):
    return ", ".join(str(n))


def add_reasoning(a, b):
    da, db = str(a)[::-1], str(b)[::-1]
    carry, steps, out = 0, [], []
    for i in range(max(len(da), len(db))):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        s = x + y + carry
        c = f" + {carry}" if carry else ""
        steps.append(f"{x} + {y}{c} = {s}, write {s % 10}" + (", carry 1" if s >= 10 else ""))
        out.append(s % 10)
        carry = s // 10
    if carry:
        steps.append("write the carry 1")
    return f"Add {a} and {b} digit by digit from the right: " + "; ".join(steps) + f". So {a} + {b} = {a + b}."


def sub_reasoning(a, b):
    if a < b:
        return f"{a} is smaller than {b}, so the result is negative: {b} - {a} = {b - a}, so {a} - {b} = {a - b}."
    da, db = str(a)[::-1], str(b)[::-1]
    borrow, steps = 0, []
    for i in range(len(da)):
        x = int(da[i]) - borrow
        y = int(db[i]) if i < len(db) else 0
        if x < y:
            steps.append(f"{x} < {y}, borrow: {x + 10} - {y} = {x + 10 - y}")
            borrow = 1
        else:
            steps.append(f"{x} - {y} = {x - y}")
            borrow = 0
    return f"Subtract {b} from {a} digit by digit from the right: " + "; ".join(steps) + f". So {a} - {b} = {a - b}."


def mul_reasoning(a, b):
    # b is a single digit
    da = str(a)[::-1]
    carry, steps = 0, []
    for i, ch in enumerate(da):
        p = int(ch) * b + carry
        c = f" + {carry}" if carry else ""
        steps.append(f"{ch} x {b}{c} = {p}, write {p % 10}" + (f", carry {p // 10}" if p >= 10 else ""))
        carry = p // 10
    if carry:
        steps.append(f"write the carry {carry}")
    return f"Multiply {a} by {b} digit by digit from the right: " + "; ".join(steps) + f". So {a} x {b} = {a * b}."


ADD_Q = ["What is {a} + {b}?", "Compute {a} + {b}.", "{a} + {b} = ?", "What is {a} plus {b}?", "Add {a} and {b}."]
SUB_Q = ["What is {a} - {b}?", "Compute {a} - {b}.", "{a} - {b} = ?", "What is {a} minus {b}?", "Subtract {b} from {a}."]
MUL_Q = ["What is {a} * {b}?", "Compute {a} x {b}.", "{a} * {b} = ?", "What is {a} times {b}?", "Multiply {a} by {b}."]


def arithmetic_item(rng, core_only=False, big_share=0.2):
    """(question, reasoning, answer text, numeric answer, key) with `key` identifying the problem."""
    op = rng.choice("+-*")
    big = (not core_only) and rng.random() < big_share
    if op == "+":
        a, b = (rng.randint(10, 999), rng.randint(10, 999)) if big else (rng.randint(1, 99), rng.randint(1, 99))
        q, r, res, sym = rng.choice(ADD_Q), add_reasoning(a, b), a + b, "+"
    elif op == "-":
        a, b = (rng.randint(10, 999), rng.randint(10, 999)) if big else (rng.randint(10, 99), rng.randint(1, 99))
        if rng.random() < 0.85 and a < b:
            a, b = b, a
        q, r, res, sym = rng.choice(SUB_Q), sub_reasoning(a, b), a - b, "-"
    else:
        a, b = (rng.randint(10, 999), rng.randint(2, 9)) if big else (rng.randint(2, 99), rng.randint(2, 9))
        if rng.random() < 0.5 and not big:
            q = rng.choice(MUL_Q).format(a=b, b=a)  # single digit first: same reasoning
        else:
            q = rng.choice(MUL_Q).format(a=a, b=b)
        r, res, sym = mul_reasoning(a, b), a * b, "x"
        return q, r, f"{a} {sym} {b} = {res}", res, ("*", min(a, b), max(a, b))
    return q.format(a=a, b=b), r, f"{a} {sym} {b} = {res}", res, (op, a, b)


UNITS = [  # (from, to, factor, word)
    ("km", "m", 1000, "kilometers to meters"), ("m", "cm", 100, "meters to centimeters"),
    ("kg", "g", 1000, "kilograms to grams"), ("h", "min", 60, "hours to minutes"),
    ("min", "s", 60, "minutes to seconds"), ("L", "mL", 1000, "liters to milliliters"),
    ("cm", "mm", 10, "centimeters to millimeters"), ("day", "h", 24, "days to hours"),
]


def unit_item(rng):
    f, t, k, _ = rng.choice(UNITS)
    n = rng.randint(1, 99)
    if rng.random() < 0.3 and k in (1000, 100, 10):
        total = n * k
        q = rng.choice(["Convert {v} {t} to {f}.", "How many {f} is {v} {t}?"]).format(v=total, t=t, f=f)
        r = f"1 {f} = {k} {t}, so divide by {k}: {total} / {k} = {n}."
        return q, r, f"{total} {t} = {n} {f}", n
    q = rng.choice(["Convert {n} {f} to {t}.", "How many {t} are in {n} {f}?", "{n} {f} in {t}?"]).format(n=n, f=f, t=t)
    r = f"1 {f} = {k} {t}, so multiply by {k}: {n} x {k} = {n * k}."
    return q, r, f"{n} {f} = {n * k} {t}", n * k


def string_item(rng):
    kind = rng.choice(["reverse", "count", "upper", "length"])
    w = rng.choice(WORDS)
    if kind == "reverse":
        q = rng.choice(["Reverse the word '{w}'.", "Write '{w}' backwards.", "What is '{w}' reversed?"]).format(w=w)
        r = f"The letters of {w} are {', '.join(w)}. In reverse order: {', '.join(w[::-1])}."
        return q, r, w[::-1]
    if kind == "count":
        ch = rng.choice(w) if rng.random() < 0.8 else rng.choice("aeioustrn")
        n = w.count(ch)
        q = rng.choice(["How many times does the letter '{c}' appear in '{w}'?", "Count the letter '{c}' in '{w}'."]).format(c=ch, w=w)
        marks = ", ".join(f"{x}{' (yes)' if x == ch else ''}" for x in w)
        r = f"Go through {w}: {marks}. That is {n}."
        return q, r, f"The letter '{ch}' appears {n} time{'s' if n != 1 else ''} in '{w}'."
    if kind == "length":
        q = rng.choice(["How many letters are in '{w}'?", "What is the length of the word '{w}'?"]).format(w=w)
        r = f"The letters of {w} are {', '.join(w)}. Counting them gives {len(w)}."
        return q, r, f"'{w}' has {len(w)} letters."
    phrase = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
    q = rng.choice(["Convert '{p}' to upper case.", "Write '{p}' in capital letters.", "Uppercase: {p}"]).format(p=phrase)
    r = f"Each letter of '{phrase}' becomes its capital form."
    return q, r, phrase.upper()


def json_item(rng):
    kind = rng.choice(["person", "list", "point", "weather", "book"])
    if kind == "person":
        name, age, city = rng.choice(NAMES), rng.randint(18, 80), rng.choice(CITIES)
        q = f"Give me a JSON object for a person named {name}, aged {age}, living in {city}."
        obj = {"name": name, "age": age, "city": city}
    elif kind == "list":
        items = rng.sample(FRUITS, rng.randint(2, 4))
        q = f"Return the fruits {', '.join(items)} as a JSON object with a key \"fruits\"."
        obj = {"fruits": items}
    elif kind == "point":
        x, y = rng.randint(-50, 50), rng.randint(-50, 50)
        q = f"Describe the point x={x}, y={y} as JSON."
        obj = {"x": x, "y": y}
    elif kind == "weather":
        city, t, c = rng.choice(CITIES), rng.randint(-10, 35), rng.choice(CONDITIONS)
        q = f"Output JSON with the city {city}, temperature {t} and condition {c}."
        obj = {"city": city, "temperature": t, "condition": c}
    else:
        name, n, color = rng.choice(NAMES), rng.randint(50, 900), rng.choice(COLORS)
        q = f"Make a JSON record of a book by {name} with {n} pages and a {color} cover."
        obj = {"author": name, "pages": n, "cover": color}
    r = "The user wants a JSON object with the fields " + ", ".join(obj) + "."
    return q, r, json.dumps(obj)


def tool_result_json(rng, obj, extras=None):
    """A tool result as clients write it: JavaScript's JSON.stringify (compact) as often as Python's
    json.dumps (spaced), keys in any order, sometimes pretty-printed, sometimes with fields the
    answer does not need (issue 17: the model misread compact results it had never seen)."""
    fields = dict(obj)
    for key, value in (extras or {}).items():
        if rng.random() < 0.5:
            fields[key] = value
    keys = list(fields)
    if rng.random() < 0.5:
        rng.shuffle(keys)
    ordered = {key: fields[key] for key in keys}
    style = rng.random()
    if style < 0.45:
        return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)
    if style < 0.9:
        return json.dumps(ordered, ensure_ascii=False)
    return json.dumps(ordered, indent=2, ensure_ascii=False)


def tool_conversation(rng, call_id):
    """[(messages up to and including the assistant turn to learn)] for one tool task: the call
    turn, and the final answer after the tool result."""
    kind = rng.choice(["weather", "calc", "search"])
    if kind == "weather":
        city = rng.choice(CITIES)
        q = rng.choice(["What's the weather in {c}?", "Is it raining in {c} right now?", "Tell me the current weather in {c}."]).format(c=city)
        reason = f"The user asks about the weather in {city}. I should call get_weather."
        call = {"name": "get_weather", "arguments": json.dumps({"city": city})}
        t, c = rng.randint(-10, 35), rng.choice(CONDITIONS)
        result = tool_result_json(rng, {"city": city, "temperature_c": t, "condition": c},
                                  {"humidity": rng.randint(10, 100),
                                   "wind": {"speed_kmh": rng.randint(0, 60), "direction": rng.choice("NESW")},
                                   "updated": f"{rng.randint(0, 23):02d}:{rng.choice(['00', '15', '30', '45'])}"})
        final_reason = f"The tool says {t} degrees C and {c}."
        final = f"It is currently {t}°C and {c} in {city}."
    elif kind == "calc":
        a, b = rng.randint(10, 9999), rng.randint(2, 999)
        op = rng.choice("+-*")
        expr = f"{a}{op}{b}"
        val = eval(expr)  # noqa: S307 (our own digits and one operator)
        q = rng.choice(["Use the calculator to compute {e}.", "Please calculate {e} with the calculator tool.", "What is {e}? Use a tool."]).format(e=expr)
        reason = f"The user wants {expr} computed with the calculator."
        call = {"name": "calculator", "arguments": json.dumps({"expression": expr})}
        result = str(val)
        final_reason = f"The calculator returned {val}."
        final = f"{expr} = {val}"
    else:
        topic = rng.choice(TOPICS)
        n = rng.randint(1, 3)
        q = rng.choice(["Search the web for {t}.", "Look up {t} for me.", "Find information about {t}."]).format(t=topic)
        reason = f"The user wants information about {topic}. I should call search."
        args = {"query": topic}
        if rng.random() < 0.4:
            args["max_results"] = n
        call = {"name": "search", "arguments": json.dumps(args)}
        result = tool_result_json(rng, {"results": [{"title": f"{topic[0].upper() + topic[1:]} - Encyclopedia",
                                                     "snippet": f"An article about {topic}."}]},
                                  {"total": rng.randint(1, 500), "query": topic})
        final_reason = "The search returned one encyclopedia article."
        final = f"I found an encyclopedia article about {topic}: \"An article about {topic}.\""
    tools = rng.sample(TOOLS, rng.randint(1, 3))
    if not any(t["function"]["name"] == call["name"] for t in tools):
        tools.append(next(t for t in TOOLS if t["function"]["name"] == call["name"]))
    rng.shuffle(tools)
    tc = [{"id": call_id, "type": "function", "function": call}]
    first = [user(q), assistant("", reason, tc)]
    second = first + [{"role": "tool", "tool_call_id": call_id, "content": result}, assistant(final, final_reason)]
    return tools, first, second


GREETINGS = [
    ("Hello", "Hello! How can I help you today?"),
    ("Hi!", "Hi! What can I do for you?"),
    ("Who are you?", "I am deepinfer-mini, a small model trained for arithmetic, string tasks, JSON and tool calls."),
    ("Thanks!", "You're welcome!"),
    ("What can you do?", "I can do simple arithmetic, unit conversions, string tasks, JSON answers and tool calls."),
]


def chat_examples(rng, n_arith, n_units, n_strings, n_json, n_tools, n_greet, heldout_keys, big_share=0.2):
    out = []
    for _ in range(n_arith):
        while True:
            q, r, a, _, key = arithmetic_item(rng, big_share=big_share)
            if key not in heldout_keys:
                break
        think = rng.random() < 0.8
        out.append(("arith", request(rng, [user(q), assistant(a, r)], thinking=think)))
    for _ in range(n_units):
        q, r, a, _ = unit_item(rng)
        out.append(("units", request(rng, [user(q), assistant(a, r)], thinking=rng.random() < 0.8)))
    for _ in range(n_strings):
        q, r, a = string_item(rng)
        out.append(("strings", request(rng, [user(q), assistant(a, r)], thinking=rng.random() < 0.7)))
    for _ in range(n_json):
        q, r, a = json_item(rng)
        out.append(("json", request(rng, [user(q), assistant(a, r)], thinking=rng.random() < 0.5, json_mode=True)))
    for i in range(n_tools):
        tools, first, second = tool_conversation(rng, f"call_{rng.randint(0, 10**6):06d}")
        think = rng.random() < 0.7
        out.append(("tool_call", request(rng, first, thinking=think, tools=tools)))
        out.append(("tool_answer", request(rng, second, thinking=think, tools=tools)))
    for _ in range(n_greet):
        q, a = rng.choice(GREETINGS)
        tools = rng.sample(TOOLS, rng.randint(1, 3)) if rng.random() < 0.3 else None
        out.append(("greeting", request(rng, [user(q), assistant(a, "A friendly reply is enough.")], thinking=rng.random() < 0.5, tools=tools)))
    rng.shuffle(out)
    return out


def code_texts(rng, max_chars, n_files, min_len=400):
    """Chunks of Debian's Python library and C headers, split at blank lines."""
    files = sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True)) + sorted(glob.glob("/usr/include/**/*.h", recursive=True))
    files = [f for f in files if "test" not in f and os.path.getsize(f) > 200]
    rng.shuffle(files)
    chunks = []
    for path in files[:n_files]:
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        cur = ""
        for block in text.split("\n\n"):
            if len(cur) + len(block) + 2 > max_chars and len(cur) >= min_len:
                chunks.append(cur)
                cur = ""
            cur = cur + ("\n\n" if cur else "") + block[: max_chars * 2]
        if len(cur) >= min_len:
            chunks.append(cur)
    rng.shuffle(chunks)
    return chunks


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every task count")
    ap.add_argument("--heldout", type=int, default=200, help="held-out arithmetic prompts")
    ap.add_argument("--arith", type=int, default=150000, help="arithmetic examples (before --scale)")
    ap.add_argument("--big-share", type=float, default=0.2, help="share of 3-digit arithmetic problems")
    ap.add_argument("--code-files", type=int, default=300)
    ap.add_argument("--code-chars", type=int, default=1800)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    s = args.scale

    # Held-out arithmetic first: their operand pairs are kept out of every split.
    heldout, keys = [], set()
    while len(heldout) < args.heldout:
        q, r, a, val, key = arithmetic_item(rng, core_only=True)
        if key in keys:
            continue
        keys.add(key)
        heldout.append({"messages": [user(q)], "answer": str(val), "reasoning": r, "content": a})

    train = chat_examples(rng, int(args.arith * s), int(8000 * s), int(12000 * s), int(8000 * s), int(9000 * s), int(800 * s), keys, args.big_share)
    test = chat_examples(random.Random(args.seed + 1), 300, 60, 100, 80, 80, 10, keys, args.big_share)
    # the test split's own arithmetic stays a loss measure; the proof uses heldout_arithmetic
    write_jsonl(os.path.join(args.out, "chat_train.jsonl"), [r for _, r in train])
    write_jsonl(os.path.join(args.out, "chat_test.jsonl"), [r for _, r in test])
    write_jsonl(os.path.join(args.out, "heldout_arithmetic.jsonl"), heldout)

    code = code_texts(rng, args.code_chars, args.code_files)
    n_test = max(20, len(code) // 50)
    write_jsonl(os.path.join(args.out, "code_test.jsonl"), code[:n_test])
    write_jsonl(os.path.join(args.out, "code_train.jsonl"), code[n_test:])

    stats = {"seed": args.seed, "scale": s, "heldout_arithmetic": len(heldout), "code_train": len(code) - n_test, "code_test": n_test}
    for name, rows in (("train", train), ("test", test)):
        per = {}
        for kind, _ in rows:
            per[kind] = per.get(kind, 0) + 1
        stats["chat_" + name] = per
    with open(os.path.join(args.out, "data_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
