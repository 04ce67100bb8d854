"""pytorch-lstm: a stacked ``torch.nn.LSTM`` sequence classifier of SuperBench's size.

Input: random feature sequences (``seq_len x input_size``); an LSTM of
``num_layers`` layers and ``hidden_size`` units (optionally bidirectional),
then a linear classifier on the last time step; SGD with momentum by default.
"""

from __future__ import annotations

import sys
from typing import Any

from sb_bench.core.metric import Param
from sb_bench.core.registry import register
from sb_bench.model.base import ModelBenchmark, model_params


@register
class PytorchLSTM(ModelBenchmark):
    name = "pytorch-lstm"
    description = "stacked LSTM sequence classifier: training/inference on synthetic sequences"
    gpu_batch = 256
    params = {
        **model_params(optimizer="sgd", lr=0.01),
        "seq_len": Param("int", 512, "time steps per sample"),
        "input_size": Param("int", 256, "features per time step"),
        "hidden_size": Param("int", 1024, "units per LSTM layer"),
        "num_layers": Param("int", 8, "stacked LSTM layers"),
        "bidirectional": Param("bool", False, "run each layer in both directions"),
        "num_classes": Param("int", 100, "classes of the classifier"),
    }

    @classmethod
    def validate(cls, args: dict[str, Any]) -> None:
        for k in ("seq_len", "input_size", "hidden_size", "num_layers"):
            if args[k] < 1:
                raise ValueError(f"parameter {k}: must be >= 1")
        if args["num_classes"] < 2:
            raise ValueError("parameter num_classes: must be >= 2")

    def build_model(self) -> Any:
        import torch

        a = self.args
        directions = 2 if a["bidirectional"] else 1

        class LSTMClassifier(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm = torch.nn.LSTM(
                    a["input_size"],
                    a["hidden_size"],
                    a["num_layers"],
                    batch_first=True,
                    bidirectional=a["bidirectional"],
                )
                self.head = torch.nn.Linear(a["hidden_size"] * directions, a["num_classes"])

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                out, _ = self.lstm(x)
                return self.head(out[:, -1])

        return LSTMClassifier()

    def make_samples(self, n: int, gen: Any) -> tuple:
        import torch

        a = self.args
        x = torch.randn(n, a["seq_len"], a["input_size"], generator=gen)
        labels = torch.randint(0, a["num_classes"], (n,), generator=gen)
        return x, labels


if __name__ == "__main__":
    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(PytorchLSTM.name))
