#!/usr/bin/env bash
# The prepared GPU check (docs/gpu.md): everything bellows does on a GPU, in one bounded command, from the bundle
# that scripts/gpu_bundle.sh makes (no compiling on the GPU node) or from a build.
#   scripts/gpu_check.sh OUT_DIR [--bundle DIR | --bin DIR] [--budget-s 330] [--steps 40] [--device cuda]
#                        [--only GROUP,...] [--precisions fp32,bf16-mixed,fp16-mixed,tf32 (step 3's)]
#                        [--workloads W5,W3,W4,W1,W2,W6,W7] [--peer-precisions fp32,bf16-mixed]
#                        [--peer-modes eager,compile,reduce-overhead,max-autotune-no-cudagraphs] (steps 6 and 8)
# (--device cpu runs the same steps on the CPU: a check of the script itself, not of a GPU.)
# OUT_DIR receives every log, run folder and the summary (summary.md, results.json); the summary is also printed.
# Steps, each bounded by `timeout` and by what is left of --budget-s (a step that would start with too little left
# is recorded as skipped, so the check ends inside its budget with whatever it measured):
#   1. the machine: nvidia-smi, the node's PyTorch, `bellows hw`
#   2. `bellows selftest --device cuda --json`
#   3. W5, W3, W4 (the examples' configs on their --quick data, --steps optimizer steps) in fp32, bf16-mixed,
#      fp16-mixed and tf32, each with compile: off and compile: cuda_graph: samples/s over the last logged window,
#      peak memory, final loss, what the plan chose for precision and compile, the messages (fallbacks and reasons)
#   4. DDP over NCCL with one rank (`bellows launch -n 1`), two ranks when the node has two GPUs; zero1 over NCCL with
#      one rank, its checkpoint resumed under ddp; online training as one rank of a job over NCCL (bellows_online_job:
#      the C API's bellows_create_job); on a one-GPU node two ranks over Gloo on that GPU, ddp and zero1
#   5. the batch-size finder on the GPU (data.batch_size: auto); an injected out-of-memory step: W4 with batches of 64
#      under gpu_memory_limit_mb=450 (a step of 32 peaks at about 372 MB there): the first step runs out of memory on
#      the device and the run goes on in micro-batches (passes only when the log says so and the run finishes)
#   7. a user's TorchScript model (examples/own-model: model.py scripts it with the node's PyTorch) in bf16-mixed,
#      eager and as whole-step CUDA graphs; W3's Transformer traced on the CPU (peer.py --write-script) in fp32 and
#      bf16-mixed, eager and as graphs
#   8. profile: a profiler trace with CUDA activity of W3 and W4 (fp32, eager, the examples' configs, constant
#      learning rate): bellows' steps 20-25 (`bellows train --profile 20-25`) and the PyTorch peer's (peer.py under
#      torch.profiler, bench/peers/step_profile.py peer), both reduced by bench/peers/step_profile.py to one table per
#      optimizer step 21-25: host time, aten ops, kernels, memcpys by kind, synchronisations, GPU idle time
#      (profile.md, profile.json, and in summary.md)
#   6. peers: PyTorch on the same device (bench/peers/peer.py --device) for every workload of --workloads
#      (W5,W3,W4,W1,W2,W6,W7), in each of --peer-precisions (fp32,bf16-mixed) and --peer-modes (eager, compile,
#      reduce-overhead, max-autotune-no-cudagraphs), beside bellows eager (compile: off) and bellows' default (no
#      compile key: what its plan picks), all from one initial-weights file (peer.py --write-init) on the same batches
#      (data.shuffle=false, data.val_fraction=0, constant learning rate); first per workload an agreement step: eager
#      PyTorch's first 10 losses against bellows' (10 steps, logged every step) within check.py's tolerance. Order:
#      per workload init, eager peer, agreement; bellows' runs; the other precisions' eager runs; then per mode (the
#      compilers, cheapest first) every precision and workload. compile_s (the peer's compilation) apart from
#      samples/s of the timed steps. The peers table in summary.md has a column per mode and "bellows default / best
#      PyTorch mode".
# --only GROUP,... runs some of: machine, selftest, workloads, ddp, finder, oom, scripted, profile, peers (the data is
# made when needed). --workloads W3,W5 restricts the peers and profile groups to those workloads (in that order).
# LibTorch comes from the node's PyTorch (`python3 -c 'import torch'`, or $BELLOWS_CHECK_PYTHON): its lib folder
# and the NVIDIA libraries beside it go on LD_LIBRARY_PATH, so a bundle built against the same torch version runs.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="" bundle="" bin="" budget=330 steps=40 device=cuda only=machine,selftest,workloads,ddp,finder,oom,scripted,profile,peers
precisions="fp32 bf16-mixed fp16-mixed tf32"
peer_workloads="W5 W3 W4 W1 W2 W6 W7" workloads_given=0 peer_precisions="fp32 bf16-mixed"
peer_modes="eager compile reduce-overhead max-autotune-no-cudagraphs"
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --budget-s) budget="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --precisions) precisions="${2//,/ }"; shift 2 ;;
    --workloads) peer_workloads="${2//,/ }"; workloads_given=1; shift 2 ;;
    --peer-precisions) peer_precisions="${2//,/ }"; shift 2 ;;
    --peer-modes) peer_modes="${2//,/ }"; shift 2 ;;
    -*) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "gpu_check: one OUT_DIR only" >&2; exit 2; }; out="$1"; shift ;;
  esac
