# The PyTorch peer's data (bench/peers/peer.py): the csv, npy, npz, image-folder and netCDF sources read as bellows
# reads them, into memory before the timed steps.
import math
import os

import numpy as np
import torch


# ----------------------------------------------------------------------------------------------------------------
# Data, all in memory before timing: the batches bellows' sequential sampler gives (batch k: samples
# [k*B, min((k+1)*B, N)), the last one partial; data.drop_last=false), epoch after epoch.
# ----------------------------------------------------------------------------------------------------------------


def read_csv(path, target="y"):
    """The csv source (src/data/csv_reader.cpp): features = every column but the target, in header order; float32;
    no standardisation. Values are parsed as float64 and rounded to float32 (bellows parses straight to float32;
    the two agree for the example's 4-decimal values)."""
    with open(path) as f:
        header = [h.strip() for h in f.readline().rstrip("\r\n").split(",")]
    table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2).astype(np.float32)
    ti = header.index(target)
    features = [j for j in range(len(header)) if j != ti]
    x = torch.from_numpy(np.ascontiguousarray(table[:, features]))
    y = torch.from_numpy(np.ascontiguousarray(table[:, [ti]]))
    return x, y


def read_series(path):
    """The npy source's series (src/data/sources/npy.cpp read_series): floating arrays become float32."""
    a = np.load(path)
    if a.dtype.kind == "f" and a.dtype != np.float32:
        a = a.astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(a))


class RowBatches:
    """Contiguous row tensors sliced per batch (views, no copies)."""

    def __init__(self, tensors, batch_size):
        self.tensors, self.batch_size = tensors, batch_size
        self.n = tensors[0].size(0)
        self.per_epoch = (self.n + batch_size - 1) // batch_size

    def prepare(self, plan):
        pass

    def batch(self, epoch, k):
        a, b = k * self.batch_size, min((k + 1) * self.batch_size, self.n)
        return [t[a:b] for t in self.tensors]


