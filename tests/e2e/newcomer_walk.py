"""The newcomer walk of issue 44, as a script: a PyTorch engineer's first hour with bellows, from the README and
the docs alone. Their own scripted 1-D CNN on 3-channel waveforms, then torchvision's ResNet-18 and timm's
MobileNetV3 (where those packages are installed; scripts/setup.sh installs them where pip can), and the mistakes
they made on the way. Every step must end either in success or in a named error: the expected exit code, a
"---> HINT:" line, the expected words, and never "internal error".

    newcomer_walk.py --bellows BUILD/bin/bellows --work DIR [-v]

Prints a table of the steps (what was run, what came out). Exit status: 0 every step ended as expected,
1 a step did not.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from torch import nn


class WaveCnn(nn.Module):
    """The user's model: Conv1d, BatchNorm, Dropout, forward(signal)."""

    def __init__(self, channels: int = 3, classes: int = 4):
        super().__init__()
        self.conv1 = nn.Conv1d(channels, 16, 5, padding=2)
        self.bn1 = nn.BatchNorm1d(16)
        self.conv2 = nn.Conv1d(16, 32, 5, padding=2)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(32, classes)

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(signal)))
        h = self.drop(torch.relu(self.conv2(h)))
        return self.head(h.mean(-1))


def write_files(work):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    project = os.path.join(work, "project")  # the config beside its data and model; the walk runs from `work`
    torch.jit.script(WaveCnn()).save(os.path.join(project, "models", "wave_cnn.pt"))
    x = rng.standard_normal((256, 3, 64)).astype(np.float32)
    y = rng.integers(0, 4, 256).astype(np.int64)
    np.savez(os.path.join(project, "data", "waves.npz"), x=x, y=y)
    np.savez(os.path.join(project, "data", "waves_val.npz"), x=x[:64], y=y[:64])
    np.savez(os.path.join(project, "data", "waves_5ch.npz"), x=rng.standard_normal((64, 5, 64)).astype(np.float32), y=y[:64])
    np.save(os.path.join(project, "data", "inputs_5ch.npy"), rng.standard_normal((16, 5, 64)).astype(np.float32))
    images = rng.standard_normal((64, 3, 32, 32)).astype(np.float32)
    np.savez(os.path.join(project, "data", "images.npz"), x=images, y=rng.integers(0, 4, 64).astype(np.int64))
    # The config's paths are relative to it, the command line's to the working directory (docs/training.md).
    with open(os.path.join(project, "wave.yaml"), "w") as f:
        f.write("name: wave\n"
                "model:\n  name: torchscript\n  path: models/wave_cnn.pt\n  inputs: [signal=x]\n  task: classification\n"
                "data:\n  source: npy\n  path: data/waves.npz\n  val_path: data/waves_val.npz\n  batch_size: 32\n"
                "train:\n  max_steps: 12\n  eval_every_n_steps: 6\n"
                "threads: 1\n")
    with open(os.path.join(project, "images.yaml"), "w") as f:
        f.write("model:\n  name: torchscript\n  task: classification\n"
                "data:\n  source: npy\n  path: data/images.npz\n  batch_size: 16\n"
                "threads: 1\n")
    try:
        import torchvision  # noqa: F401
        import timm  # noqa: F401
    except ImportError:
        return False
    import timm
    import torchvision
    torch.jit.script(torchvision.models.resnet18(num_classes=4)).save(os.path.join(project, "models", "resnet18.pt"))
    torch.jit.script(timm.create_model("mobilenetv3_small_050", num_classes=4, pretrained=False)).save(
        os.path.join(project, "models", "mobilenetv3.pt"))
    return True


# (name, arguments, expected exit code, words the output must hold). Exit 0: success; else a named error.
def steps(out):
    wave = "project/wave.yaml output_dir=" + out
    images = "project/images.yaml train.max_steps=2 output_dir=" + out
    return [
        ("help shows how to call it", "train --help", 0, ["[CONFIG.yaml] [key=value ...]", "torchscript", "config keys"]),
        ("own 1-D CNN trains; the config's paths relative to the config", "train " + wave + " name=first", 0,
         ["run finished", "optimizer steps", "12"]),
        ("max_steps without epochs trains to max_steps", "train " + wave + " name=long train.max_steps=20", 0,
         ["train.max_steps 20 ends the run", "optimizer steps"]),
        ("the FLOPs of a Conv1d model are counted", "train " + wave + " name=flops train.max_steps=3", 0, ["model FLOPs"]),
        ("resuming the finished run says it is complete", "train " + wave + " name=first resume=auto", 0,
         ["already complete", "final train loss"]),
        ("validation data of 5 channels: named before training", "train " + wave + " name=val5 data.val_path=project/data/waves_5ch.npz", 3,
         ["the validation data", "does not fit the model", "5, 64]", "model source"]),
        ("prediction inputs of 5 channels: named", "predict " + os.path.join(out, "first") + " --input project/data/inputs_5ch.npy --output p.npy", 3,
         ["does not fit the model", "[16, 5, 64]"]),
        ("class labels under the default task (regression)", "train " + wave + " name=reg model.task=regression", 2,
         ["model.task is regression", "set model.task: classification"]),
        ("an empty override clears an optional key", "train " + wave + " name=noval data.val_path= train.max_steps=2", 0, ["run finished"]),
        ("another tool's key name gets a suggestion", "train " + wave + " optim.learning_rate=0.01", 2, ["did you mean 'optim.lr'"]),
        ("another tool's key name gets a suggestion", "train " + wave + " max_epochs=3", 2, ["did you mean 'train.epochs'"]),
        ("the demo with another model", "train model.name=transformer train.max_steps=2 threads=1 output_dir=" + out, 0, ["run finished"]),
        ("torchvision's ResNet-18, scripted", "train " + images + " model.path=project/models/resnet18.pt name=tv", 0, ["run finished"]),
        ("timm's MobileNetV3, scripted", "train " + images + " model.path=project/models/mobilenetv3.pt name=timm", 0, ["run finished"]),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bellows", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("-v", action="store_true", help="print each step's output")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    for d in ("models", "data"):
        os.makedirs(os.path.join(a.work, "project", d))
    have_vision = write_files(a.work)
    out = os.path.join(a.work, "runs")
    failures = 0
    for name, args, code, words in steps(out):
        if not have_vision and ("resnet18" in args or "mobilenetv3" in args):
            print(f"skip  {name}: torchvision and timm are not installed (pip install torchvision timm)")
            continue
        r = subprocess.run([a.bellows] + args.split(" "), cwd=a.work, capture_output=True, text=True, timeout=600)
        text = r.stdout + r.stderr
        problems = []
        if r.returncode != code:
            problems.append(f"exit {r.returncode}, expected {code}")
        if code != 0 and "---> HINT:" not in text:
            problems.append("no hint")
        if "internal error" in text:
            problems.append("an internal error")
        problems += [f"no '{w}'" for w in words if w not in text]
        first_error = next((line for line in text.splitlines() if line.startswith("bellows:")), "")
        print(f"{'ok  ' if not problems else 'FAIL'}  {name}: bellows {args.replace(a.work + '/', '')} -> exit {r.returncode}"
              + (f": {first_error[:160]}" if first_error else ""))
        if problems or a.v:
            print("      " + "; ".join(problems) + "\n" + "\n".join("      | " + line for line in text.splitlines()[-25:]))
        failures += bool(problems)
    print(f"{failures} step(s) did not end as expected" if failures else "every step ended in success or a named error")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
