"""The icon-coupled example's diffusion model written by a user in plain PyTorch and saved as TorchScript, for the
variant that trains it through bellows' C API and Fortran module (config-scripted.yaml: model.name torchscript).

    scripted_ddpm.py OUT.pt [--context 7] [--out 256] [--hidden 256] [--layers 2] [--steps 50] [--seed 0]

forward(context, fine) draws a timestep and noise per sample and returns {"loss": the noise-prediction MSE};
sample(context), exported with @torch.jit.export, runs the ancestral sampler: bellows predicts through it
(model.predict_method: sample). Like bellows' own ddpm model (model.skip), the denoiser adds sqrt(1 - alpha_bar_t) x_t,
the linear noise estimate for unit-scale data, to its output.
"""
import argparse
import math

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.fc2(torch.nn.functional.silu(self.fc1(self.norm(h))))


class ConditionalDdpm(nn.Module):
    def __init__(self, context: int = 7, out: int = 256, hidden: int = 256, layers: int = 2, time_embedding: int = 32,
                 steps: int = 50):
        super().__init__()
        self.steps, self.out_features, self.time_embedding = steps, out, time_embedding
        betas = torch.linspace(1e-4, 0.02, steps, dtype=torch.float64)
        self.register_buffer("betas", betas.float())
        self.register_buffer("alphas_cumprod", torch.cumprod(1 - betas, 0).float())
        self.context = nn.Sequential(nn.Linear(context, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.time = nn.Sequential(nn.Linear(time_embedding, hidden), nn.SiLU())
        self.inp = nn.Linear(out, hidden)
        self.blocks = nn.ModuleList([Block(hidden) for _ in range(layers)])
        self.head = nn.Linear(hidden, out)

    def embed(self, t: torch.Tensor) -> torch.Tensor:
        half = self.time_embedding // 2
        freqs = torch.exp(torch.arange(half, device=t.device, dtype=torch.float32) * (-math.log(10000.0) / half))
        angle = t.to(torch.float32).unsqueeze(1) * freqs.unsqueeze(0)
        return torch.cat([angle.sin(), angle.cos()], dim=1)

    def denoise(self, x_t: torch.Tensor, t: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        h = self.inp(x_t) + self.context(context) + self.time(self.embed(t))
        for block in self.blocks:
            h = block(h)
        skip = (1 - self.alphas_cumprod.index_select(0, t)).sqrt().unsqueeze(1) * x_t
        return self.head(h) + skip

    def forward(self, context: torch.Tensor, fine: torch.Tensor):
        t = torch.randint(0, self.steps, (fine.size(0),), device=fine.device)
        noise = torch.randn_like(fine)
        ab = self.alphas_cumprod.index_select(0, t).unsqueeze(1)
        x_t = ab.sqrt() * fine + (1 - ab).sqrt() * noise
        eps = self.denoise(x_t, t, context)
        return {"loss": (eps.float() - noise.float()).square().mean()}

    @torch.jit.export
    def sample(self, context: torch.Tensor) -> torch.Tensor:
        x = torch.randn(context.size(0), self.out_features, device=context.device)
        for i in range(self.steps - 1, -1, -1):
            t = torch.full((context.size(0),), i, dtype=torch.long, device=context.device)
            eps = self.denoise(x, t, context)
            beta, ab = self.betas[i], self.alphas_cumprod[i]
            x = (x - beta / (1 - ab).sqrt() * eps) / (1 - beta).sqrt()
            if i > 0:
                x = x + (beta * (1 - self.alphas_cumprod[i - 1]) / (1 - ab)).sqrt() * torch.randn_like(x)
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--context", type=int, default=7)
    p.add_argument("--fine", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    model = ConditionalDdpm(a.context, a.fine, a.hidden, a.layers, 32, a.steps)
    torch.jit.script(model).save(a.out)
    print(f"scripted_ddpm: wrote {a.out} ({sum(p.numel() for p in model.parameters())} parameters)")


if __name__ == "__main__":
    main()
