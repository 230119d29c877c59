# The PyTorch (Python) peer of bellows' reference workloads W1..W7 (/work/shared/WORKLOADS.md): the same model
# (state_dict names and shapes equal to bellows' LibTorch module tree, so one safetensors file starts both),
# the same batches in the same order as `bellows train ... data.shuffle=false data.val_fraction=0` (W4: the same
# random flips), the same loss, AdamW on PyTorch's fused kernel with bellows' weight-decay grouping, gradient
# clipping and accumulation where the example config has them, and a constant learning rate.
#   peer.py --workload W1 --data features.csv --write-init init.safetensors      (seeded init, then exit)
#   peer.py --workload W1 --data features.csv --init init.safetensors --steps 50 --warmup 5 \
#           --mode eager|compile|reduce-overhead|max-autotune-no-cudagraphs --precision fp32|bf16-mixed \
#           --threads 2 --json out.json
#   peer.py --workload W3 --twin ...   the workload's host-bound twin (TWINS: W1, W3, W4, W5 shrunk until a step is
#                                      mostly launch and dispatch; bench/peers/host_twins.py)
# --mode compile is torch.compile's default mode; reduce-overhead and max-autotune-no-cudagraphs are torch.compile's
# modes of those names (reduce-overhead's CUDA graphs apply on CUDA only: on a CPU it compiles as the default does,
# without graphs). Every compiled mode reports compile_s apart from the steady state (see compile_seconds()).
# Random draws (W3's dropout, W5's timesteps and noise, W7's head dropout) come from the global CPU generator
# seeded with the run's seed (0) before the model is built, whose construction draws as bellows' does, in the
# order bellows draws them (src/app/run.cpp, src/models/ddpm.cpp), so eager runs give bellows' losses step for
# step (compiled runs draw dropout masks their own way). bench/peers/check.py compares the two.
# Data is read into memory before the timed steps; every step's loss is a host read (loss.item()).
# The pieces live beside this file: peer_models.py (models, losses), peer_gnn.py (W6's graph network), peer_data.py
# and peer_text.py (the data), peer_workloads.py (WORKLOADS, TWINS, FLOPs); `import peer` gives WORKLOADS and TWINS.
import time

_T_SCRIPT = time.perf_counter()  # the script's first line; startup_s counts from the process start (below)
_WALL_SCRIPT = time.time()

import os  # noqa: E402
import sys  # noqa: E402

if "--cold-compile" in sys.argv:  # before torch is imported: inductor reads it then
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

_IMPORT_S = time.perf_counter() - _T_SCRIPT

from peer_models import LINEAR, CppLinear, Objective  # noqa: E402
from peer_workloads import TWINS, W7_OPTIONS, WORKLOADS, flops_gnn, flops_text_pair  # noqa: E402

MODES = ("eager", "compile", "reduce-overhead", "max-autotune-no-cudagraphs")

# Names exempt from weight decay besides every tensor of <= 1 dimension: bellows' optim.no_decay default
# (src/app/schema.cpp, src/train/optimizer.cpp no_decay()).
NO_DECAY = ("bias", "norm", "bn", "ln")


def process_start_wall():
    """Wall-clock time at which this process started (Linux /proc), else the script's first line."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat; fields[0] is field 3 (state)
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _WALL_SCRIPT


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------


def make_optimizer(model, w, lr):
    """AdamW on the fused kernel; no decay on tensors of <= 1 dimension and on names containing NO_DECAY. Returns
    the optimizer and the parameters in bellows' order (the decay group, then the rest), the order its gradient
    norm is summed in."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (plain if p.dim() <= 1 or any(s in name for s in NO_DECAY) else decay).append(p)
    groups = [g for g in ({"params": decay, "weight_decay": w.weight_decay}, {"params": plain, "weight_decay": 0.0})
              if g["params"]]
    return torch.optim.AdamW(groups, lr=lr, betas=w.betas, eps=w.eps, fused=True), decay + plain


