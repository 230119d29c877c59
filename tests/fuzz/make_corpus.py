#!/usr/bin/env python3
"""Regenerates the seed corpora of the libFuzzer harnesses in tests/fuzz/ (README.md there lists them).

    ~/.cache/bellows/torch-2.13.0/bin/python tests/fuzz/make_corpus.py [--out tests/fuzz/corpus] [--bellows build/bin/bellows]

Needs numpy, safetensors and torch (bellows' Python environment), libnetcdf for the NetCDF seeds (through ctypes: no
Python netCDF package) and a built bellows for the config seeds (the demo's is what `bellows config show` prints: the
demo is written once, in app/schema.cpp). Every seed is written byte for byte the same on every run (of one bellows):
no timestamps (the .npz entries carry 1980-01-01), fixed values, the JPEGs embedded as bytes.
Each seed is a small valid input, or (names with "broken") a slightly damaged one that bellows must reject with a
bellows::Error. Seeds of harnesses that take an options byte or a container (csv, npy, checkpoint) are written in
that input format; the harness sources describe it.
"""
import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib

import numpy as np

from netcdf_writer import (NC_64BIT_DATA, NC_64BIT_OFFSET, NC_BYTE, NC_DOUBLE, NC_FLOAT, NC_INT, NC_NETCDF4, NC_SHORT,
                           NC_UBYTE, NC_UNLIMITED, NC_USHORT, NetCDF)

MAX_SEED = 4096
written = {}