done
[ -n "$out" ] || { echo "usage: scripts/gpu_check.sh OUT_DIR [--bundle DIR | --bin DIR] [--budget-s S] [--steps N]" >&2; exit 2; }
if [ -z "$bin" ]; then
  if [ -z "$bundle" ] && [ -x "$here/.gpu-bundle/bin/bellows" ]; then bundle="$here/.gpu-bundle"; fi
  if [ -n "$bundle" ]; then bin="$bundle/bin"; else bin="$here/build/bin"; fi
fi
[ -x "$bin/bellows" ] || { echo "gpu_check: no bellows in $bin (scripts/gpu_bundle.sh makes a bundle)" >&2; exit 2; }
bin="$(cd "$bin" && pwd)"
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
python="${BELLOWS_CHECK_PYTHON:-python3}"
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }

# LibTorch and the CUDA libraries of the node's PyTorch.
torch_libs=$("$python" - <<'PY'
import glob, os, torch
lib = os.path.join(os.path.dirname(torch.__file__), "lib")
site = os.path.dirname(os.path.dirname(torch.__file__))
print(":".join([lib] + sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))))  # as the bundle's env.sh
PY
) || { echo "gpu_check: $python cannot import torch" >&2; exit 2; }
export LD_LIBRARY_PATH="$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export BELLOWS_CACHE="$out/cache"
results="$out/results.tsv"
printf 'step\tstatus\tseconds\tdetail\n' >"$results"

# step NAME LIMIT_S CMD...: runs CMD with output to OUT/NAME.log, at most LIMIT_S seconds and what the budget has
# left; records status (pass, fail N, timeout, skipped) and seconds.
step() {
  local name="$1" limit="$2"; shift 2
  local remaining; remaining=$(left)
  if [ "$remaining" -lt 10 ]; then
    printf '%s\tskipped\t0\tbudget spent\n' "$name" >>"$results"; return 1
  fi
  [ "$limit" -le "$remaining" ] || limit="$remaining"
  local t0; t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local secs; secs=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')" 2>/dev/null || echo "?")
  local status=pass
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status="timeout ${limit}s"; elif [ $rc -ne 0 ]; then status="fail $rc"; fi
  local detail; detail=$(grep -v '^\s*$' "$out/$name.log" | tail -1 | tr '\t' ' ' | cut -c1-200)
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$secs" "$detail" >>"$results"
  echo "[gpu_check] $name: $status (${secs}s)" >&2
  return $rc
}

