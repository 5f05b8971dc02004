#!/usr/bin/env python3
"""PyTorch reference for `merak bench gpt`: the same GPT training step, timed.

Run with the Debian PyTorch (python3-torch, 1.13):

    /usr/bin/python3 bench/pytorch_gpt.py --steps 20 --threads best
    /usr/bin/python3 bench/pytorch_gpt.py --model llama --num-query-groups 2 \
        --ffn-hidden-size 1024 --steps 20 --threads best

--model gpt (GPT-2 layout, fp32): byte vocabulary, token + learned position
embeddings, L pre-LN blocks (causal multi-head attention from a fused qkv
Linear, GELU-tanh MLP of width 4C), final LayerNorm, LM head tied to the token
embedding, mean cross-entropy.

--model llama (Hugging Face's LlamaForCausalLM): token embedding, no position
table; L pre-norm blocks of RMSNorm (in float, eps) -> q/k/v projections (G
key/value heads) -> rotary embedding (rotate-half, base theta) -> causal
grouped-query attention (K/V heads repeated, repeat_kv) -> o projection ->
residual -> RMSNorm -> SwiGLU MLP down(silu(gate(x)) * up(x)) -> residual;
final RMSNorm and an untied output layer; no biases anywhere. The attention is
torch.nn.functional.scaled_dot_product_attention(is_causal=True) where the
installed PyTorch has it (2.0 and later: a fused CPU kernel) and an explicit
masked softmax otherwise (Debian 12's 1.13); --attention picks one, and the
JSON's "attention" says which ran. Same parameters as merak's Llama (merak
fuses q|k|v and gate|up into one GEMM each; the counts are equal).

Both: AdamW(betas 0.9/0.95, eps 1e-8, weight decay 0.1
on 2-D weights only), global grad-norm clipping at 1.0. A timed step is
zero_grad + forward + backward + clip + optimizer step, on random byte tokens
(the speed of a step does not depend on the text).

--precision bf16 runs forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16), PyTorch's mixed precision on the CPU (fp32 weights
and optimizer; GEMMs and most activations in bf16).

Prints one JSON object on stdout. --check-shapes builds the model, prints
its parameter count and tensor shapes as JSON and trains nothing.
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


class RMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm: normalized in float, scaled in the input's type."""

    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    """(B, G, T, hd) -> (B, G * n_rep, T, hd): K/V head g serves query heads g*n_rep..."""
    if n_rep == 1:
        return x
    B, G, T, hd = x.shape
    return x[:, :, None, :, :].expand(B, G, n_rep, T, hd).reshape(B, G * n_rep, T, hd)


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, G, F_, T, eps, attention):
        super().__init__()
        self.NH, self.G, self.hd, self.attention = NH, G, C // NH, attention
        self.input_layernorm = RMSNorm(C, eps)
        self.q_proj = nn.Linear(C, NH * self.hd, bias=False)
        self.k_proj = nn.Linear(C, G * self.hd, bias=False)
        self.v_proj = nn.Linear(C, G * self.hd, bias=False)
        self.o_proj = nn.Linear(NH * self.hd, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.gate_proj = nn.Linear(C, F_, bias=False)
        self.up_proj = nn.Linear(C, F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)
        if attention == "explicit":
            self.register_buffer(
                "causal", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T),
                persistent=False)

    def attn(self, x, cos, sin):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.NH, self.hd).transpose(1, 2)  # (B, NH, T, hd)
        k = self.k_proj(x).view(B, T, self.G, self.hd).transpose(1, 2)   # (B, G, T, hd)
        v = self.v_proj(x).view(B, T, self.G, self.hd).transpose(1, 2)
        cos, sin = cos[:T].to(q.dtype), sin[:T].to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.NH // self.G)
        v = repeat_kv(v, self.NH // self.G)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
            att = att.masked_fill(~self.causal[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            y = att @ v
        return self.o_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x, cos, sin):
        x = x + self.attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, V, T, C, L, NH, G, F_, theta, eps, attention):
        super().__init__()
        assert C % NH == 0, "dim must be divisible by heads"
        assert NH % G == 0, "num-query-groups must divide heads"
        assert (C // NH) % 2 == 0, "rotary needs an even head size (dim / heads)"
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(
            [LlamaBlock(C, NH, G, F_, T, eps, attention) for _ in range(L)])
        self.norm = RMSNorm(C, eps)
        self.lm_head = nn.Linear(C, V, bias=False)  # untied
        hd = C // NH
        inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)  # (T, hd): channel i and i + hd/2 share an angle
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        # merak's initialisation: N(0, 0.02), the residual projections scaled by 1/sqrt(2L).
        proj_std = 0.02 / math.sqrt(2 * L)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
        for b in self.layers:
            nn.init.normal_(b.o_proj.weight, mean=0.0, std=proj_std)
            nn.init.normal_(b.down_proj.weight, mean=0.0, std=proj_std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.embed_tokens(idx)
        for b in self.layers:
            x = b(x, self.cos, self.sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(B * T, -1), targets.reshape(B * T))


def llama_ffn_hidden(C):
    """Megatron's (and merak's) default SwiGLU width: 8C/3 down to a multiple of 64, >= 64."""
    return max(64, (8 * C // 3) // 64 * 64)


def attention_kind(choice):
    if choice == "auto":
        return "sdpa" if hasattr(F, "scaled_dot_product_attention") else "explicit"
    if choice == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        sys.exit("pytorch_gpt.py: error: --attention sdpa needs PyTorch 2.0 or later "
                 "(this is %s)" % torch.__version__)
    return choice


def build_model(args):
    if args.model == "gpt":
        return GPT(args.vocab, args.seq, args.dim, args.layers, args.heads)
    return Llama(args.vocab, args.seq, args.dim, args.layers, args.heads, args.num_query_groups,
                 args.ffn_hidden_size, args.rotary_base, args.norm_epsilon, args.attention)


def shape_fields(args):
    """The model's identity in the JSON: the GPT fields, plus Llama's own."""
    out = {"model": args.model, "layers": args.layers, "dim": args.dim, "heads": args.heads,
           "seq": args.seq, "batch": args.batch, "vocab": args.vocab}
    if args.model == "llama":
        out.update({"num_query_groups": args.num_query_groups,
                    "ffn_hidden_size": args.ffn_hidden_size, "rotary_base": args.rotary_base,
                    "norm_epsilon": args.norm_epsilon, "attention": args.attention})
    return out


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
    model = build_model(args)
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
        **shape_fields(args),
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
    p.add_argument("--model", choices=("gpt", "llama"), default="gpt", help="model family")
    p.add_argument("--num-query-groups", type=int, default=0,
                   help="llama: key/value heads G (0: one per head)")
    p.add_argument("--ffn-hidden-size", type=int, default=0,
                   help="llama: SwiGLU width F (0: 8C/3 down to a multiple of 64)")
    p.add_argument("--rotary-base", type=float, default=10000.0, help="llama: rotary theta")
    p.add_argument("--norm-epsilon", type=float, default=1e-5, help="llama: RMSNorm epsilon")
    p.add_argument("--attention", choices=("auto", "sdpa", "explicit"), default="auto",
                   help="llama: scaled_dot_product_attention (auto: where available) "
                        "or an explicit masked softmax")
    p.add_argument("--check-shapes", action="store_true",
                   help="print the parameter count and tensor shapes as JSON; no training")
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
    if args.model == "gpt":
        for flag, given in (("--num-query-groups", args.num_query_groups != 0),
                            ("--ffn-hidden-size", args.ffn_hidden_size != 0)):
            if given:
                p.error("%s needs --model llama" % flag)
    else:
        if args.num_query_groups < 0 or args.ffn_hidden_size < 0:
            p.error("--num-query-groups and --ffn-hidden-size must not be negative")
        args.num_query_groups = args.num_query_groups or args.heads
        if args.heads % args.num_query_groups != 0:
            p.error("--num-query-groups (%d) must divide --heads (%d)"
                    % (args.num_query_groups, args.heads))
        args.ffn_hidden_size = args.ffn_hidden_size or llama_ffn_hidden(args.dim)
        args.attention = attention_kind(args.attention)

    if args.check_shapes:
        model = build_model(args)
        print(json.dumps({**shape_fields(args), "torch_version": torch.__version__,
                          "params": sum(p_.numel() for p_ in model.parameters()),
                          "tensors": {n: list(t.shape) for n, t in model.named_parameters()}}))
        return

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