def put(out, target, name, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_SEED:
        sys.exit(f"seed {target}/{name} has {len(data)} bytes, over {MAX_SEED}")
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    written.setdefault(target, []).append((name, len(data)))


# --------------------------------------------------------------------------------------------------- config
# YAML text, optionally a NUL byte and one override per line (config_fuzz.cpp). The harness's scratch directory
# holds base.yaml and profiles/gpu.yaml for `experiment:`/`hardware_profile:`.

TEMPORAL_MLP = """# examples/temporal/mlp.yaml
name: temporal-mlp
seed: 0
data:
  source: csv
  path: data/features.csv
  csv:
    targets: [y]
  batch_size: 512
  val_fraction: 0.05
model:
  name: mlp
  in_features: 64
  hidden: [512, 512, 512]
  out_features: 1
  activation: gelu
train:
  epochs: 5
  log_every_n_steps: 50
optim:
  type: adamw
  lr: 0.001
  weight_decay: 0.01
schedule:
  type: cosine
  warmup_steps: 100
"""



def config_show(bellows):
    """`bellows config show` without a file: the embedded demo resolved, every default filled in. From / so that
    output_dir, made absolute against the working directory, reads /runs on every machine."""
    if not os.path.isfile(bellows):
        sys.exit(f"config: no bellows executable at {bellows}: build it (scripts/dev.sh build bellows_cli) or pass --bellows")
    shown = subprocess.run([os.path.abspath(bellows), "config", "show"], cwd="/", capture_output=True, text=True)
    if shown.returncode != 0:
        sys.exit(f"config: `{bellows} config show` failed (exit {shown.returncode}): {shown.stderr.strip()}")
    return shown.stdout


def config_seeds(out, shown):  # shown: config_show()'s text
    put(out, "config", "temporal_mlp_overrides", TEMPORAL_MLP + "\0optim.lr=3e-4\ndata.batch_size=64\n--epochs=2\n")
    put(out, "config", "config_show.yaml", shown)
    put(out, "config", "compose_aliases",
        "experiment: base.yaml\nhardware_profile: profiles/gpu.yaml\noptim:\n  lr: 0.1\n"
        "\0model.hidden=[16, 16]\n--batch-size\n32\n--lr=1e-3\ndata.csv={missing: drop}\n")
    put(out, "config", "flow_anchors.yaml",
        "name: 'quoted: name'\nseed: 7\n"
        "data: &d {source: synthetic, kind: classification, samples: 32, features: 4, classes: 3, batch_size: 4}\n"
        "model: {name: mlp, in_features: 4, hidden: [], out_features: 3}\n"
        "train: {epochs: 1, freeze: []}\noptim: {type: sgd, lr: .5, momentum: 0.9, nesterov: true}\n"
        "schedule:\n  type: step\n  step_size: 10\n  gamma: 0.5\n")
    put(out, "config", "overrides_only",
        "\0model.name=mlp\ndata.source=synthetic\ndata.features=8\nmodel.in_features=8\nema.enabled=true\n")
    # The fuzzer's finding (2026-11-27): a value ending in a carriage return did not survive to_yaml().
    put(out, "config", "crlf_value", "optim:\n  lr: f\r\0")
    put(out, "config", "broken_duplicate_key.yaml", "name: a\noptim:\n  lr: 0.1\n  lr: 0.2\n data: 1\n")
    put(out, "config", "broken_types_overrides",
        "optim:\n  lr: fast\ndata:\n  batch_size: 1.5\n  btach: 3\nmodel:\n  name: mlpp\n"
        "\0optim.lr.x=1\nnot-an-override\nexperiment=other.yaml\n=3\n--no-such-flag\n")


# ------------------------------------------------------------------------------------------------------ csv
# One options byte (csv_fuzz.cpp: bit 0 .tsv, bits 1-2 missing error|drop|zero|mean, bit 3 targets [y], bit 4
# categorical [c], bit 5 integer [i], bit 6 chunk_bytes 7, bit 7 delimiter ';'), then the file.

def csv_seeds(out):
    def seed(name, options, text):
        put(out, "csv", name, bytes([options]) + text.encode())

    seed("floats_target", 0x08, "x1,x2,y\n0.5,1,2\n1.5,-2e3,3.25\n-0,.5,1e-3\n")
    seed("typed_columns", 0x38, "a,c,i,y\n1.5,red,3,0.5\n2.5,blue,-4,1\n0,red,7,2\n")
    seed("tsv_missing_drop", 0x0B, "a\tb\ty\n1\tNA\t2\n3\t4\t5\n\n6\t7\t8\n")
    seed("quoted_missing_mean", 0x0E, 'a,"b,c",y,"d ""q"""\n"1",2,3,-1\n,4,5,"0.5"\n6,"7",8,NaN\n')
    seed("bom_crlf_small_chunks", 0x48, "\ufeffalpha, beta ,y\r\n1.25,2.5,3\r\n4,5,6\r\n7,8,9\r\n")
    seed("semicolon", 0x88, "a;b;y\n1;2;3\n4;5;6\n")
    seed("categorical_zero", 0x1C, "c,y\nx,1\n,2\nz,3\nNA,4\n")
    seed("broken_ragged_row", 0x08, "a,b,y\n1,2,3\n1,2\n")
    seed("broken_open_quote", 0x38, 'a,c,i,y\n1,"red,3,4\n')


# ------------------------------------------------------------------------------------------------------ npy
# One options byte (npy_fuzz.cpp: bit 0 .npz, bit 1 mmap), then the file.

def npy_bytes(arr, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, arr, allow_pickle=False)
    else:
        np.lib.format.write_array(b, arr, version=version, allow_pickle=False)
    return b.getvalue()


def npz_bytes(arrays, compressed=False):
    """As np.savez / np.savez_compressed write it (ZIP64 local headers), with a fixed timestamp."""
    b = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(b, "w", compression=method, allowZip64=True) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)
    return b.getvalue()


def npy_seeds(out):
    def seed(name, options, data):
        put(out, "npy", name, bytes([options]) + data)

    seed("f4_2x3.npy", 0x00, npy_bytes(np.arange(6, dtype="<f4").reshape(2, 3) / 4))
    seed("i8_mmap.npy", 0x02, npy_bytes(np.array([-3, 0, 1, 2**40, -(2**62)], dtype="<i8")))
    seed("f2_scalar_mmap.npy", 0x02, npy_bytes(np.array(1.5, dtype="<f2")))
    seed("u1_v2.npy", 0x00, npy_bytes(np.array([[1, 2], [254, 255]], dtype="u1"), version=(2, 0)))
    seed("bool_v3_mmap.npy", 0x02, npy_bytes(np.array([[True, False, True]]), version=(3, 0)))
    seed("stored.npz", 0x01, npz_bytes({"x": np.ones((2, 2), dtype="<f4"), "y": np.array([0, 1], dtype="<i8")}))
    seed("stored_mmap.npz", 0x03, npz_bytes({"a": np.arange(3, dtype="<f8"), "b": np.array([1, -1], dtype="i1"),
                                            "c": np.zeros((0, 2), dtype="<f4")}))
    seed("deflate.npz", 0x01, npz_bytes({"x": np.linspace(0, 1, 16, dtype="<f4").reshape(4, 4)}, compressed=True))
    seed("broken_bigendian.npy", 0x00, npy_bytes(np.array([1, 2], dtype=">i2")))
    seed("broken_truncated.npy", 0x02, npy_bytes(np.arange(8, dtype="<f8"))[:-5])


