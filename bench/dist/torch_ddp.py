"""PyTorch's own DistributedDataParallel (c10d's Reducer) on W1's model, for comparison with bellows' bucketing.

Two processes x 1 thread over Gloo on this machine, W1's MLP (64 -> 512 -> 512 -> 512 -> 1, GELU), batch 256 per
process (global 512), fused AdamW, in-memory batches; prints the median step time and samples/s of the timed steps.

    python -m torch.distributed.run --nproc-per-node 2 bench/dist/torch_ddp.py [--bucket-mb 25] [--steps 300]
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layers = []
    width = 64
    for h in (512, 512, 512):
        layers += [torch.nn.Linear(width, h), torch.nn.GELU()]
        width = h
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, fused=True)
    g = torch.Generator().manual_seed(rank)
    batches = [(torch.randn(args.batch, 64, generator=g), torch.randn(args.batch, 1, generator=g)) for _ in range(16)]
    times = []
    for step in range(args.warmup + args.steps):
        x, y = batches[step % len(batches)]
        t = time.perf_counter()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t)
    if rank == 0:
        ms = 1e3 * statistics.median(times)
        total = sum(times)
        print(f"torch DDP gloo {world}x1 bucket {args.bucket_mb:g} MiB: median step {ms:.2f} ms, "
              f"{args.steps * args.batch * world / total:.0f} samples/s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
