"""pytorch-<cnn>: every torchvision CNN of SuperBench's list, trained as an image classifier.

Synthetic images (``3 x image_size x image_size``, normal noise) and random
labels; cross-entropy loss; SGD with momentum by default, as SuperBench
trains its CNNs. GoogLeNet and Inception v3 train with their auxiliary
classifiers, whose losses count 0.3 and 0.4 as in torchvision's recipes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sb_bench.core.metric import Param
from sb_bench.core.registry import register
from sb_bench.model.base import ModelBenchmark, family_main, model_params
from sb_bench.model.catalog import CNN_MODELS

# Published input sizes that differ from 224, and the smallest each network takes.
DEFAULT_IMAGE = {"inception_v3": 299}
MIN_IMAGE = {"inception_v3": 299, "alexnet": 63}
AUX_WEIGHT = {"googlenet": 0.3, "inception_v3": 0.4}
# batch_size 0 on an 80 GiB GPU: 256 as NVIDIA's published ResNet-50 training (DeepLearningExamples);
# the heavier networks half that so fp32 fits.
GPU_BATCH = {
    "resnet152": 128,
    "resnext101_32x8d": 128,
    "wide_resnet101_2": 128,
    "inception_v3": 128,
    "densenet161": 128,
    **{v: 128 for v in ("vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19_bn", "vgg19")},
}


class TorchvisionCNN(ModelBenchmark):
    arch: ClassVar[str] = ""
    reports_tflops = False
    image_input = True

    @classmethod
    def validate(cls, args: dict[str, Any]) -> None:
        low = MIN_IMAGE.get(cls.arch, 32)
        if args["image_size"] < low:
            raise ValueError(f"parameter image_size: {cls.arch} needs images of at least {low} pixels")
        if args["num_classes"] < 2:
            raise ValueError("parameter num_classes: must be >= 2")

    def build_model(self) -> Any:
        import torchvision

        kw: dict[str, Any] = {"weights": None, "num_classes": self.args["num_classes"]}
        if self.arch in AUX_WEIGHT:
            kw.update(aux_logits=True, init_weights=True)
        return torchvision.models.get_model(self.arch, **kw)

    def make_samples(self, n: int, gen: Any) -> tuple:
        import torch

        s = self.args["image_size"]
        images = torch.randn(n, 3, s, s, generator=gen)
        labels = torch.randint(0, self.args["num_classes"], (n,), generator=gen)
        return images, labels

    def loss(self, output: Any, labels: Any) -> Any:
        import torch

        ce = torch.nn.functional.cross_entropy
        if isinstance(output, torch.Tensor):
            return ce(output.float(), labels)
        # Training-mode outputs of networks with auxiliary classifiers (a named tuple).
        main = output[0]
        loss = ce(main.float(), labels)
        for aux in output[1:]:
            if aux is not None:
                loss = loss + AUX_WEIGHT.get(self.arch, 0.3) * ce(aux.float(), labels)
        return loss


def _cnn_class(arch: str) -> type[TorchvisionCNN]:
    params = {
        **model_params(optimizer="sgd", lr=0.01),
        "image_size": Param("int", DEFAULT_IMAGE.get(arch, 224), "image height and width in pixels"),
        "num_classes": Param("int", 1000, "classes of the classifier"),
    }
    attrs = {
        "name": f"pytorch-{arch}",
        "arch": arch,
        "gpu_batch": GPU_BATCH.get(arch, 256),
        "description": f"torchvision {arch}: image-classification training/inference on synthetic images",
        "params": params,
        "__module__": __name__,
        "__qualname__": f"PytorchCNN_{arch}",
    }
    return register(type(f"PytorchCNN_{arch}", (TorchvisionCNN,), attrs))


CLASSES: dict[str, type[TorchvisionCNN]] = {f"pytorch-{a}": _cnn_class(a) for a in CNN_MODELS}


if __name__ == "__main__":
    import sys

    sys.exit(family_main("pytorch-resnet50"))