# --------------------------------------------------------------------------------------------------- netcdf
# The .nc file itself, written through the netCDF C library (netcdf_writer.py).

def weather(t=3, levels=2, lat=2, lon=3, fill_hit=False):
    """The variables of a small regional-weather grid like tests/unit/data/netcdf_test.cpp's."""
    tt, ii, jj = np.meshgrid(np.arange(t), np.arange(lat), np.arange(lon), indexing="ij")
    t2m = (280 + tt + 0.5 * ii - 0.25 * jj).astype("f4")
    if fill_hit:
        t2m[1, 0, 1] = -999
    u = (np.arange(t * levels * lat * lon).reshape(t, levels, lat, lon) * 3 - 20).astype("i2")
    return [
        ("time", NC_DOUBLE, ["time"], np.arange(t, dtype="f8") * 6, {}),
        ("level", NC_INT, ["level"], np.array([850, 500][:levels], dtype="i4"), {}),
        ("lat", NC_FLOAT, ["lat"], np.linspace(45, 46, lat, dtype="f4"), {}),
        ("lon", NC_FLOAT, ["lon"], np.linspace(5, 7, lon, dtype="f4"), {}),
        ("t2m", NC_FLOAT, ["time", "lat", "lon"], t2m, {"_FillValue": (NC_FLOAT, [-999])} if fill_hit else {}),
        ("u", NC_SHORT, ["time", "level", "lat", "lon"], u,
         {"scale_factor": (NC_DOUBLE, [0.01]), "add_offset": (NC_DOUBLE, [1.5]), "missing_value": (NC_SHORT, [-32767])}),
        ("mask", NC_BYTE, ["lat", "lon"], np.array([[0, 1, 1], [1, 0, 1]], dtype="i1")[:lat, :lon], {}),
    ]


WEATHER_DIMS = [("time", NC_UNLIMITED), ("level", 2), ("lat", 2), ("lon", 3)]


def netcdf_seeds(out):
    try:
        nc = NetCDF()
    except OSError as e:
        print(f"netcdf: skipped, no netCDF C library: {e}")
        return
    tmp = tempfile.mkdtemp(prefix="bellows-corpus-")
    try:
        def make(name, cmode, dims, variables, cut=0, limit=True):
            path = os.path.join(tmp, name)
            nc.write(path, cmode, dims, variables)
            data = open(path, "rb").read()
            if cut:
                data = data[:-cut]
            if not limit and len(data) > MAX_SEED:
                print(f"netcdf: {name} skipped ({len(data)} bytes, over {MAX_SEED})")
                return
            put(out, "netcdf", name, data)

        make("weather_cdf1.nc", 0, WEATHER_DIMS, weather())
        # Dimensions in another order, a double variable without levels, CDF-2.
        tt, jj, ii = np.meshgrid(np.arange(4), np.arange(3), np.arange(2), indexing="ij")
        # (A fixed time dimension: in classic files only the first dimension of a variable may be unlimited.)
        make("reordered_cdf2.nc", NC_64BIT_OFFSET, [("lon", 3), ("time", 4), ("lat", 2)], [
            ("pr", NC_DOUBLE, ["time", "lon", "lat"], (tt * 0.1 + jj + ii * 2).astype("f8"), {}),
            ("z", NC_FLOAT, ["lat", "time", "lon"], np.transpose(tt + jj - ii, (2, 0, 1)).astype("f4") * 10, {}),
        ])
        # CDF-5: unsigned types, a _FillValue that no value hits, no coordinate variables.
        make("unsigned_cdf5.nc", NC_64BIT_DATA, [("time", 2), ("lat", 2), ("lon", 2), ("level", 1)], [
            ("q", NC_UBYTE, ["time", "level", "lat", "lon"], np.arange(8, dtype="u1").reshape(2, 1, 2, 2),
             {"_FillValue": (NC_UBYTE, [255]), "scale_factor": (NC_FLOAT, [0.5])}),
            ("w", NC_USHORT, ["time", "lat", "lon"], np.arange(8, dtype="u2").reshape(2, 2, 2) * 1000, {}),
        ])
        # netCDF-4 (HDF5): kept only when it fits the seed size.
        make("weather_nc4.nc", NC_NETCDF4, [("time", NC_UNLIMITED), ("lat", 2), ("lon", 2)], [
            ("t2m", NC_FLOAT, ["time", "lat", "lon"], np.arange(8, dtype="f4").reshape(2, 2, 2), {}),
        ], limit=False)
        make("broken_fill_value_hit.nc", 0, WEATHER_DIMS, weather(fill_hit=True))
        make("broken_truncated.nc", 0, WEATHER_DIMS, weather(), cut=12)
        make("broken_no_lat.nc", 0, [("time", NC_UNLIMITED), ("y", 2), ("lon", 2)], [
            ("t2m", NC_FLOAT, ["time", "y", "lon"], np.ones((2, 2, 2), dtype="f4"), {}),
        ])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- image
