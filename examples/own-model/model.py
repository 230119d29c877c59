"""examples/own-model: a model written in plain PyTorch, trained by bellows, evaluated back in PyTorch.

    model.py prepare DIR [--quick]      writes DIR/model.pt (TorchScript), DIR/train.npz and DIR/val.npz
    model.py evaluate DIR WEIGHTS [PRED.npy]
                                         loads bellows' trained weights (model.safetensors) into the Python class
                                         with load_state_dict(strict=True) and prints the validation accuracy; with
                                         PRED.npy (`bellows predict` on val.npz), the largest difference between
                                         bellows' class probabilities and PyTorch's

The model takes two inputs, an image and a scalar feature, and has BatchNorm and dropout: the parts that make
train() and eval() differ. The label depends on both inputs (the quadrant of a bright square, shifted by two
classes when the feature is positive), so a model that ignores either input stays near 50% accuracy.
"""
import argparse
import json
import os

import numpy as np
import torch
from torch import nn


class TwoInputNet(nn.Module):
    def __init__(self, classes: int = 4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        )
        self.scalar = nn.Linear(1, 16)
        self.head = nn.Sequential(nn.Linear(32 * 4 + 16, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, image: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        a = self.features(image).flatten(1)
        b = torch.relu(self.scalar(feature))
        return self.head(torch.cat([a, b], dim=1))


def make_data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    images = rng.normal(0.0, 0.3, size=(n, 1, 16, 16)).astype(np.float32)
    quadrant = rng.integers(0, 4, size=n)
    for i, q in enumerate(quadrant):
        r, c = (q // 2) * 8 + rng.integers(1, 4), (q % 2) * 8 + rng.integers(1, 4)
        images[i, 0, r:r + 4, c:c + 4] += 1.5
    feature = rng.normal(size=(n, 1)).astype(np.float32)
    labels = (quadrant + 2 * (feature[:, 0] > 0)) % 4
    return images, feature, labels.astype(np.int64)


def prepare(out: str, quick: bool):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    scripted = torch.jit.script(TwoInputNet())
    scripted.save(os.path.join(out, "model.pt"))
    n_train, n_val = (768, 256) if quick else (8192, 1024)
    for name, n, seed in (("train", n_train, 1), ("val", n_val, 2)):
        x, feature, y = make_data(n, seed)
        np.savez(os.path.join(out, f"{name}.npz"), x=x, feature=feature, y=y)
    print(f"own-model: wrote {out}/model.pt (torch.jit.script), train.npz ({n_train}), val.npz ({n_val})")


def evaluate(out: str, weights: str, predictions: str):
    from safetensors.torch import load_file
    model = TwoInputNet()
    state = load_file(weights)
    model.load_state_dict(state, strict=True)  # bellows keeps the Python names
    model.eval()
    val = np.load(os.path.join(out, "val.npz"))
    with torch.no_grad():
        logits = model(torch.from_numpy(val["x"]), torch.from_numpy(val["feature"]))
    accuracy = (logits.argmax(1).numpy() == val["y"]).mean()
    result = {"tensors": len(state), "accuracy": float(accuracy)}
    if predictions:
        result["predict_max_abs_diff"] = float(np.abs(np.load(predictions) - logits.softmax(1).numpy()).max())
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("prepare")
    a.add_argument("dir")
    a.add_argument("--quick", action="store_true")
    b = sub.add_parser("evaluate")
    b.add_argument("dir")
    b.add_argument("weights")
    b.add_argument("predictions", nargs="?", default="")
    args = p.parse_args()
    if args.command == "prepare":
        prepare(args.dir, args.quick)
    else:
        evaluate(args.dir, args.weights, args.predictions)


if __name__ == "__main__":
    main()
