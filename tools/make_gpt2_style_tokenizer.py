#!/usr/bin/env python3
"""Builds tests/data/tokenizer_parity/gpt2_style_tokenizer.json: a small GPT-2-style byte-level BPE
(ByteLevel pre-tokenizer with the GPT-2 regex and add_prefix_space) cut from the first merges of the
bundled DeepSeek tokenizer, plus added tokens that exercise lstrip / rstrip / single_word /
normalized. Ids are consecutive so the Hugging Face library assigns the declared ids."""
import json
import pathlib

root = pathlib.Path(__file__).resolve().parent.parent
source = json.loads((root / "assets/tokenizer/deepseek_v41_tokenizer.json").read_text())


def byte_alphabet():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, shifted = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return chars


vocab = {}
for b, c in byte_alphabet().items():
    vocab[c] = len(vocab)
merges = []
for merge in source["model"]["merges"]:
    left, right = merge.split(" ") if isinstance(merge, str) else merge
    if left in vocab and right in vocab and len(merges) < 3000:
        merges.append([left, right])
        if left + right not in vocab:
            vocab[left + right] = len(vocab)

added = []
for content, flags in [
    ("<|endoftext|>", dict(special=True, normalized=False)),
    ("[MASK]", dict(special=True, lstrip=True, normalized=False)),
    ("[SEP]", dict(special=True, rstrip=True, normalized=False)),
    ("cat", dict(special=False, single_word=True, normalized=True)),
    ("<ctl>", dict(special=False, lstrip=True, rstrip=True, normalized=True)),
    ("<ctl2>", dict(special=True, normalized=True)),
]:
    token = dict(id=len(vocab) + len(added), content=content, single_word=False, lstrip=False, rstrip=False,
                 normalized=True, special=False)
    token.update(flags)
    added.append(token)

tokenizer = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
              "merges": merges},
}
out = root / "tests/data/tokenizer_parity/gpt2_style_tokenizer.json"
out.write_text(json.dumps(tokenizer, ensure_ascii=False))
print(out, len(vocab), "tokens", len(merges), "merges")