# PNGs written here chunk by chunk (zlib + struct); JPEGs embedded: made once with Pillow 13.0.0 from gradients,
#   Image.fromarray(a, mode).save(buf, "JPEG", quality=..., progressive=...)
# rgb: 8x8 RGB q75; gray: 16x16 L q90; progressive: 16x8 RGB q60 progressive; cmyk: 8x8 CMYK q75 (Adobe marker).

JPEG_RGB = """
/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4nICIsIxwcKDcpLDAx
NDQ0Hyc5PTgyPC4zNDL/2wBDAQkJCQwLDBgNDRgyIRwhMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIy
MjIyMjIyMjL/wAARCAAIAAgDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUF
BAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVW
V1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi
4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAEC
AxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVm
Z2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq
8vP09fb3+Pn6/9oADAMBAAIRAxEAPwDP8OeAPufuf0ooop0qkuUvJM4xf1SPvH//2Q==
"""
JPEG_GRAY = """
/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAMCAgMCAgMDAwMEAwMEBQgFBQQEBQoHBwYIDAoMDAsKCwsNDhIQDQ4RDgsLEBYQERMU
FRUVDA8XGBYUGBIUFRT/wAALCAAQABABAREA/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUF
BAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVW
V1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi
4+Tl5ufo6erx8vP09fb3+Pn6/9oACAEBAAA/APCv2bfht/x6/uvTtX2r8WPiH/wzF+zhrHiqzPleJLzbpGg/JnF/MrbJOY3T90iS
z7ZBtfydhILiuU/Zt+G3/Hr+69O1fP8A+2Z8Q/8AhdP7R6eFdNO/w34B83SIfkx5l+WX7dJ80auMPGkG0llP2behxIa//9k=
"""
JPEG_PROGRESSIVE = """
/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAA0JCgsKCA0LCgsODg0PEyAVExISEyccHhcgLikxMC4pLSwzOko+MzZGNywtQFdBRkxO
UlNSMj5aYVpQYEpRUk//2wBDAQ4ODhMREyYVFSZPNS01T09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09P
T09PT09PT0//wgARCAAIABADASIAAhEBAxEB/8QAFQABAQAAAAAAAAAAAAAAAAAAAAP/xAAUAQEAAAAAAAAAAAAAAAAAAAAD/9oA
DAMBAAIQAxAAAAGQMf/EABYQAQEBAAAAAAAAAAAAAAAAAAMABP/aAAgBAQABBQIs0YX/xAAXEQADAQAAAAAAAAAAAAAAAAAAAgMi
/9oACAEDAQE/AZ3fB//EABcRAQADAAAAAAAAAAAAAAAAAAIAAyL/2gAIAQIBAT8BdqAzP//EABUQAQEAAAAAAAAAAAAAAAAAABAx
/9oACAEBAAY/Aof/xAAXEAADAQAAAAAAAAAAAAAAAAAAATFB/9oACAEBAAE/IZjFI//aAAwDAQACAAMAAAAQe//EABgRAAIDAAAA
AAAAAAAAAAAAAAABEVHB/9oACAEDAQE/EHHJ3h//xAAXEQEBAQEAAAAAAAAAAAAAAAABEQCx/9oACAECAQE/EHtSod3/xAAaEAAC
AgMAAAAAAAAAAAAAAAAAEQEhMUHx/9oACAEBAAE/EOQJV/crB//Z
"""
JPEG_CMYK = """
/9j/7gAOQWRvYmUAZAAAAAAA/9sAQwAIBgYHBgUIBwcHCQkICgwUDQwLCwwZEhMPFB0aHx4dGhwcICQuJyAiLCMcHCg3KSwwMTQ0
NB8nOT04MjwuMzQy/8AAFAgACAAIBEMRAE0RAFkRAEsRAP/EAB8AAAEFAQEBAQEBAAAAAAAAAAABAgMEBQYHCAkKC//EALUQAAIB
AwMCBAMFBQQEAAABfQECAwAEEQUSITFBBhNRYQcicRQygZGhCCNCscEVUtHwJDNicoIJChYXGBkaJSYnKCkqNDU2Nzg5OkNERUZH
SElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6g4SFhoeIiYqSk5SVlpeYmZqio6Slpqeoqaqys7S1tre4ubrCw8TFxsfIycrS09TV
1tfY2drh4uPk5ebn6Onq8fLz9PX29/j5+v/aAA4EQwBNAFkASwAAPwC/8Yf+Xj8av/8AC4f+nn/x6r/jHxj/AKz95+ter1//2Q==
"""


