"""How much each side launches per optimizer step: CPU operators (aten::*) and device kernels, per name.

Host-bound GPU steps (small models) cost about a launch per kernel, so the counts explain a gap in eager speed
between bellows and PyTorch where FLOPs do not.

  python kernel_census.py peer  -- <peer.py arguments>   # PyTorch: the peer under torch.profiler, its timed steps
  python kernel_census.py trace TRACE.json STEPS           # bellows: a `bellows train --profile N-M` trace (M-N+1 steps)

Prints one JSON object: steps, ops and kernels per step, and the 15 commonest of each.
"""
import collections
import json
import os
import runpy
import sys


def summarize(names_ops, names_kernels, steps):
    ops, kernels = collections.Counter(names_ops), collections.Counter(names_kernels)
    return {"steps": steps, "ops_per_step": sum(ops.values()) / steps, "kernels_per_step": sum(kernels.values()) / steps,
            "top_ops": [[n, c / steps] for n, c in ops.most_common(15)],
            "top_kernels": [[n[:80], c / steps] for n, c in kernels.most_common(15)]}


def from_trace(path, steps):
    events = json.load(open(path))
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    ops = [e["name"] for e in events if e.get("cat") == "cpu_op" and e.get("name", "").startswith("aten::")]
    kernels = [e["name"] for e in events if e.get("cat") == "kernel"]
    return summarize(ops, kernels, steps)


def from_peer(args):
    import torch
    from torch.profiler import ProfilerActivity, profile

    steps = int(args[args.index("--steps") + 1]) + int(args[args.index("--warmup") + 1] if "--warmup" in args else 0)
    sys.argv = ["peer.py"] + args
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        try:
            runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer.py"), run_name="__main__")
        except SystemExit as e:  # the peer ends with sys.exit(main())
            if e.code not in (None, 0):
                raise
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    ops = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith("aten::")]
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return summarize(ops, kernels, steps)  # every step the peer ran (warm-up and timed): data loading outside them


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "peer" and "--" in sys.argv:
        print(json.dumps(from_peer(sys.argv[sys.argv.index("--") + 1:])))
    elif len(sys.argv) == 4 and sys.argv[1] == "trace":
        print(json.dumps(from_trace(sys.argv[2], int(sys.argv[3]))))
    else:
        sys.exit(__doc__)