wants() { [[ ",$only," == *",$1,"* ]]; }
# 1. The machine.
{ nvidia-smi; echo; "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), torch.cuda.get_device_name(0))'; uname -a; nproc; } >"$out/machine.txt" 2>&1
if wants machine; then
  step hw 60 "$bin/bellows" hw
  "$bin/bellows" hw --json >"$out/hw.json" 2>/dev/null
fi

# 2. The self-test.
if wants selftest; then
  step selftest 120 "$bin/bellows" selftest --device "$device" --json
  cp "$out/selftest.log" "$out/selftest.json" 2>/dev/null
fi

# 3. The workloads. Data: the examples' --quick data (small; the runs repeat epochs).
data="$out/data"
wants workloads || wants peers || wants finder || wants ddp || wants oom || wants scripted || wants profile && step data 60 bash -c "'$bin/bellows_example_data' icon-diffusion '$data/icon-diffusion' --quick && \
  '$bin/bellows_example_data' temporal '$data/temporal' --quick && '$bin/bellows_example_data' cape-resnet '$data/cape-resnet' --quick"
common=(output_dir="$out/runs" device="$device" train.epochs=100000 train.max_steps="$steps" train.log_every_n_steps=10
        train.eval_every_n_steps=0 checkpoint.every_n_steps=0)
declare -A config=([W5]="$here/examples/icon-diffusion/config.yaml" [W3]="$here/examples/temporal/transformer.yaml"
                   [W4]="$here/examples/cape-resnet/config.yaml")
declare -A extra=([W5]="data.path=$data/icon-diffusion/train.npz ema.enabled=false"
                  [W3]="data.path=$data/temporal/series.npy data.val_fraction=0"
                  [W4]="data.path=$data/cape-resnet/train data.val_path=$data/cape-resnet/val train.accumulation_steps=1")
for w in W5 W3 W4; do
  wants workloads || break
  for p in $precisions; do
    for c in off cuda_graph; do
      # shellcheck disable=SC2086
      step "$w-$p-$c" 60 "$bin/bellows" train "${config[$w]}" "${common[@]}" ${extra[$w]} precision="$p" compile="$c" \
        name="$w-$p-$c"
    done
  done
done

# 4. DDP over NCCL.
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 1)
if wants ddp; then
step ddp-nccl-1 90 "$bin/bellows" launch -n 1 -- train "${config[W5]}" "${common[@]}" ${extra[W5]} precision=bf16-mixed \
  dist.strategy=ddp dist.backend=nccl name=ddp-nccl-1
if [ "$gpus" -ge 2 ]; then
  step ddp-nccl-2 90 "$bin/bellows" launch -n 2 -- train "${config[W5]}" "${common[@]}" ${extra[W5]} precision=bf16-mixed \
    dist.strategy=ddp dist.backend=nccl name=ddp-nccl-2
else
  printf 'ddp-nccl-2\tskipped\t0\tone GPU\n' >>"$results"
fi
# zero1 over NCCL with one rank (the sharded update, the parameter broadcast, a checkpoint gathered through the
# backend's device), then that checkpoint resumed under ddp.
zero1=("${common[@]/checkpoint.every_n_steps=0/checkpoint.every_n_steps=20}")
step zero1-nccl-1 90 "$bin/bellows" launch -n 1 -- train "${config[W5]}" "${zero1[@]}" ${extra[W5]} precision=bf16-mixed \
  dist.strategy=zero1 dist.backend=nccl name=zero1-nccl-1
step zero1-nccl-1-resumed-ddp 90 "$bin/bellows" launch -n 1 -- train "${config[W5]}" "${zero1[@]}" ${extra[W5]} \
  precision=bf16-mixed dist.strategy=ddp dist.backend=nccl train.max_steps=$((steps + 20)) resume=auto name=zero1-nccl-1
# The online job API (bellows_create_job; tests/capi/online_job.c): one training rank on the device over NCCL (a
# process group of one), a session and one in the background while it pushes, predictions, a checkpoint restored.
if [ -x "$bin/bellows_online_job" ]; then
  backend=nccl; [ "$device" = cuda ] || backend=gloo
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  step online-job-$backend-1 90 "$bin/bellows_online_job" "$out/online-job" 0 1 "$port" dist.strategy=ddp dist.backend=$backend \
    device="$device" precision=bf16-mixed
else
  printf 'online-job-nccl-1\tskipped\t0\tno bellows_online_job beside bellows\n' >>"$results"
fi
# Two ranks on one GPU over Gloo (NCCL refuses two ranks on one GPU): DDP's buckets and zero1's shards as CUDA
# tensors through Gloo, the same data, the same global batch; ddp and zero1 should end at the same loss.
if [ "$gpus" -lt 2 ]; then
  for s in ddp zero1; do
    step "$s-gloo-cuda-2" 120 "$bin/bellows" launch -n 2 -- train "${config[W3]}" "${common[@]}" ${extra[W3]} precision=fp32 \
      dist.strategy="$s" dist.backend=gloo name="$s-gloo-cuda-2"
  done
fi
fi

# 5. The batch-size finder on the GPU.
wants finder && step batch-finder 90 "$bin/bellows" train "${config[W3]}" "${common[@]}" ${extra[W3]} precision=bf16-mixed \
  data.batch_size=auto train.global_batch_size=64 train.max_steps=10 name=batch-finder