def jpeg(b64):
    return base64.b64decode("".join(b64.split()))


def png(width, height, bit_depth, color_type, rows, extra_chunks=(), bad_crc=False):
    """rows: the unfiltered scanlines (bytes each); filter type 0 (None) on every row."""
    def chunk(kind, data):
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        if bad_crc and kind == b"IDAT":
            crc ^= 1
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    raw = b"".join(b"\0" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    for kind, data in extra_chunks:
        out += chunk(kind, data)
    return out + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def image_seeds(out):
    rgb = [bytes(((x * 60 + c * 30 + y * 10) % 256) for x in range(4) for c in range(3)) for y in range(4)]
    put(out, "image", "rgb_4x4.png", png(4, 4, 8, 2, rgb))
    gray16 = [b"".join(struct.pack(">H", (x * 20000 + y * 5000) % 65536) for x in range(3)) for y in range(2)]
    put(out, "image", "gray16_3x2.png", png(3, 2, 16, 0, gray16))
    rgba = [bytes([255, 0, 0, 255, 0, 255, 0, 128]), bytes([0, 0, 255, 0, 255, 255, 255, 255])]
    put(out, "image", "rgba_2x2.png", png(2, 2, 8, 6, rgba))
    # Palette, 4 bits per index, with transparency: expanded to RGB.
    plte = bytes([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])
    put(out, "image", "palette4_4x2.png",
        png(4, 2, 4, 3, [bytes([0x01, 0x23]), bytes([0x32, 0x10])], [(b"PLTE", plte), (b"tRNS", bytes([0, 255]))]))
    put(out, "image", "broken_crc.png", png(4, 4, 8, 2, rgb, bad_crc=True))
    put(out, "image", "rgb_8x8.jpg", jpeg(JPEG_RGB))
    put(out, "image", "gray_16x16.jpg", jpeg(JPEG_GRAY))
    put(out, "image", "progressive_16x8.jpg", jpeg(JPEG_PROGRESSIVE))
    put(out, "image", "cmyk_8x8.jpg", jpeg(JPEG_CMYK))
    put(out, "image", "broken_truncated.jpg", jpeg(JPEG_RGB)[:-40])


# ---------------------------------------------------------------------------------------------- safetensors

def st_raw(header, data=b"", pad=True):
    """A safetensors file from a header dict (or raw JSON text) and a data section, as written by hand."""
    text = header if isinstance(header, (bytes, str)) else json.dumps(header, separators=(",", ":"))
    text = text.encode() if isinstance(text, str) else text
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds(out):
    import torch
    from safetensors.numpy import save as save_numpy
    from safetensors.torch import save as save_torch

    put(out, "safetensors", "linear_f32.safetensors",
        save_numpy({"weight": (np.arange(6, dtype="f4").reshape(2, 3) - 2) / 3, "bias": np.array([0.5, -1], dtype="f4")},
                   metadata={"format": "pt"}))
    put(out, "safetensors", "mixed_dtypes.safetensors", save_torch({
        "bf16": torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.bfloat16),
        "f16": torch.tensor([1.0, 65504.0, -0.0], dtype=torch.float16),
        "step": torch.tensor(7, dtype=torch.int64),
        "mask": torch.tensor([True, False]),
        "u8": torch.arange(4, dtype=torch.uint8),
        "i8": torch.tensor([-128], dtype=torch.int8),
        "i16": torch.tensor([300, -300], dtype=torch.int16),
    }, metadata={"format": "pt", "note": "mixed"}))
    put(out, "safetensors", "empty_and_f64.safetensors",
        save_numpy({"empty": np.zeros((0, 3), dtype="f8"), "x": np.array([1e300, -1e-300], dtype="f8")}))
    put(out, "safetensors", "float8.safetensors", save_torch({
        "e4m3": torch.tensor([0.5, 1.0, -2.0], dtype=torch.float32).to(torch.float8_e4m3fn),
        "e5m2": torch.tensor([4.0, -0.25], dtype=torch.float32).to(torch.float8_e5m2),
    }))
    put(out, "safetensors", "i32_unpadded.safetensors",
        st_raw({"n": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}}, struct.pack("<ii", 1, -1), pad=False))
    put(out, "safetensors", "broken_header_length.safetensors", struct.pack("<Q", 1 << 40) + b'{"a":{}}')
    put(out, "safetensors", "broken_overlap.safetensors", st_raw({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    }, bytes(12)))
    put(out, "safetensors", "broken_dtype.safetensors",
        st_raw({"__metadata__": {"format": "pt"}, "c": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8)))


