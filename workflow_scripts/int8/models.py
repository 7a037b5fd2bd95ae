"""The study's seven networks as torchvision defines them, and their weights.

Weights come from, per `inference.models.<name>` in the config:
  pipeline      the training stage's PyTorch checkpoint (weights.pt, a ResNet-50 state_dict)
  torchvision   torchvision's IMAGENET1K_V1 weights (the original models, evaluated at resize 256 /
                crop 224 as images.py does): from torchvision's cache, else downloaded
  <path>        a state_dict file of torchvision's definition (or a checkpoint holding one under
                'state_dict' or 'model'; DDP's 'module.' prefixes are dropped)
  random        (command line only, for tests and benchmarks) seeded random initialisation
A model never silently falls back to other weights: a missing source is an error naming the key.
"""

import hashlib
from pathlib import Path

import torch
import torchvision

from ..common.errors import StageError
from .networks import NETWORKS

# The last layer, whose rows are the classes.
CLASSIFIER = {
    "resnet50": "fc",
    "resnet101": "fc",
    "resnet152": "fc",
    "googlenet": "fc",
    "vgg16": "classifier.6",
    "vgg19": "classifier.6",
    "alexnet": "classifier.6",
}
SOURCES = ("pipeline", "torchvision", "file", "random")
TORCHVISION_WEIGHTS = "IMAGENET1K_V1"


def build(name, classes):
    """torchvision's definition with `classes` outputs, in eval mode. GoogLeNet is built as
    torchvision builds it for its ImageNet weights: no auxiliary heads, inputs re-normalised
    the way its (Inception-style) weights were trained (transform_input)."""
    extra = {"aux_logits": False, "transform_input": True, "init_weights": True} if name == "googlenet" else {}
    return torchvision.models.get_model(name, weights=None, num_classes=classes, **extra).eval()


def _state_dict(obj, where):
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
        if all(isinstance(v, torch.Tensor) for v in obj.values()):
            return {k.removeprefix("module."): v for k, v in obj.items()}
    raise StageError(f"{where} holds no state_dict of tensors")


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def torchvision_state(name, key):
    weights = torchvision.models.get_model_weights(name)[TORCHVISION_WEIGHTS]
    cached = Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name
    try:
        state = weights.get_state_dict(progress=False, check_hash=True)
    except Exception as exc:  # no cache and no network: urllib, http and hash errors alike
        raise StageError(
            f"config {key} = torchvision: torchvision's {TORCHVISION_WEIGHTS} weights for {name} are "
            f"not in its cache ({cached}) and could not be downloaded ({exc.__class__.__name__}: {exc}). "
            f"Put the file there (TORCH_HOME moves the cache), or give {key} a local weights file"
        )
    return state, {"file": str(cached), "sha256": _sha256(cached), "weights": f"{name}:{TORCHVISION_WEIGHTS}"}


def load(name, source, path="", classes=0, seed=0, key=None):
    """(model in eval mode, provenance dict) of network `name` with weights from `source`."""
    key = key or f"inference.models.{name}"
    if name not in NETWORKS:
        raise StageError(f"config {key}: {name!r} is none of the study's networks ({', '.join(NETWORKS)})")
    if source == "random":
        torch.manual_seed(seed)
        return build(name, classes or 1000), {"source": "random", "seed": seed}
    if source == "torchvision":
        state, info = torchvision_state(name, key)
    elif source in ("pipeline", "file"):
        if not Path(path).is_file():
            what = "the training stage's weights" if source == "pipeline" else "the weights file"
            raise StageError(f"config {key}: {what} {path} do not exist")
        try:
            raw = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise StageError(f"config {key}: {path} is not a PyTorch weights file ({exc})")
        state, info = (
            _state_dict(raw, f"config {key}: {path}"),
            {"file": str(Path(path).resolve()), "sha256": _sha256(path)},
        )
    else:
        raise ValueError(source)
    if name == "googlenet":  # the auxiliary heads only train; torchvision drops them too
        state = {k: v for k, v in state.items() if not k.startswith(("aux1.", "aux2."))}
    weight = state.get(f"{CLASSIFIER[name]}.weight")
    if weight is None:
        raise StageError(f"config {key}: the weights have no {CLASSIFIER[name]}.weight: not torchvision's {name}")
    model = build(name, weight.shape[0])
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise StageError(f"config {key}: the weights do not fit torchvision's {name}: {str(exc).splitlines()[0]}")
    return model, {"source": source, **info}


def classes_of(model, name):
    return dict(model.named_modules())[CLASSIFIER[name]].out_features
