"""megatron-gpt: GPT pretraining through NVIDIA Megatron-Core, where it is installed.

Megatron-Core's ``GPTModel`` (local transformer layers, tensor parallelism
``tensor_model_parallel_size``, data parallel over the remaining ranks) is
trained on synthetic token sequences with next-token cross-entropy by the
same harness as the ``pytorch-*`` models: mixed precision, the training
check, per-step timing with CUDA events, the slowest rank's step time.
Metrics per precision: ``<p>_train_step_time`` (ms), ``<p>_train_throughput``
(sequences/s per GPU), ``<p>_train_tflops``, ``<p>_train_mem_allocated`` and
``<p>_train_max_mem_allocated`` (GiB).

Megatron-Core needs CUDA GPUs: on a host without them, or without the
``megatron-core`` package, the benchmark is skipped with the reason.
"""

from __future__ import annotations

import sys
from typing import Any

from sb_bench.core.benchmark import SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Param
from sb_bench.core.registry import register
from sb_bench.model.base import ModelBenchmark, matmul_weights, model_params, transformer_forward_flops


def megatron_unavailable(ctx: RankContext) -> str | None:
    try:
        import megatron.core  # noqa: F401
    except Exception as exc:
        return f"Megatron-Core is not installed here ({type(exc).__name__}: {exc}); pip install megatron-core"
    if not ctx.is_cuda:
        return "Megatron-Core's GPT model needs CUDA GPUs; this rank runs on CPU"
    return None


def single_process_store() -> Any:
    """The rendezvous store of a world of one: in memory (no port, so parallel processes never clash)."""
    import torch.distributed as dist

    return dist.HashStore()


@register
class MegatronGPT(ModelBenchmark):
    name = "megatron-gpt"
    description = (
        "GPT pretraining through Megatron-Core (synthetic tokens); skipped where Megatron-Core is absent"
    )
    reports_tflops = True
    params = {
        **model_params(optimizer="adam", lr=1e-4, batch_size=8),
        "model_action": Param("list[str]", ["train"], "what to measure (Megatron-Core: train)", ("train",)),
        "precision": Param(
            "list[str]",
            ["float16"],
            "precisions to run (float32/fp32, float16/fp16, bfloat16/bf16)",
            ("fp32", "float32", "fp16", "float16", "bf16", "bfloat16"),
        ),
        "seq_len": Param("int", 2048, "tokens per sequence"),
        "hidden_size": Param("int", 2048, "model width"),
        "num_layers": Param("int", 24, "transformer layers"),
        "num_attn_heads": Param("int", 16, "attention heads"),
        "vocab_size": Param("int", 50304, "vocabulary size"),
        "tensor_model_parallel_size": Param("int", 1, "GPUs each layer is split over"),
    }

    @classmethod
    def validate(cls, args: dict[str, Any]) -> None:
        if args["hidden_size"] % args["num_attn_heads"]:
            raise ValueError("parameters hidden_size and num_attn_heads: hidden_size must divide evenly")
        for k in ("seq_len", "num_layers", "vocab_size", "tensor_model_parallel_size"):
            if args[k] < 1:
                raise ValueError(f"parameter {k}: must be >= 1")

    def setup(self, ctx: RankContext) -> None:
        why = megatron_unavailable(ctx)
        if why:
            raise SkipBenchmark(why)
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state, tensor_parallel

        if not dist.is_initialized():
            # Megatron-Core needs a process group even on one GPU. An in-memory store, no TCP port:
            # local mode runs one such process per GPU at once, and a fixed port would let only one
            # of them bind it (EADDRINUSE for the others).
            dist.init_process_group("nccl", store=single_process_store(), rank=0, world_size=1)
            ctx.backend = "nccl"
        tp = self.args["tensor_model_parallel_size"]
        if ctx.world_size % tp:
            raise ValueError(
                f"tensor_model_parallel_size {tp} does not divide the world size {ctx.world_size}"
            )
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=1
        )
        tensor_parallel.model_parallel_cuda_manual_seed(1234)
        self._mp_state = parallel_state
        del torch
        super().setup(ctx)

    def _wrapped(self, ctx: RankContext, model: Any) -> Any:
        # Data parallelism runs over the data-parallel group, not the whole world, when layers are split.
        if not ctx.distributed or self._mp_state.get_data_parallel_world_size() == 1:
            return model
        if id(model) not in self.ddp:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.ddp[id(model)] = DDP(
                model, device_ids=[ctx.device.index], process_group=self._mp_state.get_data_parallel_group()
            )
        return self.ddp[id(model)]

    def _check_replicas(self, ctx: RankContext, model: Any, p: str) -> None:
        # Tensor-parallel ranks hold different shards: the world-wide checksum does not apply.
        if self.args["tensor_model_parallel_size"] == 1:
            super()._check_replicas(ctx, model, p)

    def build_model(self) -> Any:
        import torch
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.transformer.transformer_config import TransformerConfig

        a = self.args
        cfg = TransformerConfig(
            num_layers=a["num_layers"],
            hidden_size=a["hidden_size"],
            num_attention_heads=a["num_attn_heads"],
            use_cpu_initialization=False,
            tensor_model_parallel_size=a["tensor_model_parallel_size"],
            pipeline_dtype=torch.float32,
        )
        seq = a["seq_len"]

        class Pretraining(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.gpt = GPTModel(
                    config=cfg,
                    transformer_layer_spec=get_gpt_layer_local_spec(),
                    vocab_size=a["vocab_size"],
                    max_sequence_length=seq,
                )

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0).expand_as(ids)
                causal = torch.ones(1, 1, seq, seq, dtype=torch.bool, device=ids.device).triu(1)
                return self.gpt(ids, pos, causal)  # logits [batch, seq, vocab / tp]

        return Pretraining()

    def make_samples(self, n: int, gen: Any) -> tuple:
        import torch

        tokens = torch.randint(0, self.args["vocab_size"], (n, self.args["seq_len"] + 1), generator=gen)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def loss(self, output: Any, labels: Any) -> Any:
        from megatron.core import tensor_parallel

        # Vocabulary-parallel cross-entropy: correct whether or not the logits are split over ranks.
        per_token = tensor_parallel.vocab_parallel_cross_entropy(
            output.float().transpose(0, 1).contiguous(), labels.transpose(0, 1).contiguous()
        )
        return per_token.mean()

    def forward_flops(self, model: Any) -> float:
        inner = getattr(model, "module", model)
        a = self.args
        tp = a["tensor_model_parallel_size"]
        blocks = matmul_weights(inner.gpt.decoder) * tp  # this rank's shard of every weight matrix
        return transformer_forward_flops(
            seq_len=a["seq_len"],
            layers=a["num_layers"],
            hidden=a["hidden_size"],
            per_token_weights=blocks + a["vocab_size"] * a["hidden_size"],
            per_sample_weights=0,
        )

    def teardown(self, ctx: RankContext) -> None:
        super().teardown(ctx)
        state = getattr(self, "_mp_state", None)
        if state is not None:
            state.destroy_model_parallel()


if __name__ == "__main__":
    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(MegatronGPT.name))