# ----------------------------------------------------------------------------------------------- checkpoint
# The container of checkpoint_fuzz.cpp: a flags byte (bit 0 fix checksums, bit 1 mmap, bit 2 ema export, bit 3 no
# state.bin, bit 4 no model.safetensors), then manifest.json, model.safetensors, state.bin, each as a u32
# little-endian length and its bytes. The files are laid out as ckpt::save_checkpoint writes them.

def container(flags, manifest, model, state):
    out = bytes([flags])
    for part in (manifest, model, state):
        part = part.encode() if isinstance(part, str) else part
        out += struct.pack("<I", len(part)) + part
    return out


def manifest_json(model, state, step=1, epoch=0, format_version=1, sha_override=None, info=None):
    files = {"model.safetensors": {"bytes": len(model), "sha256": hashlib.sha256(model).hexdigest()},
             "state.bin": {"bytes": len(state), "sha256": hashlib.sha256(state).hexdigest()}}
    if sha_override:
        for name, sha in sha_override.items():
            files[name]["sha256"] = sha
    m = {"bellows_version": "0.1.0", "created_utc": "2026-01-01T00:00:00Z", "epoch": epoch, "files": files,
         "format": "bellows-checkpoint", "format_version": format_version,
         "info": info if info is not None else {"config": "name: fuzz\nmodel:\n  name: mlp\n"},
         "step": step, "torch_version": "2.13.0"}
    return json.dumps(m, indent=2, sort_keys=True) + "\n"