# An out-of-memory step on the device, made by the caching allocator's limit; it passes when the run recovered
# (split into micro-batches, said in the log) and finished.
# shellcheck disable=SC2086
limit_key=gpu_memory_limit_mb
[ "$device" = cuda ] || limit_key=cpu_tensor_limit_mb  # --device cpu: the CPU's counting allocator stands in
wants oom && step oom-injected 90 bash -c '"$@" && grep -q "ran out of memory .* with micro-batches" "$0"' \
  "$out/runs/oom-injected/metrics.jsonl" "$bin/bellows" train "${config[W4]}" "${common[@]}" ${extra[W4]} precision=fp32 \
  data.batch_size=64 "$limit_key=450" train.max_steps=10 name=oom-injected

# 7. A user's TorchScript model (model.name: torchscript): examples/own-model's CNN, scripted here by the node's
#    PyTorch (a file the node's LibTorch reads), trained in bf16-mixed eagerly and as whole-step CUDA graphs.
if wants scripted; then
  own="$data/own-model"
  step scripted-prepare 60 "$python" "$here/examples/own-model/model.py" prepare "$own" --quick
  for c in off cuda_graph; do
    step "scripted-$c" 60 "$bin/bellows" train "$here/examples/own-model/config.yaml" "${common[@]}" model.path="$own/model.pt" \
      data.path="$own/train.npz" data.val_path="$own/val.npz" precision=bf16-mixed compile="$c" name="scripted-$c"
  done
  # W3's Transformer traced by the node's PyTorch on the CPU (bench/peers/peer.py --write-script; its sinusoidal
  # table is a constant of the traced graph), trained on the device as a user's file, beside the built-in W3.
  step scripted-W3-prepare 60 "$python" "$here/bench/peers/peer.py" --workload W3 --data "$data/temporal/series.npy" \
    --write-script "$own/w3.pt"
  cat >"$own/w3.json" <<JSON
{"name": "w3-scripted", "seed": 0, "model": {"name": "torchscript", "path": "$own/w3.pt", "task": "regression"},
 "data": {"source": "npy", "batch_size": 32, "window": {"length": 128, "stride": 1, "horizon": 4, "target_columns": [0, 1, 2, 3]}},
 "optim": {"type": "adamw", "lr": 0.0003, "weight_decay": 0.01}, "schedule": {"type": "cosine", "warmup_steps": 100}}
JSON
  for p in fp32 bf16-mixed; do
    for c in off cuda_graph; do
      # shellcheck disable=SC2086
      step "scripted-W3-$p-$c" 60 "$bin/bellows" train "$own/w3.json" "${common[@]}" ${extra[W3]} precision="$p" compile="$c" \
        name="scripted-W3-$p-$c"
    done
  done
fi

# 8. Per-step profiles of W3 and W4, bellows beside the PyTorch peer (bench/peers/step_profile.py): fp32, eager, the
#    examples' configs (W4 with its accumulation of 2, as the peer), a constant learning rate. bellows traces steps
#    20-25 (step 21 then starts where step 20's optimizer ended, as in the peer's trace) and logs no step inside them.
declare -A peer_data=([W1]="$data/temporal/features.csv" [W2]="$data/temporal/series.npy" [W3]="$data/temporal/series.npy"
                      [W4]="$data/cape-resnet/train" [W5]="$data/icon-diffusion/train.npz"
                      [W6]="$data/weather-gnn/regional_weather.nc" [W7]="$data/nli-encoder/train.tsv")
declare -A peer_config=([W1]="$here/examples/temporal/mlp.yaml" [W2]="$here/examples/temporal/lstm.yaml"
                        [W3]="$here/examples/temporal/transformer.yaml" [W4]="$here/examples/cape-resnet/config.yaml"
                        [W5]="$here/examples/icon-diffusion/config.yaml" [W6]="$here/examples/weather-gnn/config.yaml"
                        [W7]="$here/examples/nli-encoder/config.yaml")
