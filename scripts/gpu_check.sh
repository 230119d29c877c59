#!/usr/bin/env bash
# The prepared GPU check (docs/gpu.md): everything bellows does on a GPU, in one bounded command, from the bundle
# that scripts/gpu_bundle.sh makes (no compiling on the GPU node) or from a build.
#   scripts/gpu_check.sh OUT_DIR [--bundle DIR | --bin DIR] [--budget-s 330] [--steps 40] [--device cuda]
#                        [--only GROUP,...] [--precisions fp32,bf16-mixed,fp16-mixed,tf32 (step 3's)]
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
#      one rank, its checkpoint resumed under ddp; on a one-GPU node two ranks over Gloo on that GPU, ddp and zero1
#   5. the batch-size finder on the GPU (data.batch_size: auto); an injected out-of-memory step: W4 with batches of 64
#      under gpu_memory_limit_mb=450 (a step of 32 peaks at about 372 MB there): the first step runs out of memory on
#      the device and the run goes on in micro-batches (passes only when the log says so and the run finishes)
#   7. a user's TorchScript model (examples/own-model: model.py scripts it with the node's PyTorch) in bf16-mixed,
#      eager and as whole-step CUDA graphs; W3's Transformer traced on the CPU (peer.py --write-script) in fp32 and
#      bf16-mixed, eager and as graphs
#   6. peers: PyTorch on the same GPU (bench/peers/peer.py --device: the same model, config, batch size and steps; its
#      own initial weights), eager for W5, W3, W4 and torch.compile for W5, W3, beside bellows' eager and CUDA-graph
#      runs of the same workloads made in this step (W4 with the example's accumulation of 2, as the peer runs it)
# --only GROUP,... runs some of: machine, selftest, workloads, ddp, finder, oom, scripted, peers (the data is made when
# needed).
# LibTorch comes from the node's PyTorch (`python3 -c 'import torch'`, or $BELLOWS_CHECK_PYTHON): its lib folder
# and the NVIDIA libraries beside it go on LD_LIBRARY_PATH, so a bundle built against the same torch version runs.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="" bundle="" bin="" budget=330 steps=40 device=cuda only=machine,selftest,workloads,ddp,finder,oom,scripted,peers
precisions="fp32 bf16-mixed fp16-mixed tf32"
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --budget-s) budget="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --precisions) precisions="${2//,/ }"; shift 2 ;;
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
wants workloads || wants peers || wants finder || wants ddp || wants oom || wants scripted && step data 60 bash -c "'$bin/bellows_example_data' icon-diffusion '$data/icon-diffusion' --quick && \
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

# 6. Peers on the same GPU: PyTorch eager first, bellows, then torch.compile (its compilation is the slow part).
declare -A peer_data=([W5]="$data/icon-diffusion/train.npz" [W3]="$data/temporal/series.npy" [W4]="$data/cape-resnet/train")
if wants peers; then
  for w in W5 W3 W4; do
    step "peer-$w-eager" 90 "$python" "$here/bench/peers/peer.py" --workload "$w" --data "${peer_data[$w]}" --steps "$steps" \
      --warmup 10 --device "$device" --json "$out/peer-$w-eager.json"
  done
  for w in W5 W3; do
    for c in off cuda_graph; do
      # shellcheck disable=SC2086
      step "bellows-$w-$c" 60 "$bin/bellows" train "${config[$w]}" "${common[@]}" ${extra[$w]} precision=fp32 compile="$c" \
        schedule.type=constant train.max_steps=$((steps + 10)) name="bellows-$w-$c"
    done
  done
  step "bellows-W4-off" 60 "$bin/bellows" train "${config[W4]}" "${common[@]}" data.path="$data/cape-resnet/train" \
    data.val_path="$data/cape-resnet/val" precision=fp32 schedule.type=constant train.max_steps=$((steps + 10)) name=bellows-W4-off
  for w in W5 W3; do
    step "peer-$w-compile" 150 "$python" "$here/bench/peers/peer.py" --workload "$w" --data "${peer_data[$w]}" --steps "$steps" \
      --warmup 10 --device "$device" --mode compile --json "$out/peer-$w-compile.json"
  done
fi

# The summary: per step its status; per training run the plan's choices and what it measured.
"$python" - "$out" <<'PY'
import csv, json, os, sys
out = sys.argv[1]
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
            info["loss"] = rec.get("loss")
            info["mem_peak_mb"] = rec.get("mem_peak_mb")
            info["step"] = rec.get("step")
            info["step_ms"] = rec.get("step_time_ms")
            info["mfu"] = rec.get("mfu")
    runs[r["step"]] = info
for r in rows:  # the PyTorch peers: their own JSON (bench/peers/peer.py)
    pj = os.path.join(out, r["step"] + ".json")
    if r["step"].startswith("peer-") and os.path.exists(pj):
        p = json.load(open(pj))
        runs[r["step"]] = {"precision": p.get("precision"), "compile": p.get("mode"), "samples_per_s": p.get("samples_per_s"),
                           "step_ms": p.get("step_ms"), "loss": (p.get("losses") or [None])[-1], "messages": []}
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
text = "\n".join(lines) + "\n"
open(os.path.join(out, "summary.md"), "w").write(text)
print(text)
PY
failed=$(awk -F'\t' 'NR > 1 && $2 != "pass" && $2 != "skipped" {n++} END {print n + 0}' "$results")
echo "[gpu_check] $(($(date +%s) - start)) s; $failed step(s) did not pass; everything is in $out" >&2
[ "$failed" -eq 0 ]