def checkpoint_seeds(out):
    import torch
    from safetensors.torch import save as save_torch

    weight = torch.tensor([[0.5, -1.0, 2.0], [0.0, 0.25, -0.75]])
    bias = torch.tensor([0.1, -0.1])
    model = save_torch({"fc.weight": weight, "fc.bias": bias}, metadata={"format": "pt"})
    scalar = lambda v, dt=torch.int64: torch.tensor(v, dtype=dt)
    state_tensors = {
        "counters.step": scalar(1), "counters.epoch": scalar(0), "counters.samples": scalar(8),
        "counters.batches_in_epoch": scalar(1), "data.position": scalar(8), "data.sampler.seed": scalar(0),
        "optim.steps": scalar(1), "optim.lr": scalar(0.01, torch.float64),
        "optim.exp_avg.fc.weight": weight * 0.1, "optim.exp_avg.fc.bias": bias * 0.1,
    }
    state = save_torch(state_tensors, metadata={"format": "bellows-state"})
    ema_state = save_torch({**state_tensors, "ema.weights.fc.weight": weight * 0.9, "ema.weights.fc.bias": bias * 0.9},
                           metadata={"format": "bellows-state"})
    info = {"best": {"checkpoint": "step-000000001", "lower_is_better": True, "name": "loss", "value": 0.5},
            "config": "name: fuzz\nmodel:\n  name: mlp\n  in_features: 3\n", "plan": {"threads": {"value": 1}}}

    put(out, "checkpoint", "valid", container(0x00, manifest_json(model, state, info=info), model, state))
    put(out, "checkpoint", "fixed_checksums_mmap", container(0x03, manifest_json(model, state, sha_override={
        "model.safetensors": "0" * 64, "state.bin": "0" * 64}), model, state))
    put(out, "checkpoint", "ema_export", container(0x05, manifest_json(model, ema_state, step=12, epoch=3), model, ema_state))
    put(out, "checkpoint", "no_state_file", container(0x09, manifest_json(model, state), model, state))
    put(out, "checkpoint", "broken_checksum", container(0x00, manifest_json(model, state, sha_override={
        "state.bin": hashlib.sha256(b"other").hexdigest()}), model, state))
    put(out, "checkpoint", "broken_format_version", container(0x00, manifest_json(model, state, format_version=2), model, state))
    put(out, "checkpoint", "broken_truncated_state", container(0x01, manifest_json(model, state), model, state[:-9]))
    put(out, "checkpoint", "broken_manifest_json", container(0x01, manifest_json(model, state)[:-40], model, state))


# ----------------------------------------------------------------------------------------------- text_pairs
# TSVs of premise/hypothesis/label rows, and serialized SentencePiece models (the harness gives the same bytes to
# both readers). The models are written here field by field (sentencepiece_model.proto) with the identity
# normalizer, so that they stay small (a trained model's nmt_nfkc table alone is 237 KB).

def pb_varint(n):
    n &= (1 << 64) - 1  # negative int32 fields: ten bytes, two's complement
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_key(field, wire):
    return pb_varint(field << 3 | wire)


def pb_int(field, v):
    return pb_key(field, 0) + pb_varint(v)


def pb_bytes(field, b):
    b = b.encode() if isinstance(b, str) else b
    return pb_key(field, 2) + pb_varint(len(b)) + b


def pb_float(field, x):
    return pb_key(field, 5) + struct.pack("<f", x)


NORMAL, UNKNOWN, CONTROL = 1, 2, 3


def spm_model(pieces, model_type, ids, control_symbols=()):
    """pieces: [(text, score, type)]; model_type 1 unigram, 2 BPE; ids: {unk_id, bos_id, eos_id, pad_id}."""
    out = b""
    for text, score, kind in pieces:
        p = pb_bytes(1, text) + pb_float(2, score)
        if kind != NORMAL:
            p += pb_int(3, kind)
        out += pb_bytes(1, p)
    spec = pb_int(3, model_type) + pb_int(4, len(pieces))
    for s in control_symbols:
        spec += pb_bytes(30, s)
    for field, name in ((40, "unk_id"), (41, "bos_id"), (42, "eos_id"), (43, "pad_id")):
        spec += pb_int(field, ids[name])
    out += pb_bytes(2, spec)
    out += pb_bytes(3, pb_bytes(1, "identity"))
    return out


