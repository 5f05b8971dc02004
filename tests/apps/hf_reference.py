#!/usr/bin/env python3
"""An independent reference for Hugging Face checkpoints, in NumPy alone.

Written from the published definitions, not from merak's code:
  * the safetensors format (8-byte little-endian header length, JSON header
    of {"dtype", "shape", "data_offsets"} per tensor, raw little-endian data),
  * model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}),
  * GPT2LMHeadModel (transformers/models/gpt2/modeling_gpt2.py): learned
    positions, pre-LN blocks, Conv1D weights stored (in, out), fused c_attn
    q|k|v, GELU tanh form ("gelu_new"), LayerNorm eps layer_norm_epsilon,
    LM head tied to wte,
  * LlamaForCausalLM (transformers/models/llama/modeling_llama.py): RMSNorm
    in float, rotate-half RoPE with rope_theta, grouped-query attention with
    repeat_kv, SwiGLU MLP, untied lm_head unless tie_word_embeddings.

Commands:
  write gpt2|llama DIR [--seed S] [--dtype F32|BF16|F16] [--shards N] [--tied]
      a random tiny checkpoint (config.json + model.safetensors, or N shards
      with an index)
  loss DIR DATA --batch B --eval-batches E --val-fraction F
      the mean cross-entropy (float64 arithmetic) on the validation windows
      `merak eval` documents: the last F of DATA's bytes, B evenly spaced
      windows of the model's length per batch, E batches
  greedy DIR --prompt-ids 1,2,3 --new N
      the N greedy continuation ids (comma-separated), each the argmax of a
      full forward of the whole sequence so far (float64, no cache)
  same-tensors A.safetensors B.safetensors
      every tensor of A is in B with the same dtype, shape and bytes
  damage DIR drop|transpose NAME
      rewrites DIR/model.safetensors without tensor NAME or with its shape reversed
  same-hf DIR_A DIR_B
      the weights of two HF checkpoints are bit for bit the same (GPT-2's
      "transformer." prefix and non-parameter buffers aside)
"""
import json
import os
import struct
import sys

import numpy as np

# ---- safetensors ------------------------------------------------------------


