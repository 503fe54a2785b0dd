#!/usr/bin/env python3
"""Runs an attnscope converted model (attnscope SPEC 7) with PyTorch alone.

A converted model directory holds the original Hugging Face config.json and weights plus
feature_maps.safetensors: one feature map phi per attention head. Every attention layer runs causal
linear attention

    Ahat_ij = phi(q_i).phi(k_j) / sum_{m<=i} phi(q_i).phi(k_m),   j <= i

and everything else is the original model. This file needs torch and the Python standard library
only (the safetensors format is parsed here), so the directory runs where attnscope is not installed.

    import attnscope_linear
    model = attnscope_linear.load("OUT")          # a torch.nn.Module
    logits = model(torch.tensor([[1, 2, 3]]))     # float32 [B, L, vocab]

    python3 attnscope_linear.py OUT --ids 1,2,3 --new-tokens 20   # greedy continuation ids

Generation runs the recurrent form: per head a state S = sum phi(k) v^T [M, d] and z = sum phi(k)
[M] carries the prefix, so each new token costs the same at every position (model(ids, cache, pos)
with a cache from model.new_cache()).

Architectures: GPT-2, GPT-NeoX (Pythia), Llama (grouped-query attention included). Feature maps: prf, prf-orthogonal, prf-hyperbolic, learned-prf, hedgehog
(exp, softmax, softmax-joint; tied or untied), t2r, elu, relu, exp, taylor2, flex-stationary,
flex-nonstationary (signed kernel values are used raw, as attnscope's batch form does).
"""
import argparse
import json
import math
import os
import struct
import sys

import torch

_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


def read_safetensors(path):
    """All tensors of a .safetensors file, by name (the format: u64 header size, JSON header, data)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES[e["dtype"]]
        start, end = e["data_offsets"]
        buf = bytearray(data[base + start:base + end])
        t = torch.frombuffer(buf, dtype=dtype) if len(buf) else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(e["shape"])
    return out


def read_weights(directory):
    """model.safetensors, or the shards of model.safetensors.index.json."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        out = {}
        for name in files:
            out.update(read_safetensors(os.path.join(directory, name)))
        return out
    return read_safetensors(os.path.join(directory, "model.safetensors"))


# ---- feature maps: each returns (values, log_scale) with phi = exp(log_scale) * values ----------

def _shift(logits):
    m = logits.max(-1, keepdim=True).values
    return torch.exp(logits - m), m


class FeatureMap:
    def __init__(self, spec, tensors, d, features):
        self.name = spec["name"]
        self.activation = spec.get("activation", "exp")
        self.temperature = float(spec.get("temperature", 1.0))
        self.t = {k: v.to(torch.float64) for k, v in tensors.items()}
        self.d = d
        self.features = features

    def query(self, x):
        return self._apply(x, "q")

    def key(self, x):
        return self._apply(x, "k")

    def _linear(self, x, side):
        if "W" in self.t:
            return x @ self.t["W"] + self.t["b"]
        return x @ self.t[side + ".W"] + self.t[side + ".b"]

    def _apply(self, x, side):
        n, d = self.name, self.d
        zero = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
        if n in ("prf", "prf-orthogonal", "learned-prf", "prf-hyperbolic"):
            xs = x / d ** 0.25
            half_sq = 0.5 * (xs * xs).sum(-1, keepdim=True)
            w = self.t["z"] if n == "learned-prf" else self.t["w"]
            proj = xs @ w.T
            if n == "prf-hyperbolic":
                proj = torch.cat([proj, -proj], -1)
            logits = proj - half_sq - 0.5 * math.log(proj.shape[-1])
            if n == "learned-prf":
                logits = logits + 0.5 * self.t["alpha"]
            return _shift(logits)
        if n == "hedgehog":
            u = self._linear(x, side)
            if self.activation == "exp":
                m = u.abs().max(-1, keepdim=True).values
                return torch.cat([torch.exp(u - m), torch.exp(-u - m)], -1), m
            if self.activation == "softmax":
                return torch.cat([torch.softmax(u, -1), torch.softmax(-u, -1)], -1), zero
            if self.activation == "softmax-joint":
                return torch.softmax(torch.cat([u, -u], -1), -1), zero
            raise ValueError("hedgehog activation %r" % self.activation)
        if n == "t2r":
            return torch.relu(self._linear(x, side)), zero
        if n == "elu":
            return 1 + torch.nn.functional.elu(x), zero
        if n == "relu":
            return torch.relu(x), zero
        if n == "exp":
            return _shift(self.temperature * x)
        if n in ("flex-stationary", "flex-nonstationary"):
            # exp(|x|^2 / e^tau) / sqrt(n) [cos, sin]: the norm factor is the log scale
            log_scale = (x * x).sum(-1, keepdim=True) * torch.exp(-self.t["tau"]) - 0.5 * math.log(self.t[
                "omega" if n == "flex-stationary" else "omega1"].shape[0])
            if n == "flex-stationary":
                a = x @ self.t["omega"].T
                return torch.cat([torch.cos(a), torch.sin(a)], -1), log_scale
            w1, w2 = self.t["omega1"], self.t["omega2"]
            a = x @ (0.5 * (w1 + w2)).T
            c = torch.cos(x @ (0.5 * (w1 - w2)).T)
            return torch.cat([torch.cos(a) * c, torch.sin(a) * c], -1), log_scale
        if n == "taylor2":
            s = d ** 0.25
            xs = x / s
            outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2) / (math.sqrt(2.0) * math.sqrt(d))
            return torch.cat([torch.ones_like(zero), xs, outer], -1), zero
        raise ValueError("feature map %r is not supported by attnscope_linear.py" % n)