class WindowBatches:
    """src/data/window.cpp: window i of series s starts at row (i % W) * stride of s, i // W = s; x = rows
    [start, start+length), y = target columns of rows [start+length, start+length+horizon). The batches a run
    needs are gathered once, before timing."""

    def __init__(self, series, length, stride, horizon, target_columns, batch_size, batches_needed):
        x = series if series.dim() == 3 else series.unsqueeze(0)
        s, t, _ = x.shape
        self.windows_per_series = (t - (length + horizon)) // stride + 1
        n = s * self.windows_per_series
        y = x.index_select(2, torch.tensor(target_columns, dtype=torch.long)) if target_columns else x
        flat_x, flat_y = x.reshape(s * t, -1), y.reshape(s * t, -1)
        self.per_epoch = (n + batch_size - 1) // batch_size
        self.batches = []
        for k in range(min(batches_needed, self.per_epoch)):
            idx = torch.arange(k * batch_size, min((k + 1) * batch_size, n))
            first = (idx // self.windows_per_series) * t + (idx % self.windows_per_series) * stride
            base = first.unsqueeze(1)
            xi = (base + torch.arange(0, length)).view(-1)
            yi = (base + torch.arange(length, length + horizon)).view(-1)
            self.batches.append([flat_x.index_select(0, xi).view(len(idx), length, -1),
                                 flat_y.index_select(0, yi).view(len(idx), horizon, -1)])

    def prepare(self, plan):
        pass

    def batch(self, epoch, k):
        return self.batches[k]


def read_npz(path, x_name, y_name):
    z = np.load(path)
    return [torch.from_numpy(np.ascontiguousarray(z[n].astype(np.float32) if z[n].dtype.kind == "f" else z[n]))
            for n in (x_name, y_name)]


def mix_seed(seed, index):
    """src/data/dataset.cpp mix_seed: splitmix64 over (seed, index), in uint64 arithmetic."""
    m = (1 << 64) - 1
    z = (seed + 0x9E3779B97F4A7C15 * (index + 1)) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def _png_chunks(raw, name):
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{name}: not a PNG file")
    pos, ihdr, idat = 8, None, []
    while pos < len(raw):
        length = int.from_bytes(raw[pos:pos + 4], "big")
        kind = raw[pos + 4:pos + 8]
        body = raw[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = body
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    w, h = int.from_bytes(ihdr[0:4], "big"), int.from_bytes(ihdr[4:8], "big")
    depth, color, interlace = ihdr[8], ihdr[9], ihdr[12]
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace != 0:
        raise ValueError(f"{name}: PNG bit depth {depth}, colour type {color}, interlace {interlace}: the built-in "
                         "decoder reads 8-bit non-interlaced gray/RGB/RGBA only (install Pillow for the others)")
    return h, w, channels, b"".join(idat)


def decode_pngs(files):
    """8-bit non-interlaced PNGs of one size to uint8 [N, H, W, C] with zlib and numpy: the five row filters are
    undone for all images at once, row by row (Sub/Average/Paeth pixel by pixel across the images)."""
    import zlib
    heads = []
    for f in files:
        with open(f, "rb") as fh:
            heads.append(_png_chunks(fh.read(), f))
    h, w, c, _ = heads[0]
    if any(hd[:3] != (h, w, c) for hd in heads):
        raise ValueError("images of different sizes or channel counts (install Pillow)")
    stride = w * c
    raw = np.stack([np.frombuffer(zlib.decompress(hd[3]), np.uint8).reshape(h, stride + 1) for hd in heads])
    n = raw.shape[0]
    out = np.zeros((n, h, stride), np.uint8)
    prior = np.zeros((n, stride), np.int32)
    for r in range(h):
        ft = raw[:, r, 0]
        cur = raw[:, r, 1:].astype(np.int32)
        row = np.where((ft == 2)[:, None], (cur + prior) & 255, cur)  # None (0) and Up (2)
        left_kinds = np.isin(ft, (1, 3, 4))
        if left_kinds.any():
            idx = np.nonzero(left_kinds)[0]
            f, a, p = ft[idx][:, None], cur[idx], prior[idx]
            res = np.empty_like(a)
            left = np.zeros((len(idx), c), np.int32)
            upleft = np.zeros((len(idx), c), np.int32)
            for j in range(w):
                sl = slice(j * c, (j + 1) * c)
                up = p[:, sl]
                pa, pb, pc = np.abs(up - upleft), np.abs(left - upleft), np.abs(left + up - 2 * upleft)
                paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
                pred = np.where(f == 1, left, np.where(f == 3, (left + up) >> 1, paeth))
                left = (a[:, sl] + pred) & 255
                res[:, sl] = left
                upleft = up
            row[idx] = res
        out[:, r] = row
        prior = row
    return torch.from_numpy(out.reshape(n, h, w, c))


class ImageFolderBatches:
    """src/data/image_folder.cpp with the example's settings (no resize or crop; hflip), or a center crop (data.images.crop
    with random_crop=false: top (H - h) // 2, left (W - w) // 2, no draw; W4's twin): classes are the sorted
    subfolders, files sorted below each; uint8 HWC -> CHW; in training each sample flips with the first draw of
    SampleRandom(mix_seed(epoch_seed, index)), epoch_seed = mix_seed(mix_seed(seed, 0xA11CE), epoch) (loader.cpp);
    then x = addcmul(shift, x, scale) in float32 (finish_on_device), channels_last where the run uses it."""

    EXT = (".png", ".jpg", ".jpeg")

    def __init__(self, root, batch_size, seed=0, hflip=True, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                 channels_last=True, crop=None):
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))
        files, labels = [], []
        for label, cls in enumerate(classes):
            found = []
            for dirpath, dirnames, names in os.walk(os.path.join(root, cls), followlinks=True):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                found += [os.path.relpath(os.path.join(dirpath, n), root) for n in names
                          if not n.startswith(".") and n.lower().endswith(self.EXT)]
            found.sort()
            files += found
            labels += [label] * len(found)
        paths = [os.path.join(root, f) for f in files]
        try:
            from PIL import Image
            hwc = torch.from_numpy(np.stack([np.asarray(Image.open(p).convert("RGB")) for p in paths]))
        except ImportError:
            hwc = decode_pngs(paths)
        chw = hwc.permute(0, 3, 1, 2)  # uint8 [N, C, H, W]
        if crop:  # the center crop, before the flip (image_folder.cpp: crop, then flip)
            (ch, cw), (h, w) = crop, chw.shape[-2:]
            if ch > h or cw > w:
                raise ValueError(f"{root}: images of {h}x{w} are smaller than the crop {ch}x{cw}")
            chw = chw[:, :, (h - ch) // 2:(h - ch) // 2 + ch, (w - cw) // 2:(w - cw) // 2 + cw]
        self.images = chw.contiguous()
        self.labels = torch.tensor(labels, dtype=torch.long)
        self.n, self.batch_size, self.seed, self.hflip = len(files), batch_size, seed, hflip
        self.per_epoch = (self.n + batch_size - 1) // batch_size
        self.scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32).view(1, -1, 1, 1)
        self.shift = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=torch.float32).view(1, -1, 1, 1)
        self.channels_last = channels_last
        self.cache = {}

    def flips(self, epoch, indices):
        epoch_seed = mix_seed(mix_seed(self.seed, 0xA11CE), epoch)
        return torch.tensor([(mix_seed(mix_seed(epoch_seed, i), 0) >> 63) != 0 for i in indices], dtype=torch.bool)

    def prepare(self, plan):
        """The uint8 batches of the (epoch, batch) pairs a run visits, flipped, before timing."""
        for epoch, k in plan:
            if (epoch, k) in self.cache:
                continue
            idx = torch.arange(k * self.batch_size, min((k + 1) * self.batch_size, self.n))
            x = self.images.index_select(0, idx)
            if self.hflip:
                flip = self.flips(epoch, idx.tolist())
                x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
            self.cache[(epoch, k)] = (x, self.labels.index_select(0, idx))

    def batch(self, epoch, k):
        x, y = self.cache[(epoch, k)]
        x = torch.addcmul(self.shift, x.to(torch.float32), self.scale)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return [x, y]


