#!/usr/bin/env python3
# NPY/NPZ fixtures written by numpy itself, for tests/unit/data/npy_test.cpp: what np.save, np.savez and
# np.savez_compressed really produce (numpy's ZIP64 local headers, unaligned stored entries, DEFLATE), the
# 2.0/3.0 header versions, and the inputs bellows must refuse (Fortran order, big-endian, object, strings).
#
#   ~/.cache/bellows/torch-2.13.0/bin/python tests/golden/gen_npy_fixtures.py   # rewrites tests/data/npy/
#
# Values are simple functions of the index (arange), so the C++ test states them without reading a sidecar.
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "npy")


def arrays():
    return {
        "a": np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5,  # a[i, j] = (4 i + j) / 2
        "b": np.arange(5, dtype=np.int64) - 2,                      # -2 .. 2
        "c": np.array([True, False, True]),
        "d": np.arange(6, dtype=np.float64).reshape(2, 3) / 3,      # d[i, j] = (3 i + j) / 3
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    path = lambda name: os.path.join(OUT, name)
    np.savez(path("savez.npz"), **arrays())
    np.savez_compressed(path("savez_compressed.npz"), **arrays())
    for version in [(2, 0), (3, 0)]:
        with open(path(f"v{version[0]}.npy"), "wb") as f:
            np.lib.format.write_array(f, arrays()["a"], version=version)
    np.save(path("fortran.npy"), np.asfortranarray(arrays()["d"]))
    np.save(path("bigendian.npy"), arrays()["a"].astype(">f4"))
    np.save(path("object.npy"), np.array([1, "x", None], dtype=object), allow_pickle=True)
    np.save(path("unicode.npy"), np.array(["ab", "cde"]))


if __name__ == "__main__":
    main()