def step_plan(steps, per_epoch, accumulation):
    """(epoch, [batch indices]) per optimizer step, as Trainer::fit takes them: k micro-batches per step, fewer for
    the last step of an epoch (src/train/trainer.cpp: batches = min(k, remaining_in_epoch))."""
    plan, epoch = [], 0
    while len(plan) < steps:
        for first in range(0, per_epoch, accumulation):
            plan.append((epoch, list(range(first, min(first + accumulation, per_epoch)))))
            if len(plan) == steps:
                break
        epoch += 1
    return plan


def clip_grad_norm(params, max_norm):
    """torch.nn.utils.clip_grad_norm_ (foreach): the arithmetic of bellows' EagerStep::clip_gradients, which keeps
    the norm on the device (src/train/eager_step.cpp: linalg_vector_norm of the stacked per-tensor norms, then every
    gradient times min(max_norm / (norm + 1e-6), 1)). `params` in bellows' order, which the norm's sum follows."""
    return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)



def parse_args(argv):
    """The command line (see the file's header); the parser too, for its error()."""
    ap = argparse.ArgumentParser(description="PyTorch peer of bellows' workloads W1..W7 (see the file's header)")
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--data", required=True, help="the example's data file (or folder)")
    ap.add_argument("--write-init", metavar="FILE", help="save the seeded initial state_dict as safetensors and exit")
    ap.add_argument("--write-script", metavar="FILE", help="W1/W3: save the model as TorchScript (script; W3: trace) and exit")
    ap.add_argument("--init", metavar="FILE", help="start from these weights (safetensors, strict)")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=0, help="untimed optimizer steps before the timed ones")
    ap.add_argument("--mode", choices=MODES, default="eager",
                    help="eager; compile (torch.compile's default mode); reduce-overhead, max-autotune-no-cudagraphs "
                         "(torch.compile(mode=...))")
    ap.add_argument("--twin", action="store_true", help="the workload's host-bound twin (TWINS: W1, W3, W4, W5)")
    ap.add_argument("--cold-compile", action="store_true",
                    help="compile without inductor's on-disk caches (else a second run reuses the first's kernels)")
    ap.add_argument("--precision", choices=("fp32", "bf16-mixed"), default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=0, help="default: the workload's")
    ap.add_argument("--lr", type=float, default=0.0, help="default: the workload's")
    ap.add_argument("--seed", type=int, default=None, help="default: the workload's config seed (0)")
    ap.add_argument("--cpp-linear", action="store_true",
                    help="LibTorch's torch::nn::Linear forward (matmul + bias for 3-D inputs), as bellows' models used "
                         "before commit ed3a21b")
    ap.add_argument("--unfreeze-encoder", action="store_true", help="W7: train the encoder too (bellows: "
                    "model.freeze_encoder=false)")
    ap.add_argument("--tokenizer", help="W7: SentencePiece .model (default: DATA.spm-bpe-512.model, bellows' cache)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (scripts/gpu_check.sh runs the peers on a GPU)")
    ap.add_argument("--json", metavar="OUT", help="write the results here")
    ap.add_argument("--backends", choices=("bellows", "torch"), default="bellows",
                    help="CUDA library settings: bellows (what its plan sets for the precision: cuDNN benchmark on, TF32 off "
                         "under fp32; like with like) or torch (PyTorch's defaults: benchmark off, cuDNN TF32 on)")
    return ap, ap.parse_args(argv)


def set_backends(args, device):
    if device.type == "cuda" and args.backends == "bellows":
        # bellows' plan: cudnn_benchmark auto is on for CUDA (src/plan/plan.cpp); the fp32 policy turns TF32 off in
        # cuBLAS and cuDNN, bf16-mixed leaves both as PyTorch has them (src/precision/policies/).
        torch.backends.cudnn.benchmark = True
        if args.precision == "fp32":
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False


def choose_workload(ap, args):
    """The workload (or its twin) the arguments name, with the module-wide choices they make."""
    if args.twin and args.workload not in TWINS:
        ap.error(f"--twin: {args.workload} has no host-bound twin ({', '.join(sorted(TWINS))})")
    w = (TWINS if args.twin else WORKLOADS)[args.workload]
    if args.cpp_linear:
        LINEAR["cls"] = CppLinear
    W7_OPTIONS.update(frozen=not args.unfreeze_encoder, tokenizer=args.tokenizer)
    torch.set_num_threads(args.threads)
    return w


