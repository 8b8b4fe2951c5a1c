#!/usr/bin/env python3
"""Writes the seed corpus for fuzz/fuzz_safetensors: a few small, valid .safetensors files laid out
as the reference writer lays them out (header space-padded to 8 bytes, tensors packed)."""
import json
import pathlib
import struct

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
         "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def safetensors(tensors, metadata=None):
    header, data = {}, bytearray()
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        count = SIZES[dtype]
        for dim in shape:
            count *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + count]}
        data += bytes((len(data) + i) * 37 % 251 for i in range(count))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(data)


SEEDS = {
    "single_f32": [("weight", "F32", [2, 3])],
    "every_dtype": [(f"t.{dtype}", dtype, [2]) for dtype in SIZES],
    "empty_and_scalar": [("empty", "BF16", [0]), ("scalar", "F32", []), ("zeros", "I32", [3, 0, 2]), ("v", "U8", [3])],
    "fp4_packed": [("layers.0.ffn.experts.0.w1.weight", "I8", [4, 8]),
                   ("layers.0.ffn.experts.0.w1.scale", "F8_E8M0", [4, 1])],
}

out = pathlib.Path(__file__).resolve().parent.parent / "fuzz" / "corpus" / "fuzz_safetensors"
out.mkdir(parents=True, exist_ok=True)
for name, tensors in SEEDS.items():
    (out / f"{name}.safetensors").write_bytes(safetensors(tensors))
(out / "metadata_only.safetensors").write_bytes(safetensors([], {"format": "pt"}))
(out / "with_metadata.safetensors").write_bytes(
    safetensors([("embed", "F16", [4, 2]), ("norm", "F32", [2])], {"format": "pt", "source": "seed"}))
