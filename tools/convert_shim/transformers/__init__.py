"""A stand-in for the two `transformers` names that llama.cpp's convert_hf_to_gguf.py imports.

This machine reaches Debian's packages and no Python index, and Debian packages no
`transformers` (nor `tokenizers`), so the converter cannot import it. Put this folder first on
PYTHONPATH when running the converter (docs/BENCHMARKS.md, "CPU: deepinfer vs llama.cpp"):

    PYTHONPATH=tools/convert_shim:LLAMA_CPP/gguf-py python3 LLAMA_CPP/convert_hf_to_gguf.py MODEL_DIR ...

What it provides, and only that:
- AutoConfig.from_pretrained raises, so the converter takes its own documented fallback and reads
  config.json as it is (ModelBase.load_hparams: "Trying to load config.json instead").
- AutoTokenizer.from_pretrained(dir) reads dir/tokenizer.json and dir/tokenizer_config.json and
  gives what the converter's get_vocab_base uses: vocab (model vocabulary plus added tokens),
  get_added_vocab(), added_tokens_decoder (content, special, normalized), encode and decode.
  encode is a byte-level BPE written for tokenizer.json files of the DeepSeek-V3 kind (a
  Sequence of Split pre-tokenizers with Isolated behaviour, then ByteLevel without its regex;
  BPE with merges; no normalizer): added tokens are split out first, then each Split regex in
  turn, then the merges by rank. With add_special_tokens (the default) the BOS id comes first
  when tokenizer_config.json says add_bos_token. Anything else in a tokenizer.json is refused,
  not guessed. The converter checks the result itself: it hashes encode() of its test text and
  accepts only a hash it knows (DeepSeek-V3's: "deepseek-v3"), so a wrong encode fails there.

Needs the `regex` module (Debian: python3-regex) for \\p{..} classes.
"""

import json
from functools import lru_cache
from pathlib import Path

__version__ = "0.0-deepinfer-shim"


class AutoConfig:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise OSError("transformers is not installed here (tools/convert_shim): read config.json directly")


def _bytes_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


class _AddedToken:
    def __init__(self, entry):
        self.content = entry["content"]
        self.special = bool(entry.get("special", False))
        self.normalized = bool(entry.get("normalized", not self.special))
        self.lstrip = bool(entry.get("lstrip", False))
        self.rstrip = bool(entry.get("rstrip", False))
        self.single_word = bool(entry.get("single_word", False))

    def __str__(self):
        return self.content

    def __repr__(self):
        return f"AddedToken({self.content!r}, special={self.special}, normalized={self.normalized})"


