"""pytorch-gpt2-{small,medium,large,xl}: GPT-2 of the published sizes, built from its configuration.

transformers' ``GPT2Model`` (50,257-token vocabulary, 1,024 positions, GELU,
dropout 0.1) with a linear classifier on the last token's hidden state, as
SuperBench benchmarks it; random token ids and labels; AdamW by default.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sb_bench.core.registry import register
from sb_bench.model.base import (
    ModelBenchmark,
    family_main,
    matmul_weights,
    transformer_class,
    transformer_forward_flops,
)
from sb_bench.model.catalog import GPT2_SIZES

VOCAB = 50257
POSITIONS = 1024


class GPT2Benchmark(ModelBenchmark):
    size: ClassVar[tuple[int, int, int]] = (0, 0, 0)
    reports_tflops = True

    @classmethod
    def validate(cls, args: dict[str, Any]) -> None:
        if not 1 <= args["seq_len"] <= POSITIONS:
            raise ValueError(f"parameter seq_len: must be 1..{POSITIONS} (GPT-2's positions)")
        if args["num_classes"] < 2:
            raise ValueError("parameter num_classes: must be >= 2")

    def build_model(self) -> Any:
        import torch
        from transformers import GPT2Config, GPT2Model

        hidden, layers, heads = self.size
        cfg = GPT2Config(
            vocab_size=VOCAB,
            n_positions=POSITIONS,
            n_embd=hidden,
            n_layer=layers,
            n_head=heads,
            use_cache=False,
        )

        class GPT2Classifier(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.backbone = GPT2Model(cfg)
                self.head = torch.nn.Linear(hidden, self_num_classes)

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                hidden_states = self.backbone(input_ids=ids).last_hidden_state
                return self.head(hidden_states[:, -1])

        self_num_classes = self.args["num_classes"]
        return GPT2Classifier()

    def make_samples(self, n: int, gen: Any) -> tuple:
        import torch

        ids = torch.randint(0, VOCAB, (n, self.args["seq_len"]), generator=gen)
        labels = torch.randint(0, self.args["num_classes"], (n,), generator=gen)
        return ids, labels

    def forward_flops(self, model: Any) -> float:
        inner = getattr(model, "module", model)
        hidden, layers, _ = self.size
        return transformer_forward_flops(
            seq_len=self.args["seq_len"],
            layers=layers,
            hidden=hidden,
            per_token_weights=matmul_weights(inner.backbone.h),
            per_sample_weights=matmul_weights(inner.head),
        )


def _gpt2_class(name: str) -> type[GPT2Benchmark]:
    cls = transformer_class(
        GPT2Benchmark, name, GPT2_SIZES[name], f"PytorchGPT2_{name.split('-')[1]}", "the last token", __name__
    )
    return register(cls)


CLASSES = {f"pytorch-{n}": _gpt2_class(n) for n in GPT2_SIZES}


if __name__ == "__main__":
    import sys

    sys.exit(family_main("pytorch-gpt2-small"))
