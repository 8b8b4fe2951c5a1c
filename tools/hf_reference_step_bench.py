#!/usr/bin/env python3
"""Decode-step time of the transformers reference (DeepseekV4ForCausalLM, eager) on the GPU.

The floor any user can reproduce beside `decode_step_bench` (docs/BENCHMARKS.md): the same
shapes as `tools/make_synthetic_v41_flash.py --family v4 --layers N` (the release config's
layers floor(i * 43 / N), their attention and MoE kinds), random BF16 weights made on the device
(the reference's eager path computes in BF16 whatever the checkpoint's storage, and random
weights time the same as loaded ones), a prefill of --context tokens per sequence, then --steps
decode steps with the reference's own cache, each timed alone (synchronised). Prints one line
per batch: the median ms/step and the prefill time.

    python3 tools/hf_reference_step_bench.py --layers 4 --batch 1,16,64 --context 512 [--compile]

Needs torch and transformers >= 5.17 (models.deepseek_v4); not part of the build or the tests.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

CONFIG = Path(__file__).resolve().parent.parent / "tests/data/configs/v4_flash_transformers.json"


def reference_config(layers):
    from transformers import DeepseekV4Config

    release = json.loads(CONFIG.read_text())
    release_layers = release["num_hidden_layers"]
    source_of = [i * release_layers // layers for i in range(layers)]
    release["num_hidden_layers"] = layers
    release["layer_types"] = [release["layer_types"][s] for s in source_of]
    release["mlp_layer_types"] = [release["mlp_layer_types"][s] for s in source_of]
    release.pop("quantization_config", None)  # BF16 weights: no FP8 loader path
    release["num_nextn_predict_layers"] = 0
    return DeepseekV4Config(**release)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", default="1,16,64", help="comma-separated batch sizes")
    parser.add_argument("--context", type=int, default=512, help="prefilled tokens per sequence")
    parser.add_argument("--steps", type=int, default=8, help="timed decode steps per batch")
    parser.add_argument("--compile", action="store_true", help="torch.compile the decode forward")
    args = parser.parse_args()

    import torch
    from transformers import DeepseekV4ForCausalLM

    config = reference_config(args.layers)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    start = time.perf_counter()
    with torch.device("cuda"):
        model = DeepseekV4ForCausalLM(config)
    model.eval()
    torch.cuda.synchronize()
    print(f"model: {args.layers} layers {config.layer_types} {config.mlp_layer_types}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, "
          f"made in {time.perf_counter() - start:.1f} s; torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    step = torch.compile(model, mode="reduce-overhead") if args.compile else model

    for batch in [int(b) for b in args.batch.split(",")]:
        ids = torch.randint(2, config.vocab_size, (batch, args.context), device="cuda")
        try:
            with torch.no_grad():
                torch.cuda.synchronize()
                start = time.perf_counter()
                out = model(input_ids=ids, use_cache=True)
                torch.cuda.synchronize()
                prefill = time.perf_counter() - start
                cache = out.past_key_values
                token = out.logits[:, -1].argmax(-1, keepdim=True)
                times = []
                for _ in range(args.steps + 1):  # the first is a warm-up
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    out = step(input_ids=token, past_key_values=cache, use_cache=True)
                    token = out.logits[:, -1].argmax(-1, keepdim=True)
                    torch.cuda.synchronize()
                    times.append((time.perf_counter() - start) * 1e3)
                    cache = out.past_key_values
        except torch.cuda.OutOfMemoryError as error:
            print(f"batch {batch}: out of memory ({str(error).splitlines()[0]})", flush=True)
            torch.cuda.empty_cache()
            continue
        median = statistics.median(times[1:])
        print(f"batch {batch}: context {args.context}, prefill {prefill:.2f} s, "
              f"ms/step median {median:.2f} (steps {' '.join(f'{t:.1f}' for t in times[1:])})", flush=True)
        del out, cache
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