def write_script(model, args):
    """The same module for bellows' model.name: torchscript (bench/peers/run.py --scripted)."""
    if args.workload == "W1":
        scripted = torch.jit.script(model)
    elif args.workload == "W3":  # not scriptable as written (its optional mask and tensor attribute): traced
        scripted = torch.jit.trace(model, (torch.randn(2, 128, 16),), check_trace=False)
    else:
        sys.exit(f"--write-script: {args.workload} has no scripted form here (W1, W3)")
    scripted.save(args.write_script)
    print(f"{args.workload}: wrote {args.write_script}")


def write_init(model, args):
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, args.write_init)
    print(f"{args.workload}: wrote {len(model.state_dict())} tensors to {args.write_init}")


def place_model(model, w, args, device):
    """The initial weights loaded (strict), training mode, on the device; channels_last where the workload uses it."""
    if args.init:
        model.load_state_dict(load_file(args.init), strict=True)  # raises on a mismatch
    model.train()
    model.to(device)
    for m in model.modules():  # the sinusoidal table is no buffer (not in the state_dict): moved once, as bellows does
        if getattr(m, "sinusoid", None) is not None:
            m.sinusoid = m.sinusoid.to(device)
    if w.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def compiled(objective, mode):
    if mode == "eager":
        return objective
    if mode == "compile":
        return torch.compile(objective)
    return torch.compile(objective, mode=mode)


