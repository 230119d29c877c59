"""Loads a bellows checkpoint's model.safetensors into the equivalent PyTorch module by name and checks
that it computes what bellows computed.

    check_pytorch_mlp.py MODEL.safetensors SPEC.json INPUTS.npy OUTPUTS.npy

SPEC.json: {"in_features": 8, "hidden": [16, 16], "out_features": 3, "norm": "layer"|"none"}.
load_state_dict(strict=True) fails on any missing or unexpected name; the outputs must agree within 1e-5.
"""
import json
import sys

import numpy as np
import torch
from safetensors.torch import load_file


class Mlp(torch.nn.Module):
    """bellows' MLP (include/bellows/models/mlp.h): Linear, [LayerNorm], GELU per hidden width, then Linear."""

    def __init__(self, in_features, hidden, out_features, norm):
        super().__init__()
        layers, width = [], in_features
        for h in hidden:
            layers.append(torch.nn.Linear(width, h))
            if norm == "layer":
                layers.append(torch.nn.LayerNorm(h))
            layers.append(torch.nn.GELU())
            width = h
        layers.append(torch.nn.Linear(width, out_features))
        self.layers = torch.nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def main():
    weights, spec_path, inputs, outputs = sys.argv[1:5]
    spec = json.load(open(spec_path))
    model = Mlp(spec["in_features"], spec["hidden"], spec["out_features"], spec["norm"])
    state = load_file(weights)
    model.load_state_dict(state, strict=True)
    model.eval()
    with torch.no_grad():
        got = model(torch.from_numpy(np.load(inputs))).numpy()
    want = np.load(outputs)
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-6):
        print(f"PyTorch output differs from bellows': max abs difference {np.abs(got - want).max()}")
        return 1
    print(f"loaded {len(state)} tensors by name; outputs agree (max abs difference {np.abs(got - want).max():.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
