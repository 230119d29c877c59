"""What each optimizer step costs on the host and the device, per step, for bellows and the PyTorch peer alike.

Both sides are reduced from a Chrome trace of LibTorch's Kineto profiler (bellows' `bellows train ... --profile
N-M` writes <run dir>/trace.json; the peer runs here under torch.profiler, its trace exported the same way), by
the same code:
  - a step ends where its optimizer ends: bellows' `bellows::optimizer` scope, PyTorch's `Optimizer.step#...`
    record_function (torch.optim); step k runs from the end of step k-1's optimizer to the end of its own (what
    follows an optimizer, e.g. the peer's loss.item() and zero_grad, counts in the next step). Where the trace has
    no step k-1, step k starts at the trace's first event (marked partial);
  - CPU events (operators, user scopes, CUDA runtime and driver calls) belong to the step their start falls in,
    on every thread (the autograd engine's device threads and data loaders too); device events (kernels, memcpys,
    memsets) to the step of the runtime call that launched them (their correlation id), else by their start;
  - per step: the host time (the step's wall time on the CPU), aten::* operators (as kernel_census.py counts them),
    kernels, launch calls, memcpys by kind (host-to-device from pageable or pinned memory, device-to-host,
    device-to-device) with bytes, memsets, synchronisations (cudaStreamSynchronize, cudaEventSynchronize,
    cudaDeviceSynchronize and the driver's equivalents, by name), implicit synchronisations (a synchronous
    cudaMemcpy/cudaMemset, or a cudaMemcpyAsync into pageable host memory, that the same thread does not follow by
    an explicit synchronisation: those the host waits on without a synchronisation call), the host time spent in
    synchronisation calls, host reads of a tensor's scalar (aten::_local_scalar_dense: .item(), a bool of a
    tensor), the device's busy time and its idle time between the step's first device activity and its last.
On a CPU-only run the device columns are 0; host time and operator counts keep their meaning.

  step_profile.py trace TRACE.json --first-step 20 --steps 21-25 [--system bellows] [--json OUT]
        (--first-step: the number of the first optimizer step in the trace; `--profile 20-25` traces steps 20-25)
  step_profile.py peer --steps 21-25 [--save-trace TRACE.json] [--json OUT] -- <peer.py arguments>
        (the peer from its first step under torch.profiler: --warmup + --steps must reach the last step)
  step_profile.py table OUT_PREFIX WORKLOAD BELLOWS.json PYTORCH.json [WORKLOAD BELLOWS.json PYTORCH.json ...]
        (writes OUT_PREFIX.md and OUT_PREFIX.json and prints the markdown; a missing file gives empty columns)
"""
import json
import os
import runpy
import sys

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")
EXPLICIT_SYNCS = {"cudaStreamSynchronize": "stream", "cuStreamSynchronize": "stream",
                  "cudaEventSynchronize": "event", "cuEventSynchronize": "event",
                  "cudaDeviceSynchronize": "device", "cuCtxSynchronize": "device"}
MEMCPY_KINDS = ("HtoD pageable", "HtoD pinned", "DtoH", "DtoD", "other")


def is_optimizer(e):
    name = e.get("name", "")
    return e.get("cat") != "gpu_user_annotation" and (name == "bellows::optimizer" or name.startswith("Optimizer.step#"))


def memcpy_kind(name):
    """Kineto names copies "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)", ..."""
    if "HtoD" in name:
        return "HtoD pinned" if "Pinned" in name else "HtoD pageable"
    if "DtoH" in name:
        return "DtoH"
    if "DtoD" in name:
        return "DtoD"
    return "other"