class _ByteLevelBpeTokenizer:
    def __init__(self, directory):
        import regex  # python3-regex: \p{..} classes and look-ahead, as the tokenizers library's Oniguruma

        directory = Path(directory)
        spec = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
        config_path = directory / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}

        model = spec.get("model", {})
        if model.get("type") != "BPE" or model.get("byte_fallback") or model.get("continuing_subword_prefix") \
                or model.get("end_of_word_suffix"):
            raise ValueError("tools/convert_shim: only plain byte-level BPE tokenizer.json files are supported")
        normalizer = spec.get("normalizer")
        if normalizer not in (None, {"type": "Sequence", "normalizers": []}):
            raise ValueError(f"tools/convert_shim: normalizer {normalizer!r} is not supported")
        pre = spec.get("pre_tokenizer") or {}
        steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
        self._splits = []
        for step in steps:
            if step.get("type") == "Split" and step.get("behavior") == "Isolated" and not step.get("invert") \
                    and "Regex" in step.get("pattern", {}):
                self._splits.append(regex.compile(step["pattern"]["Regex"]))
            elif step.get("type") == "ByteLevel" and not step.get("use_regex", True) \
                    and not step.get("add_prefix_space", False):
                continue
            else:
                raise ValueError(f"tools/convert_shim: pre-tokenizer step {step!r} is not supported")

        self._vocab = dict(model["vocab"])
        merges = model["merges"]
        pairs = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]
        self._ranks = {pair: rank for rank, pair in enumerate(pairs)}
        self._byte_chars = _bytes_to_unicode()
        self._char_bytes = {c: b for b, c in self._byte_chars.items()}

        self.added_tokens_decoder = {}
        for entry in spec.get("added_tokens", []):
            self.added_tokens_decoder[int(entry["id"])] = _AddedToken(entry)
        if any(t.lstrip or t.rstrip or t.single_word for t in self.added_tokens_decoder.values()):
            raise ValueError("tools/convert_shim: added tokens with lstrip / rstrip / single_word are not supported")
        self._added = {t.content: i for i, t in self.added_tokens_decoder.items()}
        # Longest first, so a token that is a prefix of another never wins.
        contents = sorted(self._added, key=len, reverse=True)
        self._added_pattern = regex.compile("|".join(regex.escape(c) for c in contents)) if contents else None

        self.vocab = dict(self._vocab)
        self.vocab.update(self._added)
        self._id_to_token = {i: t for t, i in self.vocab.items()}

        def token_name(value):
            return value.get("content") if isinstance(value, dict) else value

        self.bos_token = token_name(config.get("bos_token"))
        self.eos_token = token_name(config.get("eos_token"))
        self.add_bos_token = bool(config.get("add_bos_token", False))
        self.add_eos_token = bool(config.get("add_eos_token", False))
        self.bos_token_id = self.vocab.get(self.bos_token) if self.bos_token else None
        self.eos_token_id = self.vocab.get(self.eos_token) if self.eos_token else None
        self.chat_template = config.get("chat_template")

    def get_vocab(self):
        return dict(self.vocab)

    def get_added_vocab(self):
        return dict(self._added)

    def __len__(self):
        return len(self.vocab)

    @lru_cache(maxsize=65536)
    def _bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                rank = self._ranks.get((parts[i], parts[i + 1]))
                if rank is not None and (best_rank is None or rank < best_rank):
                    best, best_rank = i, rank
            if best is None:
                break
            pair = (parts[best], parts[best + 1])
            merged, i = [], 0
            while i < len(parts):
                if i < len(parts) - 1 and (parts[i], parts[i + 1]) == pair:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return tuple(self._vocab[p] for p in parts)

    def _split(self, pieces, pattern):
        out = []
        for piece in pieces:
            start = 0
            for m in pattern.finditer(piece):
                if m.start() > start:
                    out.append(piece[start:m.start()])
                if m.end() > m.start():
                    out.append(m.group())
                start = m.end()
            if start < len(piece):
                out.append(piece[start:])
        return out

    def _encode_plain(self, text):
        pieces = [text]
        for pattern in self._splits:
            pieces = self._split(pieces, pattern)
        ids = []
        for piece in pieces:
            ids.extend(self._bpe("".join(self._byte_chars[b] for b in piece.encode("utf-8"))))
        return ids

    def encode(self, text, add_special_tokens=True, **kwargs):
        ids = []
        if add_special_tokens and self.add_bos_token and self.bos_token_id is not None:
            ids.append(self.bos_token_id)
        start = 0
        if self._added_pattern is not None:
            for m in self._added_pattern.finditer(text):
                if m.start() > start:
                    ids.extend(self._encode_plain(text[start:m.start()]))
                ids.append(self._added[m.group()])
                start = m.end()
        if start < len(text):
            ids.extend(self._encode_plain(text[start:]))
        if add_special_tokens and self.add_eos_token and self.eos_token_id is not None:
            ids.append(self.eos_token_id)
        return ids

    def decode(self, ids, skip_special_tokens=False, **kwargs):
        out, pending = [], bytearray()
        for i in ids:
            i = int(i)
            if i in self.added_tokens_decoder:
                if skip_special_tokens and self.added_tokens_decoder[i].special:
                    continue
                out.append(pending.decode("utf-8", errors="replace"))
                pending = bytearray()
                out.append(self.added_tokens_decoder[i].content)
            else:
                pending.extend(self._char_bytes[c] for c in self._id_to_token[i])
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(directory, *args, **kwargs):
        return _ByteLevelBpeTokenizer(directory)