def linear_attention(fq, fk, v, state=None):
    """Causal linear attention; fq, fk (values [B, L, M], log_scale [B, L, 1]), v [B, L, d], float64.

    Keys are weighted by exp(log_scale - c), c the largest key log scale seen so far; the query's
    scale cancels. `state` (a dict, empty at the start) carries the keys and values of earlier
    calls: S = sum phi(k) v^T [B, M, d], z = sum phi(k) [B, M] relative to c [B, 1, 1]; it is
    updated with this call's keys, so a sequence can be fed in pieces (one token at a time).
    """
    vq, _ = fq
    vk, lk = fk
    c = lk.max(1, keepdim=True).values
    if state:
        c = torch.maximum(c, state["c"])
    vk = vk * torch.exp(lk - c)
    kern = vq @ vk.transpose(1, 2)
    L = kern.shape[-1]
    kern = kern * torch.ones(L, L, dtype=kern.dtype).tril()
    num, den = kern @ v, kern.sum(-1, keepdim=True)
    if state:
        keep = torch.exp(state["c"] - c)
        S, z = state["S"] * keep, state["z"] * keep.squeeze(-1)
        num = num + vq @ S
        den = den + (vq * z.unsqueeze(1)).sum(-1, keepdim=True)
    if state is not None:
        S_new = vk.transpose(1, 2) @ v
        z_new = vk.sum(1)
        if state:
            S_new, z_new = S_new + S, z_new + z
        state.update(S=S_new, z=z_new, c=c)
    # A query with no positive weight (ReLU-type maps) is 0/0: that head contributes 0, as in attnscope.
    y = num / den
    return torch.where(torch.isnan(y), torch.zeros_like(y), y)


def _cache(n_layer, n_head):
    return [[{} for _ in range(n_head)] for _ in range(n_layer)]