def make_train_step(model, w, data, args, device, lr):
    """One optimizer step over its micro-batches: (the mean of their losses, samples)."""
    step_fn = compiled(Objective(model, w.kind), args.mode)
    # reduce-overhead on CUDA: CUDA graph trees; each forward starts a new generation (the previous step's outputs,
    # the loss, have been read or copied by then). On a CPU the mode compiles without graphs.
    mark_step = args.mode == "reduce-overhead"
    optimizer, params = make_optimizer(model, w, lr)
    bf16 = args.precision == "bf16-mixed"

    def train_step(epoch, batches):
        loss_sum, samples = None, 0
        for k in batches:
            tensors = data.batch(epoch, k)
            if device.type != "cpu":
                tensors = tuple(t.to(device, non_blocking=True) if torch.is_tensor(t) else t for t in tensors)
            if w.kind == "ddpm":  # DdpmTask::step's draws, in its order, on the global generator, outside autocast
                context, x0 = tensors
                t = torch.randint(0, model.steps, (x0.size(0),), dtype=torch.long, device=x0.device)
                noise = torch.randn_like(x0)
                tensors = (x0, context, t, noise)
            if mark_step:
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = step_fn(*tensors)
            (loss / float(len(batches)) if len(batches) > 1 else loss).backward()
            loss = loss.detach().to(torch.float32)
            loss_sum = loss.clone() if loss_sum is None else loss_sum + loss
            samples += tensors[0].size(0)
        if w.clip_max_norm > 0:
            clip_grad_norm(params, w.clip_max_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss_sum.item() / len(batches), samples  # the step's record: the mean of its micro-batch losses

    return train_step


def run_steps(plan, train_step, warmup):
    """Every step of the plan, each timed: losses, the timed steps' times and samples, every step's time, the first
    step's time and the process's age at its end."""
    r = {"losses": [], "times": [], "samples": [], "all_times": [], "first_step_s": None, "startup_s": None}
    for k, (epoch, batches) in enumerate(plan):
        t0 = time.perf_counter()
        loss, n = train_step(epoch, batches)
        dt = time.perf_counter() - t0
        if k == 0:
            r["first_step_s"] = dt
            r["startup_s"] = time.time() - process_start_wall()
        r["losses"].append(loss)
        r["all_times"].append(dt)
        if k >= warmup:
            r["times"].append(dt)
            r["samples"].append(n)
    return r


def compile_seconds(r, args):
    # Compilation (and, under reduce-overhead on CUDA, the graphs' warm-up and capture, which take the first two or
    # three calls) happens in the first steps: compile_s is what the warm-up steps (the first step when --warmup is
    # 0) took beyond as many steady-state steps (the median timed step), for every compiled mode; None for eager.
    warm = r["all_times"][:max(args.warmup, 1)]
    steady = statistics.median(r["times"]) if r["times"] else 0.0
    return max(0.0, sum(warm) - len(warm) * steady) if args.mode != "eager" and warm else None


def flops_per_sample(args, w, model, data, plan):
    if args.workload == "W6":
        return flops_gnn(model.graph, model.in_channels, model.out_channels, model.latent, len(model.processor))
    if args.workload == "W7":  # the mean over the timed steps' samples, each at its batch's padded length
        per = [(data.batch(e, k)[0].size(1), data.batch(e, k)[0].size(0)) for e, ks in plan[args.warmup:] for k in ks]
        return (sum(flops_text_pair(t, frozen=model.frozen()) * n for t, n in per) / max(1, sum(n for _, n in per)))
    return w.flops(data) if callable(w.flops) else w.flops


def result_record(args, w, device, batch_size, lr, r, compile_s, flops):
    """What --json writes."""
    times, timed_s = r["times"], sum(r["times"])
    return {
        "workload": args.workload, "name": w.name, "system": f"pytorch-{args.mode}", "mode": args.mode,
        "twin": args.twin, "compiled": args.mode != "eager",
        "cudagraphs": args.mode == "reduce-overhead" and device.type == "cuda",
        "precision": args.precision, "threads": args.threads, "device": str(device), "cpp_linear": args.cpp_linear,
        "backends": args.backends, "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "batch_size": batch_size, "accumulation": w.accumulation, "lr": lr,
        "steps": args.steps, "warmup": args.warmup, "losses": r["losses"],
        "samples_per_s": sum(r["samples"]) / timed_s if timed_s > 0 else None,
        "step_ms": 1000 * statistics.median(times) if times else None,
        "step_ms_all": [1000 * t for t in times],
        "first_step_s": r["first_step_s"], "startup_s": r["startup_s"], "import_s": _IMPORT_S,
        "warmup_s": sum(r["all_times"][:args.warmup]), "compile_s": compile_s,
        "flops_per_sample": flops, "torch": torch.__version__, "data": os.path.abspath(args.data),
    }


def report(args, result):
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    losses, compile_s = result["losses"], result["compile_s"]
    print(f"{args.workload} {args.mode} {args.precision}: {len(losses)} steps, loss {losses[0]:.6g} -> {losses[-1]:.6g}, "
          f"{result['samples_per_s'] or 0:.1f} samples/s, median step {result['step_ms'] or 0:.2f} ms, "
          f"first step {result['first_step_s']:.3f} s, startup {result['startup_s']:.2f} s"
          + (f", compile {compile_s:.2f} s" if compile_s is not None else ""))


def main(argv=None):
    ap, args = parse_args(argv)
    device = torch.device(args.device)
    set_backends(args, device)
    w = choose_workload(ap, args)
    batch_size = args.batch_size or w.batch_size
    lr = args.lr or w.lr
    seed = w.seed if args.seed is None else args.seed

    # --- the model, built right after seeding as bellows does (src/app/run.cpp: manual_seed, data, model) ---
    torch.manual_seed(seed)
    model = w.build(args.data)
    if args.write_script:
        write_script(model, args)
        return 0
    if args.write_init:
        write_init(model, args)
        return 0
    model = place_model(model, w, args, device)

    # --- the batches of every step, in memory before timing; then the steps ---
    total = args.warmup + args.steps
    data = w.load(args.data, batch_size, total * w.accumulation)
    plan = step_plan(total, data.per_epoch, w.accumulation)
    data.prepare([(epoch, k) for epoch, ks in plan for k in ks])
    r = run_steps(plan, make_train_step(model, w, data, args, device, lr), args.warmup)

    flops = flops_per_sample(args, w, model, data, plan)
    report(args, result_record(args, w, device, batch_size, lr, r, compile_seconds(r, args), flops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
