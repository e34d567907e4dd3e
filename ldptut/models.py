"""Models used by the chapters.

All models are plain ``nn.Module`` without dropout or batch statistics by default, so that local
training can be vectorised over clients with ``torch.func`` (no buffers updated in place, no
randomness inside the forward pass).

| name | use | parameters (MNIST 1x28x28, 10 classes) |
|---|---|---|
| ``logreg`` | Wu et al. 2023 | 7,850 |
| ``mlp`` | Foundations, PD-LDPFL (784-600-100-10, no bias) | 159,010 for hidden=(200,) |
| ``cnn2`` | LDP-FL "two-layer CNN" (ours: Keras ``mnist_cnn``, conv32-conv64 3x3, one max-pool, FC128) | 1,199,882 |
| ``cnn_pool`` | CorBin-FL's ``CNNMNIST``: conv32 and conv64 (3x3, padding 1) each with max-pool, FC128 | 421,642 |
| ``small_vgg`` | LDP-FL CIFAR-10 "small VGG" (ours: 3 blocks of two 3x3 convs 32-64-128, FC128) | - |
| ``resnet18`` | torchvision ResNet18 adapted to 32x32 (3x3 stem, no max-pool), GroupNorm by default | - |
| ``resnet18_bn`` | the same with the original BatchNorm (CorBin-FL's CIFAR-10 model; sequential path only, its running statistics averaged in clear) | - |
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import nn

from .rng import derive_seed

__all__ = ["LogisticRegression", "MLP", "CNN2", "CNNPool", "SmallVGG", "resnet18_cifar", "build_model", "MODELS",
           "count_parameters"]


def _flat_dim(input_shape: Sequence[int]) -> int:
    return int(math.prod(input_shape))


class LogisticRegression(nn.Module):
    """Multinomial logistic regression: logits = W flatten(x) + b."""

    def __init__(self, *, input_shape: Sequence[int], num_classes: int, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(_flat_dim(input_shape), num_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1))


class MLP(nn.Module):
    """Fully connected network flatten(x) -> hidden... -> num_classes, ReLU (or ``activation``) between layers."""

    def __init__(self, *, input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (200,),
                 bias: bool = True, activation: str = "relu"):
        super().__init__()
        acts = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}
        if activation not in acts:
            raise ValueError(f"activation must be one of {sorted(acts)}, got {activation!r}")
        dims = [_flat_dim(input_shape), *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b, bias=bias), acts[activation]()]
        layers.append(nn.Linear(dims[-1], num_classes, bias=bias))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CNN2(nn.Module):
    """Two-convolution CNN: conv(c1,3x3)-ReLU-conv(c2,3x3)-ReLU-maxpool2-FC(hidden)-ReLU-FC(classes).

    The Keras ``mnist_cnn`` layout (conv32-conv64-FC128) without its dropout. (CorBin-FL's code pools after
    each convolution: :class:`CNNPool`.) LDP-FL (Sun et al. 2021) says only "two-layer CNN"; the chapters state that this is our choice.
    """

    def __init__(self, *, input_shape: Sequence[int], num_classes: int, channels: Sequence[int] = (32, 64),
                 hidden: int = 128):
        super().__init__()
        c, h, w = input_shape
        c1, c2 = channels
        self.features, flat = self._features(c, h, w, c1, c2)
        self.classifier = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    @staticmethod
    def _features(c: int, h: int, w: int, c1: int, c2: int) -> tuple[nn.Module, int]:
        """The convolutional part and the size of its flattened output."""
        layers = nn.Sequential(nn.Conv2d(c, c1, 3), nn.ReLU(), nn.Conv2d(c1, c2, 3), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Flatten())
        return layers, c2 * ((h - 4) // 2) * ((w - 4) // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class CNNPool(CNN2):
    """conv(c1,3x3,pad 1)-ReLU-maxpool2-conv(c2,3x3,pad 1)-ReLU-maxpool2-FC(hidden)-ReLU-FC(classes).

    CorBin-FL's MNIST model (the authors' ``CNNMNIST``: "conv32-conv64-FC128"), without the Dropout(0.5)
    before its last layer (our models keep the forward pass deterministic so it vectorises over clients).
    """

    @staticmethod
    def _features(c: int, h: int, w: int, c1: int, c2: int) -> tuple[nn.Module, int]:
        layers = nn.Sequential(nn.Conv2d(c, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        return layers, c2 * (h // 4) * (w // 4)


class FedAvgCNN(CNN2):
    """McMahan et al.'s "CNN" (AISTATS 2017, Section 3): conv(32, 5x5)-ReLU-maxpool2-conv(64, 5x5)-ReLU-maxpool2-
    FC(512)-ReLU-FC(classes); 1,663,370 weights on MNIST. The standard FL CNN, and a second reading of LDP-FL's
    "two-layer CNN" (two convolutions, like :class:`CNN2`). McMahan et al. do not say the padding; we pad by 2
    ("same"), as TensorFlow Federated's version of the model does.
    """

    def __init__(self, *, input_shape: Sequence[int], num_classes: int):
        super().__init__(input_shape=input_shape, num_classes=num_classes, channels=(32, 64), hidden=512)

    @staticmethod
    def _features(c: int, h: int, w: int, c1: int, c2: int) -> tuple[nn.Module, int]:
        layers = nn.Sequential(nn.Conv2d(c, c1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(c1, c2, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        return layers, c2 * (h // 4) * (w // 4)


class SmallVGG(nn.Module):
    """A small VGG for 32x32 inputs: blocks of two 3x3 convs (channels per block), max-pool after each.

    LDP-FL trains a "small VGG" on CIFAR-10 without giving it; this one (32-64-128, FC128) is ours.
    """

    def __init__(self, *, input_shape: Sequence[int], num_classes: int, channels: Sequence[int] = (32, 64, 128),
                 hidden: int = 128):
        super().__init__()
        c, h, w = input_shape
        layers: list[nn.Module] = []
        for out in channels:
            layers += [nn.Conv2d(c, out, 3, padding=1), nn.ReLU(), nn.Conv2d(out, out, 3, padding=1), nn.ReLU(),
                       nn.MaxPool2d(2)]
            c, h, w = out, h // 2, w // 2
        self.features = nn.Sequential(*layers, nn.Flatten())
        self.classifier = nn.Sequential(nn.Linear(c * h * w, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def resnet18_cifar(*, input_shape: Sequence[int] = (3, 32, 32), num_classes: int = 10,
                   norm: str = "group") -> nn.Module:
    """torchvision's ResNet18 adapted to 32x32 inputs: 3x3 stride-1 stem, no max-pool.

    ``norm="group"`` (GroupNorm with 2 groups, no running statistics) keeps the model vectorisable
    over clients; ``norm="batch"`` gives the original BatchNorm (sequential training path only).
    """
    from torchvision.models import resnet18

    if norm == "group":
        norm_layer: Callable[[int], nn.Module] = lambda ch: nn.GroupNorm(2, ch)
    elif norm == "batch":
        norm_layer = nn.BatchNorm2d
    else:
        raise ValueError(f"norm must be 'group' or 'batch', got {norm!r}")
    m = resnet18(num_classes=num_classes, norm_layer=norm_layer)
    m.conv1 = nn.Conv2d(input_shape[0], 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


MODELS: dict[str, Callable[..., nn.Module]] = {
    "logreg": LogisticRegression,
    "mlp": MLP,
    # PD-LDPFL's base model (the authors' code; the paper says only "two hidden layers"): 531,400 weights
    "mlp_600_100_nobias": lambda **kw: MLP(hidden=(600, 100), bias=False, **kw),
    "cnn2": CNN2,
    "cnn_pool": CNNPool,
    "cnn_fedavg": FedAvgCNN,
    # CNNPool with 8 and 16 channels and 32 hidden units (26,698 weights on MNIST): the comparison chapter's small CNN
    "cnn_small": lambda **kw: CNNPool(channels=(8, 16), hidden=32, **kw),  # McMahan et al. 2017's CNN (LDP-FL's "two-layer CNN", a second reading)
    "small_vgg": SmallVGG,
    "resnet18": resnet18_cifar,
    "resnet18_bn": lambda **kw: resnet18_cifar(norm="batch", **kw),
}


def build_model(name: str, *, input_shape: Sequence[int], num_classes: int, seed: int = 0,
                device: str | torch.device = "cpu", **kwargs) -> nn.Module:
    """Build model ``name`` with weights initialised from ``seed`` (independent of the global RNG state)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known models: {sorted(MODELS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "model-init"))
        model = MODELS[name](input_shape=tuple(input_shape), num_classes=num_classes, **kwargs)
    return model.to(device)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars d (the unit of per-model epsilon composition)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
