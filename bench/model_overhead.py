"""How much the model-benchmark harness adds to a training step.

resnet18 (torchvision, fp32, CPU) trained with SGD: the step time the
``pytorch-resnet18`` benchmark reports, against a training loop written by
hand in the same process with the same model, optimizer, loss and batch.
Rounds alternate between the two so drifting machine load hits both alike;
the ratio is of the fastest rounds (least disturbed by
other load), and of the medians. Target: within 5% (ratio <= 1.05).

    .venv/bin/python bench/model_overhead.py [--batch 2] [--image 112] [--steps 10] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import torch  # noqa: E402
import torchvision  # noqa: E402
from sb_bench.core.harness import run_benchmark  # noqa: E402


def bare_loop(batch: int, image: int, warmup: int, steps: int) -> float:
    """Mean ms per training step of a plain loop."""
    torch.manual_seed(1234)
    model = torchvision.models.resnet18(weights=None, num_classes=1000)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(5678)
    x = torch.randn(batch, 3, image, image, generator=gen)
    y = torch.randint(0, 1000, (batch,), generator=gen)

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) * 1000.0 / steps


def through_benchmark(batch: int, image: int, warmup: int, steps: int) -> float:
    env = run_benchmark(
        "pytorch-resnet18",
        {
            "batch_size": batch, "image_size": image, "num_warmup": warmup, "num_steps": steps,
            "check_steps": 1, "sample_count": batch, "num_workers": 0, "precision": ["fp32"],
            "model_action": ["train"], "device": "cpu", "optimizer": "sgd", "lr": 0.01,
        },
    )  # fmt: skip
    if env["status"] != "ok":
        raise SystemExit(f"benchmark failed: {env['reason']}")
    return env["result"]["fp32_train_step_time"][0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--image", type=int, default=112)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    print(f"resnet18 fp32 training on CPU ({torch.get_num_threads()} threads), batch {a.batch}, "
          f"{a.image}x{a.image} images, {a.steps} timed steps per measurement")  # fmt: skip
    bare, bench = [], []
    for r in range(a.rounds):
        bare.append(bare_loop(a.batch, a.image, a.warmup, a.steps))
        bench.append(through_benchmark(a.batch, a.image, a.warmup, a.steps))
        print(
            f"round {r + 1}: bare loop {bare[-1]:8.2f} ms/step   benchmark {bench[-1]:8.2f} ms/step",
            flush=True,
        )
    # The fastest round is the one least disturbed by other load on the machine; the median is printed too.
    for label, pick in (("fastest round", min), ("median", statistics.median)):
        b, h = pick(bare), pick(bench)
        ratio = h / b
        verdict = "within" if ratio <= 1.05 else "OUTSIDE"
        print(f"{label}: bare loop {b:.2f} ms/step, through the benchmark {h:.2f} ms/step, "
              f"ratio {ratio:.3f} ({verdict} the 5% target)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
