"""Writes small netCDF files through the netCDF C library that bellows links (libnetcdf, with ctypes: no Python netCDF
package), for make_corpus.py's NetCDF seeds."""
import ctypes
import ctypes.util

import numpy as np

NC_NOWRITE, NC_CLOBBER, NC_64BIT_OFFSET, NC_64BIT_DATA, NC_NETCDF4 = 0, 0, 0x0200, 0x0020, 0x1000
NC_BYTE, NC_CHAR, NC_SHORT, NC_INT, NC_FLOAT, NC_DOUBLE, NC_UBYTE, NC_USHORT = 1, 2, 3, 4, 5, 6, 7, 8
NC_UNLIMITED = 0
PUT_VARA = {np.dtype("f4"): "nc_put_vara_float", np.dtype("f8"): "nc_put_vara_double",
            np.dtype("i2"): "nc_put_vara_short", np.dtype("i4"): "nc_put_vara_int",
            np.dtype("i1"): "nc_put_vara_schar", np.dtype("u1"): "nc_put_vara_uchar",
            np.dtype("u2"): "nc_put_vara_ushort"}


class NetCDF:
    def __init__(self):
        self.lib = ctypes.CDLL(ctypes.util.find_library("netcdf") or "libnetcdf.so")
        self.lib.nc_strerror.restype = ctypes.c_char_p

    def ok(self, status, what):
        if status != 0:
            raise OSError(f"netCDF: {what}: {self.lib.nc_strerror(status).decode()}")

    def write(self, path, cmode, dims, variables):
        """dims: [(name, length)] (0: unlimited, length from the data); variables: [(name, nc_type, dim names,
        numpy array in that dim order, {attribute: (nc_type, [values])})]."""
        L = self.lib
        ncid = ctypes.c_int()
        self.ok(L.nc_create(path.encode(), ctypes.c_int(NC_CLOBBER | cmode), ctypes.byref(ncid)), "create")
        dimids = {}
        for name, length in dims:
            d = ctypes.c_int()
            self.ok(L.nc_def_dim(ncid, name.encode(), ctypes.c_size_t(length), ctypes.byref(d)), f"dim {name}")
            dimids[name] = d.value
        varids = {}
        for name, xtype, dnames, _, atts in variables:
            ids = (ctypes.c_int * max(1, len(dnames)))(*[dimids[n] for n in dnames])
            v = ctypes.c_int()
            self.ok(L.nc_def_var(ncid, name.encode(), ctypes.c_int(xtype), ctypes.c_int(len(dnames)), ids, ctypes.byref(v)),
                    f"var {name}")
            varids[name] = v.value
            for att, (atype, values) in atts.items():
                buf = (ctypes.c_double * len(values))(*values)
                self.ok(L.nc_put_att_double(ncid, v, att.encode(), ctypes.c_int(atype), ctypes.c_size_t(len(values)), buf),
                        f"att {name}:{att}")
        self.ok(L.nc_enddef(ncid), "enddef")
        for name, _, dnames, arr, _ in variables:
            arr = np.ascontiguousarray(arr)
            start = (ctypes.c_size_t * max(1, arr.ndim))(*([0] * arr.ndim))
            count = (ctypes.c_size_t * max(1, arr.ndim))(*arr.shape)
            fn = getattr(L, PUT_VARA[arr.dtype])
            self.ok(fn(ncid, ctypes.c_int(varids[name]), start, count, arr.ctypes.data_as(ctypes.c_void_p)), f"put {name}")
        self.ok(L.nc_close(ncid), "close")