sp="$here/bench/peers/step_profile.py"
if wants profile; then
  profiled=()
  for w in W3 W4; do
    [ "$workloads_given" = 0 ] || [[ " $peer_workloads " == *" $w "* ]] && profiled+=("$w")
  done
  for w in "${profiled[@]}"; do
    run_extra=(data.val_fraction=0)
    [ "$w" = W4 ] && run_extra+=('data.val_path=""')  # as the peer: no validation set (an epoch is 5 steps there)
    step "profile-$w-bellows" 150 "$bin/bellows" train "${peer_config[$w]}" --profile 20-25 output_dir="$out/runs" \
      device="$device" train.epochs=100000 train.max_steps=25 train.log_every_n_steps=50 train.eval_every_n_steps=0 \
      checkpoint.enabled=false data.path="${peer_data[$w]}" "${run_extra[@]}" precision=fp32 compile=off \
      schedule.type=constant name="profile-$w-bellows"
    step "profile-$w-bellows-reduce" 60 "$python" "$sp" trace "$out/runs/profile-$w-bellows/trace.json" --first-step 20 \
      --steps 21-25 --system bellows --json "$out/profile-$w-bellows.json"
    step "profile-$w-pytorch" 150 "$python" "$sp" peer --steps 21-25 --save-trace "$out/profile-$w-pytorch.trace.json" \
      --json "$out/profile-$w-pytorch.json" -- --workload "$w" --data "${peer_data[$w]}" --steps 5 --warmup 20 --device "$device"
  done
  table_args=()
  for w in "${profiled[@]}"; do table_args+=("$w" "$out/profile-$w-bellows.json" "$out/profile-$w-pytorch.json"); done
  [ ${#profiled[@]} -gt 0 ] && step profile-table 60 "$python" "$sp" table "$out/profile" "${table_args[@]}"
fi

# 6. Peers on the same device: PyTorch (bench/peers/peer.py) and bellows from one initial-weights file, on the same
#    batches. The agreement: eager PyTorch's first 10 losses (its fp32 eager run's) against a 10-step bellows run
#    logged every step, within bench/peers/check.py's tolerance (fp32 1e-5, bf16-mixed 1e-2, relative).
# shellcheck disable=SC2016
agree_py='
import json, sys
sys.path.insert(0, sys.argv[1])
import check  # bench/peers/check.py: TOLERANCE, rel
workload, precision, metrics, peer_json, out = sys.argv[2:7]
steps = {}
for line in open(metrics):
    r = json.loads(line)
    if r.get("type") == "train":
        steps[r["step"]] = r["loss"]
ours = [steps.get(s) for s in range(1, 11)]
theirs = json.load(open(peer_json))["losses"][:10]
tol = check.TOLERANCE[precision]
pairs = [(s, a, b) for s, (a, b) in enumerate(zip(ours, theirs), 1)]
bad = [p for p in pairs if p[1] is None or not check.rel(p[1], p[2]) <= tol]
worst = max((check.rel(a, b) for _, a, b in pairs if a is not None), default=float("nan"))
result = {"workload": workload, "precision": precision, "steps": len(pairs), "max_rel": worst, "tolerance": tol,
          "agree": len(pairs) == 10 and not bad, "bellows": ours, "pytorch": theirs,
          "first_disagreement": None if not bad else {"step": bad[0][0], "bellows": bad[0][1], "pytorch": bad[0][2]}}
json.dump(result, open(out, "w"), indent=1)
for s, a, b in pairs:
    r = check.rel(a, b) if a is not None else float("nan")
    print(f"step {s:2d}  bellows {a!r}  pytorch {b!r}  rel {r:.3g}")
print(f"{workload} {precision}: {len(pairs)} steps, max relative difference {worst:.3g} (tolerance {tol:g}): "
      + ("agree" if result["agree"] else f"DISAGREE at step {bad[0][0] if bad else len(pairs) + 1}"))
sys.exit(0 if result["agree"] else 1)
'
if wants peers; then
  pd="$out/peers"
  mkdir -p "$pd"
  if [[ " $peer_workloads " == *" W6 "* || " $peer_workloads " == *" W7 "* ]]; then
    step data-peers 60 bash -c "'$bin/bellows_example_data' weather-gnn '$data/weather-gnn' --quick && \
      '$bin/bellows_example_data' nli-encoder '$data/nli-encoder' --quick"
  fi
  # W6's peer opens the netCDF C library through ctypes ("libnetcdf.so"): on a node without it, the bundle's copy.
  if [[ " $peer_workloads " == *" W6 "* ]] && ! "$python" -c 'import ctypes.util, sys; sys.exit(ctypes.util.find_library("netcdf") is None)' 2>/dev/null; then
    nc_lib=$(ls "$bin"/../lib/libnetcdf.so* 2>/dev/null | head -1)
    if [ -n "$nc_lib" ]; then
      mkdir -p "$pd/lib" && ln -sf "$nc_lib" "$pd/lib/libnetcdf.so" && export LD_LIBRARY_PATH="$pd/lib:$LD_LIBRARY_PATH"
    fi
  fi
  # Each workload's bellows overrides (peer.py WORKLOADS: W5 ema.enabled=false, W4 data.val_path=""), one per line.
  declare -A peer_over=()
  while IFS=$'\t' read -r w o; do peer_over[$w]="$o"; done < <("$python" -c '
import sys; sys.path.insert(0, sys.argv[1]); import peer
for k, w in peer.WORKLOADS.items(): print(k + "\t" + "\x1f".join(w.bellows_overrides))' "$here/bench/peers" 2>"$pd/workloads.log")
  masks=()  # PyTorch's dropout draws where this bellows has the key (check.py torch_masks): W3 and W7 agree bitwise
  [[ $'\n'"$("$bin/bellows" config keys 2>/dev/null)" == *$'\n'"dropout_masks "* ]] && masks=(dropout_masks=torch)  # not grep -q: pipefail
  agree_precision=${peer_precisions%% *}
  [[ " $peer_modes " == *" eager "* ]] || peer_modes="eager $peer_modes"  # the agreement needs it
  # bellows_run NAME WORKLOAD PRECISION KEY=VALUE...: the workload's example config from the workload's init file.
  bellows_run() {
    local name="$1" w="$2" p="$3"; shift 3
    local over=()
    [ -n "${peer_over[$w]:-}" ] && IFS=$'\x1f' read -r -a over <<<"${peer_over[$w]}"
    step "$name" 90 "$bin/bellows" train "${peer_config[$w]}" output_dir="$out/runs" device="$device" train.epochs=100000 \
      train.eval_every_n_steps=0 checkpoint.enabled=false data.path="${peer_data[$w]}" data.shuffle=false data.val_fraction=0 \
      schedule.type=constant schedule.warmup_steps=0 init_weights="$pd/$w-init.safetensors" "${masks[@]}" "${over[@]}" \
      precision="$p" "$@" name="$name"
  }
  peer_run() {  # peer_run WORKLOAD PRECISION MODE LIMIT_S
    local w="$1" p="$2" m="$3"
    step "peer-$w-$p-$m" "$4" "$python" "$here/bench/peers/peer.py" --workload "$w" --data "${peer_data[$w]}" \
      --init "$pd/$w-init.safetensors" --steps "$steps" --warmup 10 --device "$device" --precision "$p" --mode "$m" \
      --json "$out/peer-$w-$p-$m.json"
  }
  # Per workload: the initial weights (W7 first trains its vocabulary, as check.py does), eager PyTorch, the agreement.
  for w in $peer_workloads; do
    if [ "$w" = W7 ]; then  # the vocabulary the peer reads beside the data (DATA.spm-bpe-512.model): a 1-step run
      step peers-W7-vocabulary 90 "$bin/bellows" train "${peer_config[W7]}" output_dir="$out/runs" name=peers-W7-vocabulary \
        data.path="${peer_data[W7]}" data.val_fraction=0 train.max_steps=1 checkpoint.enabled=false device="$device"
    fi
    step "peers-$w-init" 60 "$python" "$here/bench/peers/peer.py" --workload "$w" --data "${peer_data[$w]}" \
      --write-init "$pd/$w-init.safetensors"
    peer_run "$w" "$agree_precision" eager 120
    bellows_run "bellows-$w-agree" "$w" "$agree_precision" compile=off train.max_steps=10 train.log_every_n_steps=1
    step "agree-$w" 30 "$python" -c "$agree_py" "$here/bench/peers" "$w" "$agree_precision" \
      "$out/runs/bellows-$w-agree/metrics.jsonl" "$out/peer-$w-$agree_precision-eager.json" "$out/agree-$w.json"
  done
  # bellows eager and default, then the other precisions' eager runs.
  for p in $peer_precisions; do
    for w in $peer_workloads; do
      [ "$p" = "$agree_precision" ] || peer_run "$w" "$p" eager 120
      bellows_run "bellows-$w-$p-off" "$w" "$p" compile=off train.max_steps=$((steps + 10)) train.log_every_n_steps=10
      bellows_run "bellows-$w-$p-default" "$w" "$p" train.max_steps=$((steps + 10)) train.log_every_n_steps=10
    done
  done
  # The compilers, the quickest to compile first; each mode in every precision and workload before the next.
  for m in $peer_modes; do
    [ "$m" = eager ] && continue
    limit=180
    [ "$m" = max-autotune-no-cudagraphs ] && limit=300
    for p in $peer_precisions; do
      for w in $peer_workloads; do peer_run "$w" "$p" "$m" "$limit"; done
    done
  done
fi

# The summary: per step its status; per training run the plan's choices and what it measured.
"$python" - "$out" "$peer_workloads" "$peer_precisions" "$peer_modes" <<'PY'
import csv, json, os, sys
out = sys.argv[1]
peer_workloads, peer_precisions, peer_modes = (a.split() for a in sys.argv[2:5])
rows = list(csv.DictReader(open(os.path.join(out, "results.tsv")), delimiter="\t"))
runs = {}
for r in rows:
    m = os.path.join(out, "runs", r["step"], "metrics.jsonl")
    if not os.path.exists(m):
        continue
    info = {"messages": []}
    for line in open(m):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        t = rec.get("type")
        if "header" in rec:  # the run's start record
            h = rec.get("header", {})
            info["precision"] = h.get("precision", "").split("  ")[0].strip()
            info["compile"] = h.get("compile", "").split("  ")[0].strip()
            info["compile_reason"] = " ".join(h.get("compile", "").split()[1:])
        elif t == "message":
            info["messages"].append(rec.get("text", ""))
        elif t == "end":
            info["summary"] = rec.get("summary", {})
        elif "samples_per_s" in rec:
            info["samples_per_s"] = rec["samples_per_s"]
            # The peers' window: their 10 warm-up steps are not timed, so bellows' records after step 10 are (each of
            # log_every_n_steps steps of equal samples: their harmonic mean is samples over time).
            if rec.get("step", 0) > 10 and rec["samples_per_s"]:
                info.setdefault("timed", []).append(rec["samples_per_s"])
            info["loss"] = rec.get("loss")
            info["mem_peak_mb"] = rec.get("mem_peak_mb")
            info["step"] = rec.get("step")
            info["step_ms"] = rec.get("step_time_ms")
            info["mfu"] = rec.get("mfu")
    if info.get("timed"):
        info["samples_per_s_after_warmup"] = len(info["timed"]) / sum(1.0 / v for v in info["timed"])
    runs[r["step"]] = info
for r in rows:  # the PyTorch peers: their own JSON (bench/peers/peer.py)
    pj = os.path.join(out, r["step"] + ".json")
    if r["step"].startswith("peer-") and os.path.exists(pj):
        p = json.load(open(pj))
        runs[r["step"]] = {"precision": p.get("precision"), "compile": p.get("mode"), "samples_per_s": p.get("samples_per_s"),
                           "step_ms": p.get("step_ms"), "loss": (p.get("losses") or [None])[-1], "messages": [],
                           "compile_s": p.get("compile_s"), "first_step_s": p.get("first_step_s")}
json.dump({"steps": rows, "runs": runs}, open(os.path.join(out, "results.json"), "w"), indent=1)
lines = ["| step | status | s | precision | compile | samples/s (last window) | ms/step | MFU | peak MiB | loss | note |", "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    i = runs.get(r["step"], {})
    note = "" if i else r["detail"][:90]
    if i:
        keep = [m for m in i["messages"] if "graph" in m or "eager" in m or "fall" in m or "warning" in m.lower()]
        keep.sort(key=lambda m: "fail" not in m)  # a failure first
        note = (keep[0][:110] if keep else "")
    def f(v, fmt):
        return "" if v is None else fmt.format(v)
    lines.append(f"| {r['step']} | {r['status']} | {r['seconds']} | {i.get('precision', '')} | {i.get('compile', '')} | "
                 f"{f(i.get('samples_per_s'), '{:.0f}')} | {f(i.get('step_ms'), '{:.2f}')} | {f(i.get('mfu'), '{:.3f}')} | {f(i.get('mem_peak_mb'), '{:.0f}')} | {f(i.get('loss'), '{:.4g}')} | {note} |")
if not any(r["step"] == "selftest" for r in rows):
    pass  # not asked for (--only)
else:
  try:
    st = json.load(open(os.path.join(out, "selftest.json")))
    lines += ["", f"selftest on {st.get('device', '?')}:", "", "| check | status | s | detail |", "|---|---|---|---|"]
    lines += [f"| {c['name']} | {c['status']} | {c['seconds']:.2f} | {c['detail'][:160]} |" for c in st["checks"]]
  except (OSError, ValueError, KeyError) as e:
    lines += ["", f"selftest: no JSON report ({e}); see selftest.log"]
# The peers: per workload and precision, samples/s of each PyTorch mode (its compile time apart), bellows eager and
# bellows' default, the agreement of the eager losses.
status = {r["step"]: r["status"] for r in rows}
if any(k.startswith("peer-") for k in status):
    def sps(step):
        i = runs.get(step)
        if not i or status.get(step) != "pass":
            return None
        return i.get("samples_per_s_after_warmup") or i.get("samples_per_s")  # bellows: the peer's window
    head = ["workload", "precision", "agreement (eager, 10 steps)"] + [f"PyTorch {m}" for m in peer_modes] + [
        "bellows eager", "bellows default (compile)", "bellows eager / PyTorch eager", "bellows default / best PyTorch mode"]
    lines += ["", "Peers (samples/s of the timed steps; a compiling mode's compilation in seconds apart):", "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    peers_json = []
    for w in peer_workloads:
        try:
            ag = json.load(open(os.path.join(out, f"agree-{w}.json")))
            agree = f"{'agrees' if ag['agree'] else 'DISAGREES'} ({ag['precision']}, max rel {ag['max_rel']:.2g}, tol {ag['tolerance']:g})"
        except (OSError, ValueError, KeyError):
            ag, agree = None, status.get(f"agree-{w}", "not run")
        for p in peer_precisions:
            if ag and p != ag.get("precision"):
                agree = f"(in {ag['precision']})"
            cells, best, row = [], None, {"workload": w, "precision": p, "agreement": ag, "pytorch": {}}
            for m in peer_modes:
                step = f"peer-{w}-{p}-{m}"
                v = sps(step)
                c = (runs.get(step) or {}).get("compile_s")
                row["pytorch"][m] = {"samples_per_s": v, "compile_s": c, "status": status.get(step, "not run")}
                if v is None:
                    cells.append(status.get(step, "not run"))
                    continue
                cells.append(f"{v:,.0f}" + (f" ({c:.0f} s compile)" if c is not None and m != "eager" else ""))
                if best is None or v > best[1]:
                    best = (m, v)
            eager_b, default_b = sps(f"bellows-{w}-{p}-off"), sps(f"bellows-{w}-{p}-default")
            chosen = (runs.get(f"bellows-{w}-{p}-default") or {}).get("compile", "")
            eager_p = row["pytorch"].get("eager", {}).get("samples_per_s")
            row.update(bellows_eager=eager_b, bellows_default=default_b, bellows_default_compile=chosen, best_pytorch=best)
            peers_json.append(row)
            if not any(v is not None for v in [eager_b, default_b] + [x["samples_per_s"] for x in row["pytorch"].values()]):
                continue  # nothing ran for this precision
            ratio_e = f"{eager_b / eager_p:.2f}" if eager_b and eager_p else ""
            ratio_d = f"{default_b / best[1]:.2f} (vs {best[0]})" if default_b and best else ""
            lines.append(f"| {w} | {p} | {agree} | " + " | ".join(cells) + f" | {f'{eager_b:,.0f}' if eager_b else status.get(f'bellows-{w}-{p}-off', 'not run')}"
                         f" | {f'{default_b:,.0f} ({chosen})' if default_b else status.get(f'bellows-{w}-{p}-default', 'not run')} | {ratio_e} | {ratio_d} |")
    json.dump(peers_json, open(os.path.join(out, "peers.json"), "w"), indent=1)
# The per-step profiles (bench/peers/step_profile.py table).
if os.path.exists(os.path.join(out, "profile.md")):
    lines += ["", "Per optimizer step, bellows beside PyTorch (fp32, eager; bench/peers/step_profile.py):", ""]
    lines += open(os.path.join(out, "profile.md")).read().rstrip("\n").split("\n")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "summary.md"), "w").write(text)
print(text)
PY
failed=$(awk -F'\t' 'NR > 1 && $2 != "pass" && $2 != "skipped" {n++} END {print n + 0}' "$results")
echo "[gpu_check] $(($(date +%s) - start)) s; $failed step(s) did not pass; everything is in $out" >&2
[ "$failed" -eq 0 ]
