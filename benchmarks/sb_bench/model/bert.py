"""pytorch-bert-{base,large}: BERT of the published sizes, built from its configuration.

transformers' ``BertModel`` (30,522-token vocabulary, 512 positions, GELU,
dropout 0.1) with a linear classifier on the pooled output; random token ids
and labels; AdamW by default. BERT also runs in fp8 (``fp8_hybrid``,
``fp8_e4m3``) through Transformer Engine on GPUs that have FP8 tensor cores.
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
from sb_bench.model.catalog import BERT_SIZES

VOCAB = 30522
POSITIONS = 512


class BertBenchmark(ModelBenchmark):
    size: ClassVar[tuple[int, int, int]] = (0, 0, 0)
    reports_tflops = True
    supported_precisions = ("fp32", "fp16", "bf16", "fp8_hybrid", "fp8_e4m3")

    @classmethod
    def validate(cls, args: dict[str, Any]) -> None:
        if not 1 <= args["seq_len"] <= POSITIONS:
            raise ValueError(f"parameter seq_len: must be 1..{POSITIONS} (BERT's positions)")
        if args["num_classes"] < 2:
            raise ValueError("parameter num_classes: must be >= 2")

    def build_model(self) -> Any:
        import torch
        from transformers import BertConfig, BertModel

        hidden, layers, heads = self.size
        cfg = BertConfig(
            vocab_size=VOCAB,
            max_position_embeddings=POSITIONS,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=4 * hidden,
        )
        classes = self.args["num_classes"]

        class BertClassifier(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.backbone = BertModel(cfg)
                self.head = torch.nn.Linear(hidden, classes)

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                return self.head(self.backbone(input_ids=ids).pooler_output)

        return BertClassifier()

    def make_samples(self, n: int, gen: Any) -> tuple:
        import torch

        ids = torch.randint(0, VOCAB, (n, self.args["seq_len"]), generator=gen)
        labels = torch.randint(0, self.args["num_classes"], (n,), generator=gen)
        return ids, labels

    def forward_flops(self, model: Any) -> float:
        inner = getattr(model, "module", model)
        hidden, layers, _ = self.size
        once = matmul_weights(inner.backbone.pooler) if inner.backbone.pooler is not None else 0
        return transformer_forward_flops(
            seq_len=self.args["seq_len"],
            layers=layers,
            hidden=hidden,
            per_token_weights=matmul_weights(inner.backbone.encoder),
            per_sample_weights=once + matmul_weights(inner.head),
        )


def _bert_class(name: str) -> type[BertBenchmark]:
    cls = transformer_class(
        BertBenchmark,
        name,
        BERT_SIZES[name],
        f"PytorchBert_{name.split('-')[1]}",
        "the pooled output",
        __name__,
    )
    return register(cls)


CLASSES = {f"pytorch-{n}": _bert_class(n) for n in BERT_SIZES}


if __name__ == "__main__":
    import sys

    sys.exit(family_main("pytorch-bert-base"))
