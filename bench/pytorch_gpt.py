#!/usr/bin/env python3
"""PyTorch reference for `merak bench gpt`: the same GPT training step, timed.

Run with the Debian PyTorch (python3-torch, 1.13):

    /usr/bin/python3 bench/pytorch_gpt.py --steps 20 --threads best

Model (GPT-2 layout, fp32): byte vocabulary, token + learned position
embeddings, L pre-LN blocks (causal multi-head attention from a fused qkv
Linear, GELU-tanh MLP of width 4C), final LayerNorm, LM head tied to the token
embedding, mean cross-entropy. AdamW(betas 0.9/0.95, eps 1e-8, weight decay 0.1
on 2-D weights only), global grad-norm clipping at 1.0. A timed step is
zero_grad + forward + backward + clip + optimizer step, on random byte tokens
(the speed of a step does not depend on the text).

--precision bf16 runs forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16), PyTorch's mixed precision on the CPU (fp32 weights
and optimizer; GEMMs and most activations in bf16).

Prints one JSON object on stdout.
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, T):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C, bias=True)
        self.proj = nn.Linear(C, C, bias=True)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C, bias=True)
        self.fc_proj = nn.Linear(4 * C, C, bias=True)
        self.register_buffer(
            "causal", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T),
            persistent=False)

    def attn(self, x):
        B, T, C = x.shape
        hd = C // self.NH
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.NH, hd).transpose(1, 2)  # (B, NH, T, hd)
        k = k.view(B, T, self.NH, hd).transpose(1, 2)
        v = v.view(B, T, self.NH, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.causal[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, V, T, C, L, NH):
        super().__init__()
        assert C % NH == 0, "dim must be divisible by heads"
        self.T = T
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([Block(C, NH, T) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.register_buffer("pos", torch.arange(T, dtype=torch.long), persistent=False)
        # GPT-2 initialisation.
        proj_std = 0.02 / math.sqrt(2 * L)
        nn.init.normal_(self.wte.weight, mean=0.0, std=0.02)
        nn.init.normal_(self.wpe.weight, mean=0.0, std=0.01)
        for b in self.blocks:
            for lin in (b.qkv, b.proj, b.fc, b.fc_proj):
                std = proj_std if lin in (b.proj, b.fc_proj) else 0.02
                nn.init.normal_(lin.weight, mean=0.0, std=std)
                nn.init.zeros_(lin.bias)
            for ln in (b.ln1, b.ln2):
                nn.init.ones_(ln.weight)
                nn.init.zeros_(ln.bias)
        nn.init.ones_(self.ln_f.weight)
        nn.init.zeros_(self.ln_f.bias)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(self.pos[:T])
        for b in self.blocks:
            x = b(x)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.t()  # tied LM head, no bias
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))


def make_optimizer(model, lr, weight_decay, foreach):
    decay = [p for p in model.parameters() if p.dim() >= 2]  # embeddings, Linear weights
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases, LayerNorm
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kw = {"lr": lr, "betas": (0.9, 0.95), "eps": 1e-8}
    if foreach:
        kw["foreach"] = True
    return torch.optim.AdamW(groups, **kw)


def run(args, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    V, T, B = args.vocab, args.seq, args.batch
    model = GPT(V, T, args.dim, args.layers, args.heads)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = make_optimizer(model, args.lr, args.weight_decay, args.foreach)

    # Random bytes; each step trains on B random windows of T+1 bytes.
    g = torch.Generator().manual_seed(args.seed + 1)
    data = torch.randint(0, V, (max(1 << 20, 40 * T),), dtype=torch.long, generator=g)

    def batch():
        starts = torch.randint(0, data.numel() - T - 1, (B,), generator=g)
        rows = torch.stack([data[s:s + T + 1] for s in starts.tolist()])
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        return loss.item()

    for _ in range(args.warmup_steps):
        step(*batch())
    times, loss = [], float("nan")
    for _ in range(args.steps):
        x, y = batch()  # data preparation is not timed
        t0 = time.perf_counter()
        loss = step(x, y)
        times.append(time.perf_counter() - t0)

    mean = statistics.fmean(times)
    return {
        "benchmark": "gpt",
        "framework": "pytorch",
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "precision": args.precision,
        "layers": args.layers, "dim": args.dim, "heads": args.heads,
        "seq": T, "batch": B, "vocab": V,
        "params": params,
        "steps": args.steps,
        "tokens_per_s": B * T / mean,
        "step_s": mean,
        "step_s_median": statistics.median(times),
        "step_s_min": min(times),
        "step_s_max": max(times),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "final_loss": loss,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--steps", type=int, default=10, help="measured steps")
    p.add_argument("--warmup-steps", type=int, default=2, help="unmeasured steps first")
    p.add_argument("--threads", default=str(os.cpu_count() or 1),
                   help="torch.set_num_threads; 'best' runs 1 and 2 threads and reports the faster")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: torch.autocast on the CPU")
    p.add_argument("--foreach", action="store_true",
                   help="AdamW(foreach=True), the multi-tensor implementation")
    args = p.parse_args()
    if args.steps < 1:
        p.error("--steps must be >= 1")

    if args.threads != "best":
        try:
            threads = int(args.threads)
        except ValueError:
            p.error("--threads takes a positive integer or 'best'")
        if threads < 1:
            p.error("--threads takes a positive integer or 'best'")
        print(json.dumps(run(args, threads)))
        return

    # 'best': each setting in its own process, so that peak RSS and the thread
    # pools of one run do not leak into the other.
    per_threads = []
    base = [a for a in sys.argv[1:]]
    i = base.index("--threads") if "--threads" in base else None
    if i is not None:
        del base[i:i + 2]
    base = [a for a in base if a != "--threads=best"]
    for k in (1, 2):
        cmd = [sys.executable, os.path.abspath(__file__)] + base + ["--threads", str(k)]
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        per_threads.append(json.loads(out.strip().splitlines()[-1]))
    best = dict(max(per_threads, key=lambda r: r["tokens_per_s"]))
    best["threads_mode"] = "best"
    best["per_threads"] = per_threads
    print(json.dumps(best))


if __name__ == "__main__":
    main()
