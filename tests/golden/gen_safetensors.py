#!/usr/bin/env python3
# safetensors files written by the Python library itself (safetensors.torch.save_file), for
# tests/unit/ckpt/safetensors_test.cpp: one tensor of every dtype bellows reads, a 0-dim and an empty tensor,
# and metadata with characters JSON must escape. The C++ test checks the values and that bellows' writer
# produces the same bytes; check_safetensors.py, the other direction, imports tensors() and METADATA from here.
#
#   ~/.cache/bellows/torch-2.13.0/bin/python tests/golden/gen_safetensors.py   # rewrites tests/golden/safetensors/
#
# Values are simple functions of the index (arange), exactly representable in every dtype, so the C++ test
# states them without reading a sidecar.
import json
import os
import struct

import safetensors
import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors")

# Keys deliberately out of order; values with a quote, a backslash, a newline, a tab, a control character,
# a slash and non-ASCII text (serde_json and nlohmann-json must escape them alike).
METADATA = {
    "format": "pt",
    "producer": "tests/golden/gen_safetensors.py",
    "note": 'caf\u00e9 \u2713 "quoted" back\\slash\nnew line\ttab \x01 a/b',
}


def tensors():
    a = lambda n, dtype=torch.int64: torch.arange(n, dtype=dtype)
    return {
        "f64": (a(6, torch.float64) / 4).reshape(2, 3),                        # (3 i + j) / 4
        "f32": (a(12, torch.float32) * 0.5 - 2).reshape(3, 4),                 # (4 i + j) / 2 - 2
        "f16": (a(8, torch.float32) * 0.25 - 1).to(torch.float16),            # k / 4 - 1
        "bf16": (a(8, torch.float32) * 0.5 - 2).to(torch.bfloat16),           # k / 2 - 2
        "i64": (a(5) - 2) * 1_000_000_000_000,                                 # (k - 2) 10^12
        "i32": (a(6) * 1000 - 3000).to(torch.int32).reshape(2, 3),            # 1000 (3 i + j) - 3000
        "i16": (a(4) * 300 - 600).to(torch.int16),                             # 300 k - 600
        "i8": (a(5) * 50 - 100).to(torch.int8),                                # 50 k - 100
        "u8": (a(10) * 25).to(torch.uint8),                                    # 25 k
        "bool": a(5) % 2 == 0,                                                 # k even
        "f8_e4m3": (a(8, torch.float32) * 0.5 - 2).to(torch.float8_e4m3fn),   # k / 2 - 2
        "f8_e5m2": (a(8, torch.float32) * 0.5 - 2).to(torch.float8_e5m2),     # k / 2 - 2
        "scalar": torch.tensor(3.25, dtype=torch.float32),                     # 0-dim
        "step": torch.tensor(42, dtype=torch.int64),                           # 0-dim
        "empty": torch.zeros(0, 3, dtype=torch.float32),                       # no elements
    }


def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return f.read(n).decode("utf-8")


def save_with_sorted_metadata(path, t, metadata):
    # The library keeps metadata in a Rust HashMap with a random seed per map, so its key order in the header
    # changes from one save to the next. Retry until the order is the sorted one (what bellows writes): the
    # committed file is then the same on every regeneration, and byte-comparable with bellows' output.
    for _ in range(1000):
        save_file(t, path, metadata=metadata)
        if list(json.loads(header(path))["__metadata__"]) == sorted(metadata):
            return
    raise SystemExit(f"{path}: the metadata never came out in sorted key order")


def main():
    os.makedirs(OUT, exist_ok=True)
    t = tensors()
    save_with_sorted_metadata(os.path.join(OUT, "all_dtypes.safetensors"), t, METADATA)
    save_file({"x": t["f32"]}, os.path.join(OUT, "no_metadata.safetensors"))
    print(f"safetensors {safetensors.__version__}, torch {torch.__version__}: wrote {OUT}")


if __name__ == "__main__":
    main()