def load(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return [e for e in events if e.get("ph") == "X" and "ts" in e]


def union_ms(intervals):
    busy, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return busy / 1000.0


def step_bounds(opt_ends, trace_start, first_in_trace, first, last, source):
    """(step, start, end] per step first..last, and the steps without their previous optimizer in the trace."""
    need = last - first_in_trace + 1
    if len(opt_ends) < need:
        raise SystemExit(f"step_profile: {source}: {len(opt_ends)} optimizer steps in the trace (from step {first_in_trace}), "
                         f"step {last} needs {need}")
    bounds, partial = [], set()  # (start, end] per step
    for k in range(first, last + 1):
        i = k - first_in_trace
        if i < 0:
            raise SystemExit(f"step_profile: {source}: step {k} is before the trace's first step {first_in_trace}")
        start = opt_ends[i - 1] if i >= 1 else trace_start
        if i == 0:
            partial.add(k)
        bounds.append((k, start, opt_ends[i]))
    return bounds, partial


def step_finder(bounds):
    """The step a timestamp falls in, or None."""
    def step_of(ts):
        for k, s, e in bounds:
            if s < ts <= e:
                return k
        return None
    return step_of


def empty_row(k, partial, s, e):
    return {"step": k, "partial": k in partial, "host_ms": (e - s) / 1000.0, "aten_ops": 0, "cpu_ops": 0, "kernels": 0,
            "launches": 0, "memcpy": {m: {"count": 0, "bytes": 0} for m in MEMCPY_KINDS}, "memsets": 0,
            "syncs": {"stream": 0, "event": 0, "device": 0}, "implicit_syncs": 0, "sync_wait_ms": 0.0,
            "scalar_reads": 0, "gpu_busy_ms": 0.0, "gpu_idle_ms": 0.0, "gpu_span_ms": 0.0, "threads": set()}


def count_host_events(host, rows, step_of):
    """Operators, launches and synchronisations per step; returns the step of each runtime call's correlation id
    and the runtime calls per thread."""
    by_correlation, runtime_by_thread = {}, {}
    for e in host:
        ts = float(e["ts"])
        k = step_of(ts)
        cat, name = e.get("cat"), e.get("name", "")
        if cat in ("cuda_runtime", "cuda_driver"):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                by_correlation[corr] = k
            runtime_by_thread.setdefault(e.get("tid"), []).append(e)
        if k is None:
            continue
        r = rows[k]
        r["threads"].add(e.get("tid"))
        if cat == "cpu_op":
            r["cpu_ops"] += 1
            if name.startswith("aten::"):
                r["aten_ops"] += 1
            if name == "aten::_local_scalar_dense":
                r["scalar_reads"] += 1
        elif cat in ("cuda_runtime", "cuda_driver"):
            if "LaunchKernel" in name or name in ("cudaGraphLaunch", "cuGraphLaunch", "cudaLaunchCooperativeKernel"):
                r["launches"] += 1
            if name in EXPLICIT_SYNCS:
                r["syncs"][EXPLICIT_SYNCS[name]] += 1
                r["sync_wait_ms"] += float(e.get("dur", 0)) / 1000.0
    return by_correlation, runtime_by_thread


def count_device_events(device, rows, step_of, by_correlation):
    """Kernels, copies and memsets per step; returns the correlation ids of device-to-host copies into pageable
    memory and each step's device intervals."""
    pageable_d2h = set()
    intervals = {k: [] for k in rows}
    for e in device:
        args = e.get("args") or {}
        corr = args.get("correlation")
        k = by_correlation.get(corr) if corr in by_correlation else step_of(float(e["ts"]))
        if e.get("cat") == "gpu_memcpy" and "DtoH" in e.get("name", "") and "Pageable" in e.get("name", ""):
            pageable_d2h.add(corr)
        if k is None:
            continue
        r = rows[k]
        cat = e.get("cat")
        if cat == "kernel":
            r["kernels"] += 1
        elif cat == "gpu_memcpy":
            m = r["memcpy"][memcpy_kind(e.get("name", ""))]
            m["count"] += 1
            m["bytes"] += int(args.get("bytes", 0) or 0)
        else:
            r["memsets"] += 1
        intervals[k].append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    return pageable_d2h, intervals


def count_implicit_syncs(runtime_by_thread, rows, step_of, pageable_d2h):
    """The host waits in the call itself, with no synchronisation call after it."""
    for calls in runtime_by_thread.values():
        calls.sort(key=lambda e: float(e["ts"]))
        for i, e in enumerate(calls):
            name = e.get("name", "")
            corr = (e.get("args") or {}).get("correlation")
            blocking = name in ("cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2") or (
                name == "cudaMemcpyAsync" and corr in pageable_d2h)
            if not blocking:
                continue
            following = calls[i + 1].get("name", "") if i + 1 < len(calls) else ""
            k = step_of(float(e["ts"]))
            if k is not None and following not in EXPLICIT_SYNCS:
                rows[k]["implicit_syncs"] += 1


def mean_row(full):
    """The mean of the steps' rows."""
    mean = {}
    for key in ("host_ms", "aten_ops", "cpu_ops", "kernels", "launches", "memsets", "implicit_syncs", "sync_wait_ms",
                "scalar_reads", "gpu_busy_ms", "gpu_idle_ms", "gpu_span_ms", "threads"):
        mean[key] = sum(r[key] for r in full) / len(full)
    mean["syncs"] = {s: sum(r["syncs"][s] for r in full) / len(full) for s in ("stream", "event", "device")}
    mean["memcpy"] = {m: {"count": sum(r["memcpy"][m]["count"] for r in full) / len(full),
                          "bytes": sum(r["memcpy"][m]["bytes"] for r in full) / len(full)} for m in MEMCPY_KINDS}
    return mean


def reduce_trace(events, first_in_trace, first, last, system, source):
    """Per step first..last: see the file's header. first_in_trace: the number of the trace's first optimizer."""
    opt_ends = sorted(float(e["ts"]) + float(e.get("dur", 0)) for e in events if is_optimizer(e))
    host = [e for e in events if e.get("cat") in HOST_CATS]
    if not host:
        raise SystemExit(f"step_profile: {source}: no CPU events")
    trace_start = min(float(e["ts"]) for e in host)
    bounds, partial = step_bounds(opt_ends, trace_start, first_in_trace, first, last, source)
    step_of = step_finder(bounds)
    rows = {k: empty_row(k, partial, s, e) for k, s, e in bounds}
    by_correlation, runtime_by_thread = count_host_events(host, rows, step_of)
    device = [e for e in events if e.get("cat") in DEVICE_CATS]
    pageable_d2h, intervals = count_device_events(device, rows, step_of, by_correlation)
    count_implicit_syncs(runtime_by_thread, rows, step_of, pageable_d2h)
    for k, iv in intervals.items():
        if iv:
            span = (max(e for _, e in iv) - min(s for s, _ in iv)) / 1000.0
            busy = union_ms(iv)
            rows[k].update(gpu_busy_ms=busy, gpu_span_ms=span, gpu_idle_ms=max(0.0, span - busy))
    steps = []
    for k in sorted(rows):
        r = rows[k]
        r["threads"] = len(r["threads"])
        steps.append(r)
    full = [r for r in steps if not r["partial"]] or steps
    cuda = any(e.get("cat") in ("cuda_runtime", "cuda_driver") for e in host) or bool(device)
    return {"system": system, "source": os.path.abspath(source), "steps_reported": [first, last],
            "first_step_in_trace": first_in_trace, "cuda_activity": cuda, "mean_over": [r["step"] for r in full],
            "mean": mean_row(full), "steps": steps}


def parse_range(text):
    a, _, b = text.partition("-")
    return int(a), int(b or a)


def write(result, path):
    text = json.dumps(result, indent=1)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
        m = result["mean"]
        print(f"step_profile: {result['system']} steps {result['mean_over'][0]}-{result['mean_over'][-1]}: per step "
              f"{m['host_ms']:.2f} ms host, {m['aten_ops']:.0f} aten ops, {m['kernels']:.0f} kernels, "
              f"{sum(m['syncs'].values()):.0f} syncs; {path}", flush=True)
    else:
        print(text)


def option(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def cmd_trace(args):
    first, last = parse_range(option(args, "--steps"))
    events = load(args[0])
    result = reduce_trace(events, int(option(args, "--first-step", first)), first, last, option(args, "--system", "bellows"),
                          args[0])
    write(result, option(args, "--json"))
    return 0


def cmd_peer(args):
    ours, peer_args = args[:args.index("--")], args[args.index("--") + 1:]
    first, last = parse_range(option(ours, "--steps"))
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if option(peer_args, "--device", "cpu").startswith("cuda") and torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    trace = option(ours, "--save-trace") or (option(ours, "--json", "step_profile") + ".trace.json")
    sys.argv = ["peer.py"] + peer_args
    with profile(activities=activities) as prof:
        try:
            runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer.py"), run_name="__main__")
        except SystemExit as e:  # the peer ends with sys.exit(main())
            if e.code not in (None, 0):
                raise
        if torch.cuda.is_available() and len(activities) > 1:
            torch.cuda.synchronize()
    prof.export_chrome_trace(trace)
    result = reduce_trace(load(trace), 1, first, last, "pytorch", trace)
    result["peer_args"] = peer_args
    write(result, option(ours, "--json"))
    return 0


COLUMNS = [  # (header, function of a step row or the mean)
    ("host ms", lambda r: f"{r['host_ms']:.2f}"),
    ("aten ops", lambda r: f"{r['aten_ops']:.0f}"),
    ("kernels", lambda r: f"{r['kernels']:.0f}"),
    ("launch calls", lambda r: f"{r['launches']:.0f}"),
    ("HtoD pageable n / bytes", lambda r: memcpy_cell(r, "HtoD pageable")),
    ("HtoD pinned n / bytes", lambda r: memcpy_cell(r, "HtoD pinned")),
    ("DtoH n / bytes", lambda r: memcpy_cell(r, "DtoH")),
    ("DtoD n / bytes", lambda r: memcpy_cell(r, "DtoD")),
    ("memsets", lambda r: f"{r['memsets']:.0f}"),
    ("syncs stream / event / device", lambda r: " / ".join(f"{r['syncs'][s]:.0f}" for s in ("stream", "event", "device"))),
    ("implicit syncs", lambda r: f"{r['implicit_syncs']:.0f}"),
    ("ms in syncs", lambda r: f"{r['sync_wait_ms']:.2f}"),
    ("scalar reads", lambda r: f"{r['scalar_reads']:.0f}"),
    ("GPU busy ms", lambda r: f"{r['gpu_busy_ms']:.2f}"),
    ("GPU idle ms (between kernels)", lambda r: f"{r['gpu_idle_ms']:.2f}"),
]


def memcpy_cell(r, kind):
    m = r["memcpy"][kind]
    return f"{m['count']:.0f} / {m['bytes']:,.0f}" if m["count"] else "0"


def cmd_table(args):
    prefix, rest = args[0], args[1:]
    if not rest or len(rest) % 3:
        raise SystemExit(__doc__)
    loaded = []
    for i in range(0, len(rest), 3):
        w, paths = rest[i], rest[i + 1:i + 3]
        sides = []
        for label, p in zip(("bellows", "PyTorch"), paths):
            try:
                with open(p) as f:
                    sides.append((label, json.load(f)))
            except (OSError, ValueError):
                sides.append((label, None))
        loaded.append((w, sides))
    header = ["metric (mean per step)"] + [f"{w} {label}" for w, sides in loaded for label, _ in sides]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, fn in COLUMNS:
        cells = [fn(d["mean"]) if d else "" for _, sides in loaded for _, d in sides]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    any_doc = next((d for _, sides in loaded for _, d in sides if d), None)
    notes = []
    for w, sides in loaded:
        for label, d in sides:
            if d:
                notes.append(f"{w} {label}: steps {d['mean_over'][0]}-{d['mean_over'][-1]}"
                             f"{'' if d['cuda_activity'] else ' (no CUDA activity in the trace)'}")
            else:
                notes.append(f"{w} {label}: no result")
    lines += ["", "; ".join(notes) + "." if notes else ""]
    lines += ["", "Per step:", ""]
    head = ["workload", "system", "step"] + [n for n, _ in COLUMNS]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w, sides in loaded:
        for label, d in sides:
            for r in (d["steps"] if d else []):
                step = f"{r['step']}{' (partial)' if r['partial'] else ''}"
                lines.append(f"| {w} | {label} | {step} | " + " | ".join(fn(r) for _, fn in COLUMNS) + " |")
    text = "\n".join(lines) + "\n"
    with open(prefix + ".md", "w") as f:
        f.write(text)
    with open(prefix + ".json", "w") as f:
        json.dump({w: {label: d for label, d in sides} for w, sides in loaded}, f, indent=1)
    print(text)
    print(f"step_profile: {prefix}.md, {prefix}.json: {sum(1 for _, sides in loaded for _, d in sides if d)} of "
          f"{2 * len(loaded)} results")
    return 0 if any_doc else 1


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "trace" and "--steps" in sys.argv:
        sys.exit(cmd_trace(sys.argv[2:]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "peer" and "--" in sys.argv and "--steps" in sys.argv:
        sys.exit(cmd_peer(sys.argv[2:]))
    elif len(sys.argv) >= 5 and sys.argv[1] == "table":
        sys.exit(cmd_table(sys.argv[2:]))
    else:
        sys.exit(__doc__)