class NetcdfFile:
    """The few netCDF C library calls the netcdf source makes (src/data/netcdf_file.cpp), through ctypes: no
    Python netCDF package is needed, the library bellows links is enough."""

    def __init__(self, path):
        import ctypes
        import ctypes.util
        self.ct = ctypes
        self.lib = ctypes.CDLL(ctypes.util.find_library("netcdf") or "libnetcdf.so")
        self.ncid = ctypes.c_int()
        self.check(self.lib.nc_open(path.encode(), 0, ctypes.byref(self.ncid)), path)
        self.path = path

    def check(self, status, what):
        if status != 0:
            self.lib.nc_strerror.restype = self.ct.c_char_p
            raise OSError(f"netCDF: {what}: {self.lib.nc_strerror(status).decode()}")

    def dim(self, dimid):
        name, length = self.ct.create_string_buffer(256), self.ct.c_size_t()
        self.check(self.lib.nc_inq_dim(self.ncid, dimid, name, self.ct.byref(length)), "dimension")
        return name.value.decode(), length.value

    def variables(self):
        """(name, [dim names], [dim lengths], nc_type) per variable, in varid order."""
        n = self.ct.c_int()
        self.check(self.lib.nc_inq_nvars(self.ncid, self.ct.byref(n)), "variables")
        out = []
        for varid in range(n.value):
            name, xtype, ndims = self.ct.create_string_buffer(256), self.ct.c_int(), self.ct.c_int()
            dimids, natts = (self.ct.c_int * 16)(), self.ct.c_int()
            self.check(self.lib.nc_inq_var(self.ncid, varid, name, self.ct.byref(xtype), self.ct.byref(ndims), dimids,
                                           self.ct.byref(natts)), "variable")
            dims = [self.dim(dimids[i]) for i in range(ndims.value)]
            out.append((name.value.decode(), [d[0] for d in dims], [d[1] for d in dims], xtype.value, varid))
        return out

    def attribute(self, varid, name):
        value = self.ct.c_double()
        if self.lib.nc_get_att_double(self.ncid, varid, name.encode(), self.ct.byref(value)) != 0:
            return None
        return value.value

    def read(self, varid, shape, as_float):
        """The whole variable: float32 when its type converts exactly (float, short, byte), else float64."""
        a = np.empty(shape, np.float32 if as_float else np.float64)
        fn = self.lib.nc_get_var_float if as_float else self.lib.nc_get_var_double
        self.check(fn(self.ncid, varid, a.ctypes.data_as(self.ct.c_void_p)), f"variable {varid}")
        return torch.from_numpy(a)