def f32_to_bf16_bits(a):
    """Round to nearest even, as torch does."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, dtype):
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.asarray(a, dtype=np.float32)
        if name.endswith(".attn.bias"):  # the causal mask, a bool buffer
            raw = a.astype(np.bool_).tobytes()
            header[name] = {"dtype": "BOOL", "shape": list(a.shape),
                            "data_offsets": [offset, offset + len(raw)]}
            blobs.append(raw)
            offset += len(raw)
            continue
        if dtype == "F32":
            raw = a.astype("<f4").tobytes()
        elif dtype == "BF16":
            raw = f32_to_bf16_bits(a).astype("<u2").tobytes()
        else:
            raw = a.astype("<f2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path, raw=False):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        lo, hi = d["data_offsets"]
        chunk = body[lo:hi]
        if raw:
            out[name] = (d["dtype"], tuple(d["shape"]), chunk)
            continue
        if d["dtype"] == "F32":
            a = np.frombuffer(chunk, dtype="<f4")
        elif d["dtype"] == "F16":
            a = np.frombuffer(chunk, dtype="<f2")
        elif d["dtype"] == "BOOL":
            a = np.frombuffer(chunk, dtype=np.bool_)
        elif d["dtype"] == "BF16":
            a = (np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: {name}: dtype {d['dtype']}")
        out[name] = a.astype(np.float64).reshape(d["shape"])
    return out


def read_checkpoint(d, raw=False):
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single, raw)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for file in sorted(set(weight_map.values())):
        out.update(read_safetensors(os.path.join(d, file), raw))
    return out


# ---- random tiny checkpoints ------------------------------------------------

GPT2_CONFIG = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 32,
               "n_layer": 2, "n_head": 4, "n_positions": 16, "vocab_size": 256,
               "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
                "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
                "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 16,
                "rms_norm_eps": 1e-6, "rope_theta": 1000.0, "hidden_act": "silu",
                "tie_word_embeddings": False}


def random_gpt2(cfg, rng, prefix):
    C, V, P = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    w = lambda *s: rng.normal(0, 0.2, s)
    t = {"wte.weight": rng.normal(0, 0.5, (V, C)), "wpe.weight": rng.normal(0, 0.3, (P, C))}
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            t[h + ln + ".weight"] = 1 + rng.normal(0, 0.1, C)
            t[h + ln + ".bias"] = rng.normal(0, 0.1, C)
        t[h + "attn.c_attn.weight"] = w(C, 3 * C)  # Conv1D: (in, out)
        t[h + "attn.c_attn.bias"] = rng.normal(0, 0.1, 3 * C)
        t[h + "attn.c_proj.weight"] = w(C, C)
        t[h + "attn.c_proj.bias"] = rng.normal(0, 0.1, C)
        t[h + "mlp.c_fc.weight"] = w(C, 4 * C)
        t[h + "mlp.c_fc.bias"] = rng.normal(0, 0.1, 4 * C)
        t[h + "mlp.c_proj.weight"] = w(4 * C, C)
        t[h + "mlp.c_proj.bias"] = rng.normal(0, 0.1, C)
        # The causal-mask buffers older files carry (not parameters).
        t[h + "attn.bias"] = np.tril(np.ones((P, P))).reshape(1, 1, P, P)
        t[h + "attn.masked_bias"] = np.array(-1e4)
    t["ln_f.weight"] = 1 + rng.normal(0, 0.1, C)
    t["ln_f.bias"] = rng.normal(0, 0.1, C)
    return {prefix + k: v for k, v in t.items()}


def random_llama(cfg, rng):
    C, V, F = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, G = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = C // H
    w = lambda *s: rng.normal(0, 0.2, s)
    t = {"model.embed_tokens.weight": rng.normal(0, 0.5, (V, C))}
    for i in range(cfg["num_hidden_layers"]):
        h = f"model.layers.{i}."
        t[h + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, C)
        t[h + "self_attn.q_proj.weight"] = w(H * D, C)  # nn.Linear: (out, in)
        t[h + "self_attn.k_proj.weight"] = w(G * D, C)
        t[h + "self_attn.v_proj.weight"] = w(G * D, C)
        t[h + "self_attn.o_proj.weight"] = w(C, H * D)
        t[h + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, C)
        t[h + "mlp.gate_proj.weight"] = w(F, C)
        t[h + "mlp.up_proj.weight"] = w(F, C)
        t[h + "mlp.down_proj.weight"] = w(C, F)
    t["model.norm.weight"] = 1 + rng.normal(0, 0.1, C)
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = w(V, C)
    return t


def write(args):
    family, d = args[0], args[1]
    rest = [a for a in args[2:] if a != "--tied"]
    opts = dict(zip(rest[0::2], rest[1::2]))
    seed, dtype = int(opts.get("--seed", 1)), opts.get("--dtype", "F32")
    shards = int(opts.get("--shards", 1))
    rng = np.random.default_rng(seed)
    if family == "gpt2":
        cfg = dict(GPT2_CONFIG)
        t = random_gpt2(cfg, rng, "transformer." if seed % 2 else "")
    else:
        cfg = dict(LLAMA_CONFIG, tie_word_embeddings="--tied" in args)
        t = random_llama(cfg, rng)
    cfg["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = list(t)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), t, dtype)
        return
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: t[n] for n in names[s::shards]}
        write_safetensors(os.path.join(d, file), part, dtype)
        weight_map.update({n: file for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


# ---- the models -------------------------------------------------------------


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1 + np.exp(-x))


def causal_attention(q, k, v):
    """q, k, v: (heads, T, D) -> (T, heads * D)."""
    H, T, D = q.shape
    s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(1, 0, 2).reshape(T, H * D)


def gpt2_logits(cfg, t, tokens):
    g = lambda n: t["transformer." + n] if "transformer." + n in t else t[n]
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    T = len(tokens)
    x = g("wte.weight")[tokens] + g("wpe.weight")[:T]
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        a = layer_norm(x, g(h + "ln_1.weight"), g(h + "ln_1.bias"), eps)
        qkv = a @ g(h + "attn.c_attn.weight") + g(h + "attn.c_attn.bias")  # Conv1D: x W + b
        q, k, v = (qkv[:, j * C:(j + 1) * C].reshape(T, H, C // H).transpose(1, 0, 2)
                   for j in range(3))
        y = causal_attention(q, k, v)
        x = x + y @ g(h + "attn.c_proj.weight") + g(h + "attn.c_proj.bias")
        a = layer_norm(x, g(h + "ln_2.weight"), g(h + "ln_2.bias"), eps)
        m = gelu_new(a @ g(h + "mlp.c_fc.weight") + g(h + "mlp.c_fc.bias"))
        x = x + m @ g(h + "mlp.c_proj.weight") + g(h + "mlp.c_proj.bias")
    x = layer_norm(x, g("ln_f.weight"), g("ln_f.bias"), eps)
    head = t["lm_head.weight"] if cfg.get("tie_word_embeddings", True) is False else g("wte.weight")
    return x @ head.T


def rope(x, theta):
    """x: (heads, T, D), rotate-half form."""
    _, T, D = x.shape
    inv_freq = theta ** (-np.arange(0, D, 2) / D)
    ang = np.arange(T)[:, None] * inv_freq[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)
    sin = np.concatenate([np.sin(ang)] * 2, -1)
    rot = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + rot * sin


def llama_logits(cfg, t, tokens):
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    G = cfg.get("num_key_value_heads", H)
    D, eps, theta = C // H, cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    T = len(tokens)
    x = t["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        h = f"model.layers.{i}."
        a = rms_norm(x, t[h + "input_layernorm.weight"], eps)
        q = (a @ t[h + "self_attn.q_proj.weight"].T).reshape(T, H, D).transpose(1, 0, 2)
        k = (a @ t[h + "self_attn.k_proj.weight"].T).reshape(T, G, D).transpose(1, 0, 2)
        v = (a @ t[h + "self_attn.v_proj.weight"].T).reshape(T, G, D).transpose(1, 0, 2)
        q, k = rope(q, theta), rope(k, theta)
        k, v = np.repeat(k, H // G, axis=0), np.repeat(v, H // G, axis=0)  # repeat_kv
        x = x + causal_attention(q, k, v) @ t[h + "self_attn.o_proj.weight"].T
        a = rms_norm(x, t[h + "post_attention_layernorm.weight"], eps)
        m = silu(a @ t[h + "mlp.gate_proj.weight"].T) * (a @ t[h + "mlp.up_proj.weight"].T)
        x = x + m @ t[h + "mlp.down_proj.weight"].T
    x = rms_norm(x, t["model.norm.weight"], eps)
    tied = cfg.get("tie_word_embeddings", False)
    return x @ (t["model.embed_tokens.weight"] if tied else t["lm_head.weight"]).T


def cross_entropy(logits, targets):
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -logp[np.arange(len(targets)), targets]


def validation_starts(n, T, B, batches, val_fraction):
    """The windows of model/data.hpp's text_corpus::val_batch, as documented."""
    split = int(float(n) * (1.0 - val_fraction))
    val_size = n - split
    nb = max(1, ((val_size - 1) // T) // B)
    total, room = nb * B, val_size - T - 1
    out = []
    for i in range(min(batches, nb)):
        out.append([split + (room * ((i % nb) + r * nb) // (total - 1) if total > 1 else 0)
                    for r in range(B)])
    return out


def loss(args):
    d, data = args[0], args[1]
    opts = dict(zip(args[2::2], args[3::2]))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    t = read_checkpoint(d)
    gpt2 = cfg["architectures"][0] == "GPT2LMHeadModel"
    T = cfg["n_positions"] if gpt2 else int(opts.get("--seq", cfg["max_position_embeddings"]))
    tokens = np.frombuffer(open(data, "rb").read(), dtype=np.uint8).astype(np.int64)
    batch_means = []
    for starts in validation_starts(len(tokens), T, int(opts["--batch"]),
                                    int(opts["--eval-batches"]), float(opts["--val-fraction"])):
        per_token = []
        for s in starts:
            x, y = tokens[s:s + T], tokens[s + 1:s + T + 1]
            logits = gpt2_logits(cfg, t, x) if gpt2 else llama_logits(cfg, t, x)
            per_token.append(cross_entropy(logits, y))
        batch_means.append(np.mean(per_token))
    print(repr(float(np.mean(batch_means))))


def greedy(args):
    d = args[0]
    opts = dict(zip(args[1::2], args[2::2]))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    t = read_checkpoint(d)
    forward = gpt2_logits if cfg["architectures"][0] == "GPT2LMHeadModel" else llama_logits
    tokens = [int(x) for x in opts["--prompt-ids"].split(",")]
    new = []
    for _ in range(int(opts["--new"])):
        last = forward(cfg, t, np.array(tokens + new))[-1]
        top2 = np.sort(last)[-2:]
        if top2[1] - top2[0] < 1e-4 * max(1.0, abs(top2[1])):  # float32 may pick either
            print(f"warning: near tie at new token {len(new)}: {top2}", file=sys.stderr)
        new.append(int(np.argmax(last)))
    print(",".join(map(str, new)))


def damage(args):
    """damage DIR drop|transpose NAME: rewrites DIR/model.safetensors without
    tensor NAME, or with NAME's two dimensions swapped (its bytes kept)."""
    path = os.path.join(args[0], "model.safetensors")
    tensors = read_safetensors(path, raw=True)
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, chunk) in tensors.items():
        if name == args[2]:
            if args[1] == "drop":
                continue
            shape = shape[::-1]
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(chunk)]}
        blobs.append(chunk)
        offset += len(chunk)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def same_tensors(args):
    a, b = read_safetensors(args[0], raw=True), read_safetensors(args[1], raw=True)
    bad = [n for n in a if n not in b or a[n] != b[n]]
    if bad or len(a) != len(b):
        raise SystemExit(f"tensors differ: {bad[:5]} ({len(a)} vs {len(b)} tensors)")


def same_hf(args):
    ignored = (".attn.bias", ".attn.masked_bias")
    strip = lambda t: {n.removeprefix("transformer."): v for n, v in t.items()
                       if not n.endswith(ignored)}
    a, b = strip(read_checkpoint(args[0], raw=True)), strip(read_checkpoint(args[1], raw=True))
    bad = [n for n in a if n not in b or a[n] != b[n]]
    if bad or set(a) != set(b):
        raise SystemExit(f"weights differ: {bad[:5]}; only in one: {sorted(set(a) ^ set(b))[:5]}")


if __name__ == "__main__":
    {"write": write, "loss": loss, "same-tensors": same_tensors, "same-hf": same_hf,
     "damage": damage, "greedy": greedy}[sys.argv[1]](sys.argv[2:])
