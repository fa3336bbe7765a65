"""bf16 autocast against float32 on this CPU: one training step and one forward of a causal LM, one thread.

Why: configs/real.yaml trained in bf16 autocast (`training.mixed_precision: bf16`, float32 master weights) because on a
CPU with AVX512-BF16 it steps 2.5x as fast; on a CPU with AVX2 only it steps some 30x slower (one optimizer step of
8 x 64 tokens took 370 s), so it now takes `auto`: float32 on CPUs (docs/benchmarks.md, "bf16 on a CPU without it").

    python bench/bf16_cpu.py [--model results/real/results/pretrained/smollm2]   (after `make real`)
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="results/real/results/pretrained/smollm2", help="a hub-style model folder")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, fused=True)
    vocab = model.config.vocab_size
    batch = torch.randint(0, vocab, (8, 64))
    for precision in ("fp32", "bf16"):
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            times.append(time.perf_counter() - start)
        best = min(times[1:])  # the first step warms the kernels
        print(f"train {precision}: {best:.2f} s a step of 8 x 64 tokens, {512 / best:.0f} tokens/s", flush=True)
    forward = torch.randint(0, vocab, (16, 64))
    with torch.no_grad():
        for precision in ("fp32", "bf16"):
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                for _ in range(3):
                    model(input_ids=forward)
            print(f"forward {precision}: {3 * forward.numel() / (time.perf_counter() - start):.0f} tokens/s")


if __name__ == "__main__":
    main()