class NetcdfBatches:
    """src/data/netcdf_dataset.cpp with the example's settings (all variables on (time, lat, lon), horizon 1,
    normalize): channels in the file's variable order, read as float32; per-channel mean and std over the whole
    file in float64 (Chan's pairwise update over 64 MB blocks of time steps), applied as x.sub_(float32 mean)
    .mul_(float32 1/std); sample t: x = data[t], y = data[t + horizon]."""

    @staticmethod
    def grid(path, time_dim="time", lat_dim="lat", lon_dim="lon"):
        """(lat, lon, grid variables, the open file): what the model is built from, without reading values."""
        nc = NetcdfFile(path)
        variables = nc.variables()
        grid = [v for v in variables if sorted(v[1]) == sorted([time_dim, lat_dim, lon_dim])]
        coords = {v[0]: v for v in variables if len(v[1]) == 1}
        lat = nc.read(coords[lat_dim][4], coords[lat_dim][2], False).tolist()
        lon = nc.read(coords[lon_dim][4], coords[lon_dim][2], False).tolist()
        return lat, lon, grid, nc

    def __init__(self, path, batch_size, horizon=1, normalize=True, time_dim="time", lat_dim="lat", lon_dim="lon"):
        self.lat, self.lon, grid, nc = self.grid(path, time_dim, lat_dim, lon_dim)
        self.channels = [v[0] for v in grid]
        blocks = []
        for name, dims, lens, xtype, varid in grid:
            raw = nc.read(varid, lens, xtype in (1, 3, 5, 7, 8))  # NC_BYTE, NC_SHORT, NC_FLOAT, NC_UBYTE, NC_USHORT
            raw = raw.permute(dims.index(time_dim), dims.index(lat_dim), dims.index(lon_dim)).unsqueeze(1)
            scale, offset = nc.attribute(varid, "scale_factor"), nc.attribute(varid, "add_offset")
            if (scale or 1.0) != 1.0 or (offset or 0.0) != 0.0:
                raw = raw.to(torch.float64) * (scale or 1.0) + (offset or 0.0)
            blocks.append(raw.to(torch.float32).contiguous())
        nc.lib.nc_close(nc.ncid)
        data = torch.cat(blocks, 1)  # [time, channels, lat, lon]
        if normalize:  # one channel per variable here (no level dimension)
            n_time, _, n_lat, n_lon = data.shape
            steps = max(1, (64 << 20) // (n_lat * n_lon * 8))
            means, inv = [], []
            for block in blocks:
                count = mean = m2 = 0.0
                for t0 in range(0, n_time, steps):
                    x = block[t0:t0 + steps].select(1, 0).to(torch.float64)
                    n = float(x.numel())
                    m = x.mean().item()
                    m2_block = (x - m).square().sum().item()
                    total, delta = count + n, m - mean
                    mean += delta * n / total
                    m2 += m2_block + delta * delta * count * n / total
                    count = total
                std = math.sqrt(m2 / count) if count > 0 else 0.0
                means.append(mean)
                inv.append(1.0 / std if std > 0 else 1.0)
            data.sub_(torch.tensor(means, dtype=torch.float32).view(1, -1, 1, 1))
            data.mul_(torch.tensor(inv, dtype=torch.float32).view(1, -1, 1, 1))
        self.data, self.horizon, self.batch_size = data, horizon, batch_size
        self.n = data.size(0) - horizon
        self.per_epoch = (self.n + batch_size - 1) // batch_size

    def prepare(self, plan):
        pass

    def batch(self, epoch, k):
        a, b = k * self.batch_size, min((k + 1) * self.batch_size, self.n)
        return [self.data[a:b], self.data[a + self.horizon:b + self.horizon]]