def text_pairs_seeds(out):
    put(out, "text_pairs", "nli.tsv",
        "premise\thypothesis\tlabel\n"
        "the cat sleeps in the garden\tthe cat is awake\tcontradiction\n"
        "the dog sleeps in the garden\tthe dog sleeps\tentailment\n"
        "a bird sings on the roof\tit rains in the city\tneutral\n"
        "two children play football outside\tchildren are playing\tentailment\n")
    put(out, "text_pairs", "numeric_labels_reordered.tsv",
        "label\tid\thypothesis\tpremise\n2\t1\tthe man is sleeping\ta man reads a newspaper\n"
        "0\t2\tsomeone is cycling\ta woman rides a bicycle\n10\t3\tthe streets are wet\tit rains in the city\n")
    long = " ".join(["the farmer feeds the cows in the morning"] * 4)
    put(out, "text_pairs", "truncation.tsv",
        f"premise\thypothesis\tlabel\n{long}\tthe cows are hungry\tyes\nshort\t{long}\tno\n{long}\t{long}\tyes\n")
    put(out, "text_pairs", "unicode_crlf.tsv",
        "premise\thypothesis\tlabel\r\nGrüße aus Köln\tdie Stadt am Rhein\tneutral\r\n"
        "数字 123 and symbols !?\t\"quoted\" text\tneutral\r\n\tan empty premise\tcontradiction\r\n")
    put(out, "text_pairs", "broken_ragged_row.tsv",
        "premise\thypothesis\tlabel\nthe cat sleeps\tthe cat is awake\tcontradiction\nonly two\tfields\n")
    put(out, "text_pairs", "broken_no_label_column.tsv",
        "premise\thypothesis\tgold\nthe cat sleeps\tthe cat is awake\tcontradiction\n")

    # A unigram vocabulary laid out as bellows trains one: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, no bos/eos.
    letters = "etahnsgdiroflcbmkwpuy"
    unigram = [("<pad>", 0, CONTROL), ("<unk>", 0, UNKNOWN), ("[CLS]", 0, CONTROL), ("[SEP]", 0, CONTROL),
               ("\u2581", -1.6, NORMAL), ("\u2581the", -2.0, NORMAL), ("\u2581cat", -3.0, NORMAL),
               ("\u2581sleeps", -3.1, NORMAL), ("ing", -3.5, NORMAL), ("ar", -3.8, NORMAL)]
    unigram += [(c, -4.0 - i * 0.1, NORMAL) for i, c in enumerate(letters)]
    put(out, "text_pairs", "unigram_identity.model",
        spm_model(unigram, 1, {"unk_id": 1, "bos_id": -1, "eos_id": -1, "pad_id": 0}, ["[CLS]", "[SEP]"]))
    # A BPE vocabulary with SentencePiece's default ids (<unk> 0, <s> 1, </s> 2): pairs are marked with <s>/</s>.
    bpe = [("<unk>", 0, UNKNOWN), ("<s>", 0, CONTROL), ("</s>", 0, CONTROL), ("\u2581t", -0.0, NORMAL),
           ("he", -1.0, NORMAL), ("\u2581the", -2.0, NORMAL), ("at", -3.0, NORMAL), ("\u2581c", -4.0, NORMAL),
           ("\u2581cat", -5.0, NORMAL)]
    bpe += [(c, -6.0 - i, NORMAL) for i, c in enumerate("\u2581" + letters)]
    bpe_model = spm_model(bpe, 2, {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1})
    put(out, "text_pairs", "bpe_bos_eos.model", bpe_model)
    put(out, "text_pairs", "broken_truncated.model", bpe_model[:-7])


MAKERS = {"config": config_seeds, "csv": csv_seeds, "npy": npy_seeds, "netcdf": netcdf_seeds, "image": image_seeds,
          "safetensors": safetensors_seeds, "checkpoint": checkpoint_seeds, "text_pairs": text_pairs_seeds}


def clear(directory):
    """Removes a target's generated seeds. `found_*` are inputs a fuzzing run found, checked in after their fix:
    nothing here can write them again, so they stay."""
    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        if not name.startswith("found_"):
            os.remove(os.path.join(directory, name))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(here, "corpus"), help="the corpus directory (default: %(default)s)")
    ap.add_argument("--only", nargs="*", help="targets to regenerate (default: all)")
    ap.add_argument("--bellows", default=os.path.join(os.path.dirname(os.path.dirname(here)), "build", "bin", "bellows"),
                    help="the bellows executable whose `config show` the config seeds take (default: %(default)s)")
    args = ap.parse_args()
    wanted = [t for t in MAKERS if not args.only or t in args.only]
    shown = config_show(args.bellows) if "config" in wanted else None  # before anything is removed
    for target in wanted:
        clear(os.path.join(args.out, target))
        if target == "config":
            config_seeds(args.out, shown)
        else:
            MAKERS[target](args.out)
    for target, seeds in written.items():
        print(f"{target}: {len(seeds)} seeds, {sum(n for _, n in seeds)} bytes")


if __name__ == "__main__":
    main()
