#!/usr/bin/env python3
# Checks a safetensors file written by bellows (tests/unit/ckpt/safetensors_test.cpp) with the Python library:
# it must load with safetensors.torch.load_file and hold exactly gen_safetensors.tensors() and METADATA.
#
#   python tests/golden/check_safetensors.py FILE      # exit 0: identical; 1: a difference, printed
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_safetensors import METADATA, tensors  # noqa: E402


def same(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # compare the bytes; fp8 has few ops
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    return torch.equal(a, b)


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: check_safetensors.py FILE")
    path = sys.argv[1]
    errors = []
    got = load_file(path)
    want = tensors()
    if sorted(got) != sorted(want):
        errors.append(f"names: got {sorted(got)}, want {sorted(want)}")
    for name in sorted(set(got) & set(want)):
        if not same(got[name], want[name]):
            errors.append(f"{name}: got {got[name].dtype} {tuple(got[name].shape)} {got[name]}, "
                          f"want {want[name].dtype} {tuple(want[name].shape)} {want[name]}")
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    if metadata != METADATA:
        errors.append(f"metadata: got {metadata!r}, want {METADATA!r}")
    for e in errors:
        print(f"{path}: {e}", file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