def _rope_tables(theta, rotary_dim, pos, L):
    """cos, sin [1, L, 1, rotary_dim / 2] of positions pos .. pos + L - 1 (float64, then float32)."""
    inv = 1.0 / torch.pow(torch.tensor(theta, dtype=torch.float64),
                          torch.arange(0, rotary_dim // 2, dtype=torch.float64) * 2 / rotary_dim)
    ang = torch.outer(torch.arange(pos, pos + L, dtype=torch.float64), inv)
    return (t.to(torch.float32)[None, :, None, :] for t in (torch.cos(ang), torch.sin(ang)))


def _rotate_half(x, cos, sin, rotary_dim):
    """RoPE on the first rotary_dim dims of x [B, L, heads, d] (rotate-half layout)."""
    half = rotary_dim // 2
    a, b, rest = x[..., :half], x[..., half:rotary_dim], x[..., rotary_dim:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], -1)


# ---- GPT-2 -------------------------------------------------------------------------------------

class LinearGPT2(torch.nn.Module):
    def __init__(self, config, weights, maps):
        super().__init__()
        self.c = config
        p = "transformer." if "transformer.wte.weight" in weights else ""
        self.w = {k[len(p):] if k.startswith(p) else k: v.to(torch.float32) for k, v in weights.items()}
        self.maps = maps  # [layer][head] -> FeatureMap
        self.n_layer = config["n_layer"]
        self.n_head = config["n_head"]
        self.d_model = config["n_embd"]
        self.eps = config.get("layer_norm_epsilon", 1e-5)
        act = config.get("activation_function", "gelu_new")
        self.gelu_approx = "none" if act == "gelu" else "tanh"
        tied = config.get("tie_word_embeddings", True)
        self.lm_head = self.w["lm_head.weight"] if (not tied and "lm_head.weight" in self.w) else self.w["wte.weight"]

    def _ln(self, x, name):
        return torch.nn.functional.layer_norm(x, (self.d_model,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def new_cache(self):
        return _cache(self.n_layer, self.n_head)

    def forward(self, ids, cache=None, pos=0):
        B, L = ids.shape
        D, H = self.d_model, self.n_head
        d = D // H
        w = self.w
        x = w["wte.weight"][ids] + w["wpe.weight"][pos:pos + L]
        for s in range(self.n_layer):
            pre = "h.%d." % s
            h = self._ln(x, pre + "ln_1")
            qkv = h @ w[pre + "attn.c_attn.weight"] + w[pre + "attn.c_attn.bias"]  # Conv1D: [in, out]
            q, k, v = qkv.split(D, -1)
            heads = []
            for j in range(H):
                sl = slice(j * d, (j + 1) * d)
                qh, kh, vh = (t[..., sl].to(torch.float64) for t in (q, k, v))
                m = self.maps[s][j]
                heads.append(linear_attention(m.query(qh), m.key(kh), vh, cache[s][j] if cache else None))
            a = torch.cat(heads, -1).to(torch.float32)
            x = x + a @ w[pre + "attn.c_proj.weight"] + w[pre + "attn.c_proj.bias"]
            h = self._ln(x, pre + "ln_2")
            u = torch.nn.functional.gelu(h @ w[pre + "mlp.c_fc.weight"] + w[pre + "mlp.c_fc.bias"], approximate=self.gelu_approx)
            x = x + u @ w[pre + "mlp.c_proj.weight"] + w[pre + "mlp.c_proj.bias"]
        x = self._ln(x, "ln_f")
        return x @ self.lm_head.T


# ---- Llama (HF layout: RMSNorm, rotate-half RoPE, SwiGLU, grouped-query attention) ---------------

class LinearLlama(torch.nn.Module):
    def __init__(self, config, weights, maps):
        super().__init__()
        self.c = config
        self.w = {k: v.to(torch.float32) for k, v in weights.items()}
        self.maps = maps
        self.n_layer = config["num_hidden_layers"]
        self.d_model = config["hidden_size"]
        self.n_head = config["num_attention_heads"]
        self.n_kv = config.get("num_key_value_heads") or self.n_head
        self.head_dim = config.get("head_dim") or self.d_model // self.n_head
        self.eps = config.get("rms_norm_eps", 1e-6)
        self.theta = config.get("rope_theta", 10000.0)
        tied = config.get("tie_word_embeddings", False)
        self.lm_head = self.w["lm_head.weight"] if (not tied and "lm_head.weight" in self.w) else self.w["model.embed_tokens.weight"]

    def _rms(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def new_cache(self):
        return _cache(self.n_layer, self.n_head)

    def forward(self, ids, cache=None, pos=0):
        B, L = ids.shape
        H, Hkv, d = self.n_head, self.n_kv, self.head_dim
        w = self.w
        cos, sin = _rope_tables(self.theta, d, pos, L)
        x = w["model.embed_tokens.weight"][ids]
        for s in range(self.n_layer):
            pre = "model.layers.%d." % s
            h = self._rms(x, w[pre + "input_layernorm.weight"])
            q = _rotate_half((h @ w[pre + "self_attn.q_proj.weight"].T).view(B, L, H, d), cos, sin, d)
            k = _rotate_half((h @ w[pre + "self_attn.k_proj.weight"].T).view(B, L, Hkv, d), cos, sin, d)
            v = (h @ w[pre + "self_attn.v_proj.weight"].T).view(B, L, Hkv, d)
            heads = []
            for j in range(H):
                kv = j // (H // Hkv)  # grouped-query: kv head kv serves query heads kv*g .. kv*g+g-1
                m = self.maps[s][j]
                qh, kh, vh = (t.to(torch.float64) for t in (q[:, :, j], k[:, :, kv], v[:, :, kv]))
                heads.append(linear_attention(m.query(qh), m.key(kh), vh, cache[s][j] if cache else None))
            a = torch.cat(heads, -1).to(torch.float32)
            x = x + a @ w[pre + "self_attn.o_proj.weight"].T
            h = self._rms(x, w[pre + "post_attention_layernorm.weight"])
            u = torch.nn.functional.silu(h @ w[pre + "mlp.gate_proj.weight"].T) * (h @ w[pre + "mlp.up_proj.weight"].T)
            x = x + u @ w[pre + "mlp.down_proj.weight"].T
        x = self._rms(x, w["model.norm.weight"])
        return x @ self.lm_head.T


# ---- GPT-NeoX (Pythia: fused per-head qkv [H, 3, d], partial rotary, parallel residual) ---------

class LinearNeoX(torch.nn.Module):
    def __init__(self, config, weights, maps):
        super().__init__()
        self.c = config
        self.w = {k[len("gpt_neox."):] if k.startswith("gpt_neox.") else k: v.to(torch.float32) for k, v in weights.items()}
        self.maps = maps
        self.n_layer = config["num_hidden_layers"]
        self.d_model = config["hidden_size"]
        self.n_head = config["num_attention_heads"]
        self.head_dim = self.d_model // self.n_head
        self.eps = config.get("layer_norm_eps", 1e-5)
        pct = config.get("rotary_pct", config.get("partial_rotary_factor", 1.0))
        self.rotary_dim = int(self.head_dim * pct)  # HF truncates, as attnscope does
        self.theta = config.get("rotary_emb_base", config.get("rope_theta", 10000.0))
        self.parallel = config.get("use_parallel_residual", True)
        act = config.get("hidden_act", "gelu")
        self.gelu_approx = "none" if act == "gelu" else "tanh"
        tied = config.get("tie_word_embeddings", False)
        self.lm_head = self.w["embed_in.weight"] if tied else self.w["embed_out.weight"]

    def new_cache(self):
        return _cache(self.n_layer, self.n_head)

    def _ln(self, x, name):
        return torch.nn.functional.layer_norm(x, (self.d_model,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def _linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if name + ".bias" in self.w else y

    def forward(self, ids, cache=None, pos=0):
        B, L = ids.shape
        H, d, r = self.n_head, self.head_dim, self.rotary_dim
        cos, sin = _rope_tables(self.theta, r, pos, L)
        x = self.w["embed_in.weight"][ids]
        for s in range(self.n_layer):
            pre = "layers.%d." % s
            h = self._ln(x, pre + "input_layernorm")
            qkv = self._linear(h, pre + "attention.query_key_value").view(B, L, H, 3, d)
            q = _rotate_half(qkv[..., 0, :], cos, sin, r)
            k = _rotate_half(qkv[..., 1, :], cos, sin, r)
            v = qkv[..., 2, :]
            heads = []
            for j in range(H):
                m = self.maps[s][j]
                qh, kh, vh = (t[:, :, j].to(torch.float64) for t in (q, k, v))
                heads.append(linear_attention(m.query(qh), m.key(kh), vh, cache[s][j] if cache else None))
            a = self._linear(torch.cat(heads, -1).to(torch.float32), pre + "attention.dense")

            def mlp(t):
                u = torch.nn.functional.gelu(self._linear(t, pre + "mlp.dense_h_to_4h"), approximate=self.gelu_approx)
                return self._linear(u, pre + "mlp.dense_4h_to_h")
            if self.parallel:
                x = x + a + mlp(self._ln(x, pre + "post_attention_layernorm"))
            else:
                x = x + a
                x = x + mlp(self._ln(x, pre + "post_attention_layernorm"))
        x = self._ln(x, "final_layer_norm")
        return x @ self.lm_head.T


def load(directory):
    """The converted model in `directory` as a torch.nn.Module (forward(ids [B, L]) -> logits)."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    a = config.get("attnscope")
    if not a or a.get("format_version") != 1:
        raise ValueError("%s/config.json has no attnscope object of format_version 1" % directory)
    arch = (config.get("architectures") or [""])[0]
    if config.get("model_type") == "gpt2" or arch == "GPT2LMHeadModel":
        kind = LinearGPT2
    elif config.get("model_type") == "llama" or arch == "LlamaForCausalLM":
        kind = LinearLlama
    elif config.get("model_type") == "gpt_neox" or arch == "GPTNeoXForCausalLM":
        kind = LinearNeoX
    else:
        raise ValueError("attnscope_linear.py runs GPT-2, GPT-NeoX and Llama models; this is %r" % (arch or config.get("model_type")))
    wdir = directory
    if not (os.path.exists(os.path.join(directory, "model.safetensors"))
            or os.path.exists(os.path.join(directory, "model.safetensors.index.json"))):
        wdir = a["source"]["path"]
    weights = read_weights(wdir)
    fm = read_safetensors(os.path.join(directory, "feature_maps.safetensors"))
    if kind is LinearGPT2:
        n_layer, n_head = config["n_layer"], config["n_head"]
        d = config["n_embd"] // n_head
    else:
        n_layer, n_head = config["num_hidden_layers"], config["num_attention_heads"]
        d = config.get("head_dim") or config["hidden_size"] // n_head
    maps = []
    for s in range(n_layer):
        dims = a["dims"][s]
        row = []
        for h in range(n_head):
            prefix = "layers.%d.heads.%d.feature_map." % (s, h)
            tensors = {k[len(prefix):]: v for k, v in fm.items() if k.startswith(prefix)}
            M = dims[h] if isinstance(dims, list) else dims
            row.append(FeatureMap(a["feature_map"], tensors, d, M))
        maps.append(row)
    model = kind(config, weights, maps)
    model.eval()
    return model


def generate(model, ids, new_tokens):
    """Greedy continuation (the new ids only) in the recurrent form: the prompt fills the state once,
    then each token is one step. When positions run out the state restarts over the last n_ctx
    tokens, as attnscope's generate does."""
    seq = list(ids)
    n_ctx = model.c.get("n_positions") or model.c.get("max_position_embeddings") or model.c.get("n_ctx", 1024)
    with torch.no_grad():
        def restart():
            cache = model.new_cache()
            window = seq[-n_ctx:]
            return cache, model(torch.tensor([window], dtype=torch.long), cache, 0)[0, -1], len(window)
        cache, logits, pos = restart()
        for i in range(new_tokens):
            seq.append(int(logits.argmax()))
            if i + 1 == new_tokens:
                break
            if pos >= n_ctx:
                cache, logits, pos = restart()
            else:
                logits = model(torch.tensor([[seq[-1]]], dtype=torch.long), cache, pos)[0, -1]
                pos += 1
    return seq[len(ids):]


def main(argv=None):
    ap = argparse.ArgumentParser(description="Run an attnscope converted model with PyTorch alone")
    ap.add_argument("directory")
    ap.add_argument("--ids", required=True, help="comma-separated prompt token ids")
    ap.add_argument("--new-tokens", type=int, default=20)
    args = ap.parse_args(argv)
    ids = [int(t) for t in args.ids.split(",") if t.strip()]
    model = load(args.directory)
    print(" ".join(str(t) for t in generate(model, ids, args.new_tokens)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
