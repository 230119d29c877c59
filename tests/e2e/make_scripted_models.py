"""Writes the TorchScript files (and the files that only look like one) of the bad-input catalogue's
model.name: torchscript rows (bad_input_model_rows.cpp), and demo.pt, a model of the embedded demo's table
(64 features -> 1, demo_cli_test.cpp):  make_scripted_models.py DIR"""
import os
import sys

import torch
from torch import nn
from safetensors.torch import save_file


class Mlp(nn.Module):
    def __init__(self, inputs: int = 4, outputs: int = 1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(inputs, 8), nn.ReLU(), nn.Linear(8, outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class DictLoss(Mlp):
    def forward(self, x: torch.Tensor, y: torch.Tensor):  # type: ignore[override]
        d = self.net(x) - y
        return {"loss": d.square().mean(), "mae": d.abs().mean()}


class VectorLoss(Mlp):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return (self.net(x) - y).square()  # per sample: not the batch's mean


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    good = Mlp()
    torch.jit.script(good).save(os.path.join(out, "good.pt"))
    torch.jit.script(Mlp(16)).save(os.path.join(out, "wide.pt"))
    torch.jit.script(Mlp(4, 3)).save(os.path.join(out, "classifier.pt"))
    torch.jit.script(DictLoss()).save(os.path.join(out, "dict_loss.pt"))
    torch.jit.script(VectorLoss()).save(os.path.join(out, "vector_loss.pt"))
    frozen = Mlp()
    for p in frozen.parameters():
        p.requires_grad_(False)
    torch.jit.script(frozen).save(os.path.join(out, "frozen.pt"))
    torch.jit.script(Mlp().double()).save(os.path.join(out, "double.pt"))
    torch.save(good.state_dict(), os.path.join(out, "state_dict.pt"))
    save_file({k: v.contiguous() for k, v in good.state_dict().items()}, os.path.join(out, "weights.safetensors"))
    save_file({"encoder.weight": torch.zeros(8, 4)}, os.path.join(out, "other_names.safetensors"))
    torch.jit.script(Mlp(64)).save(os.path.join(out, "demo.pt"))  # last: the others' weights stay as they were
    with open(os.path.join(out, "good.pt"), "rb") as f:
        data = f.read()
    with open(os.path.join(out, "truncated.pt"), "wb") as f:
        f.write(data[: len(data) // 2])


if __name__ == "__main__":
    main()
