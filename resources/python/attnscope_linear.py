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

load() checks what attnscope checks before it runs anything: config.json and its "attnscope" object
(format_version, feature map, dims against the model's layers and heads), every weight (name, shape,
finite), every head's feature-map tensors (names, shapes, float32, finite, the dims they give), and
with weights referenced by attnscope.source, that those weights still have the recorded sha256;
attnscope.window (a non-negative integer) and, when W > 0, every head's gamma (a finite float32
scalar; none when W is 0 or absent). A model it refuses raises ConvertedModelError, whose message
is "FILE: problem" in attnscope's words; run as a program it prints that line and exits 1.

Generation runs the recurrent form: per head a state S = sum phi(k) v^T [M, d] and z = sum phi(k)
[M] carries the prefix, so each new token costs the same at every position (model(ids, cache, pos)
with a cache from model.new_cache()). There a layer's heads of one type, M, window and decay run as
one group (head_groups, attend_groups): their maps stacked, one feature call for the group, their
states stacked and updated together.

Hybrid heads (attnscope.window W > 0, LoLCATs' linear + sliding window; SPEC 5): query i gives key
j <= i the weight g exp(q_i.k_j / sqrt d) when i - j < W and (1 - g) phi(q_i).phi(k_j) when
i - j >= W, normalized by the row's sum, with g = sigmoid(gamma) from the head's scalar
layers.{s}.heads.{h}.gamma in feature_maps.safetensors (hybrid_attention). Their recurrent state
is S, z over the keys older than the window plus a ring of the last W keys and values.

Decayed heads (attnscope.decay "fixed" or "gated" for every head, or each head's own in
attnscope.head_decays; SPEC 5, paper 003's RetNet/SSD mixers): the map's weight of key j for query i is multiplied by exp(Lambda_i - Lambda_j), Lambda_i = sum_{t <= i} log a_t;
"fixed": a = sigmoid(delta) from the head's scalar layers.{s}.heads.{h}.decay.delta (Lambda_i =
(i + 1) log a); "gated": a_t = sigmoid(w.x_t + b) from the layer's input x_t (the normed hidden state
the projections read) with the head's decay.w [d_model] and decay.b []. The keys' log scales carry
- Lambda_j and the queries' + Lambda_i (decay_lambda, attend), so the same linear and hybrid paths run
them; each row reads its keys relative to the largest scale it can see.

Architectures: GPT-2, GPT-NeoX (Pythia), the Llama family: Llama (grouped-query attention, llama3 rope scaling), Mistral, Qwen2, Qwen3. Feature maps: prf, prf-orthogonal, prf-hyperbolic, learned-prf, hedgehog
(exp, softmax, softmax-joint; tied or untied), t2r, elu, relu, exp, taylor2, flex-stationary,
flex-nonstationary (signed kernel values are used raw, as attnscope's batch form does).
"""
import argparse
import hashlib
import json
import math
import os
import re
import struct
import sys
import types

import torch


# ---- errors: one type, "FILE: problem" -----------------------------------------------------------

class ConvertedModelError(ValueError):
    """A converted model (or one of its files) that cannot be run; str() is "FILE: problem"."""


def _fail(where, what):
    raise ConvertedModelError("%s: %s" % (where, what))


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _shape_str(shape):
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def _read_json(path):
    """The JSON value in `path`; an error naming the file when it is missing or not JSON."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        _fail(path, "cannot be read (%s)" % (e.strerror or e))
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        _fail(path, "not valid JSON (%s)" % e)


# ---- safetensors -------------------------------------------------------------------------------

_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def _unique_keys(pairs):
    """json's object_pairs_hook: a header naming a key twice is ambiguous (json keeps the last)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise KeyError(k)
        out[k] = v
    return out


def _header_entry(name, e, where):
    """(dtype name, shape, begin, end) of one header entry, checked as attnscope's header parser does."""
    if not isinstance(e, dict):
        _fail(where, "header entry is not a JSON object")
    dtype, shape, offsets = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if not isinstance(dtype, str):
        _fail(where, 'missing or non-string "dtype"')
    if dtype not in _DTYPES:
        _fail(where, 'unknown dtype "%s"' % dtype)
    if not isinstance(shape, list):
        _fail(where, 'missing or non-array "shape"')
    if not all(_is_int(s) and s >= 0 for s in shape):
        _fail(where, "shape has a dimension that is not a non-negative integer")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) and o >= 0 for o in offsets)):
        _fail(where, '"data_offsets" must be two non-negative integers')
    begin, end = offsets
    if end < begin:
        _fail(where, "data_offsets end before they begin")
    want = math.prod(shape) * _DTYPE_BYTES[dtype]
    if end - begin != want:
        _fail(where, "shape x dtype needs %d bytes but data_offsets span %d" % (want, end - begin))
    return dtype, shape, begin, end


def read_safetensors(path):
    """All tensors of a .safetensors file, by name (the format: u64 header size, JSON header, data).
    A file that is missing, truncated or whose header lies raises ConvertedModelError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        _fail(path, "cannot be read (%s)" % (e.strerror or e))
    if len(data) < 8:
        _fail(path, "too short for a safetensors file (%d bytes)" % len(data))
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        _fail(path, "header length %d runs past the end of the file (%d bytes): truncated?" % (n, len(data)))
    if n < 2:
        _fail(path, "header is empty")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=_unique_keys)
    except KeyError as e:
        _fail(path, "header has the key '%s' more than once" % e.args[0])
    except (UnicodeDecodeError, ValueError):
        _fail(path, "header is not valid JSON")
    if not isinstance(header, dict):
        _fail(path, "header is not a JSON object")
    base, buffer = 8 + n, len(data) - 8 - n
    out, spans = {}, []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, begin, end = _header_entry(name, e, "%s: tensor '%s'" % (path, name))
        if end > buffer:
            _fail(path, "tensor '%s' ends at byte %d of a data buffer of %d bytes: truncated?" % (name, end, buffer))
        spans.append((begin, end, name))
        buf = bytearray(data[base + begin:base + end])
        t = torch.frombuffer(buf, dtype=_DTYPES[dtype]) if len(buf) else torch.empty(0, dtype=_DTYPES[dtype])
        out[name] = t.reshape(shape)
    spans.sort()
    for (_, a_end, a), (b_begin, _, b) in zip(spans, spans[1:]):
        if b_begin < a_end:
            _fail(path, "tensors '%s' and '%s' overlap in the data buffer" % (a, b))
    return out


def _weights_index(index):
    """The shard file names model.safetensors.index.json lists, sorted (each inside its directory)."""
    j = _read_json(index)
    if not isinstance(j, dict):
        _fail(index, "index is not a JSON object")
    wm = j.get("weight_map")
    if not isinstance(wm, dict):
        _fail(index, 'index has no "weight_map" object')
    for name, shard in wm.items():
        if not isinstance(shard, str):
            _fail(index, "weight_map entry for '%s' is not a file name string" % name)
        if not shard or os.path.isabs(shard) or ".." in shard.replace("\\", "/").split("/"):
            _fail(index, "weight_map entry for '%s' names '%s', which is not a file inside the index's directory" % (name, shard))
    if not wm:
        _fail(index, "index lists no tensors")
    return wm


class Weights:
    """The original model's weights: model.safetensors, or the shards of model.safetensors.index.json.
    get() checks each tensor as attnscope's weight store does: present, of the shape the config
    gives, finite as float32."""

    def __init__(self, directory):
        single = os.path.join(directory, "model.safetensors")
        index = os.path.join(directory, "model.safetensors.index.json")
        self.tensors = {}  # name -> (file, tensor)
        if os.path.exists(single):
            self.source = single
            self.tensors = {k: (single, t) for k, t in read_safetensors(single).items()}
            return
        if not os.path.exists(index):
            _fail(directory, "has no model.safetensors or model.safetensors.index.json")
        self.source = index
        wm = _weights_index(index)
        for shard in sorted(set(wm.values())):
            path = os.path.join(directory, shard)
            if not os.path.exists(path):
                listed = sorted(k for k, v in wm.items() if v == shard)[0]
                _fail(index, "shard '%s' (listed for tensor '%s') does not exist: %s" % (shard, listed, path))
            tensors = read_safetensors(path)
            for name, s in wm.items():
                if s == shard:
                    if name not in tensors:
                        _fail(index, "tensor '%s' is listed in shard '%s' but %s does not contain it" % (name, shard, path))
                    self.tensors[name] = (path, tensors[name])

    def has(self, name):
        return name in self.tensors

    def get(self, name, shape):
        if name not in self.tensors:
            _fail(self.source, "no tensor named '%s'" % name)
        path, t = self.tensors[name]
        where = "%s: tensor '%s'" % (path, name)
        if list(t.shape) != list(shape):
            _fail(where, "expected shape %s but the file has %s" % (_shape_str(shape), _shape_str(t.shape)))
        floating = t.is_floating_point()
        t = t.to(torch.float32)
        bad = ~torch.isfinite(t.reshape(-1)) if floating else None
        if bad is not None and bool(bad.any()):
            _fail(where, "has %d non-finite values (NaN or Inf) as float32, the first at flat index %d"
                  % (int(bad.sum()), int(bad.nonzero()[0, 0])))
        return t


# ---- attnscope.source: the weights a model refers to, and their sha256 ---------------------------
# The same definition as attnscope's (core/src/convert/source_weights.h): the sha256 is of the bytes
# of the weight files in order: a llama2.c .bin itself; in a model directory model.safetensors alone
# (what `sha256sum model.safetensors` prints), or model.safetensors.index.json followed by every
# shard it lists, sorted by name. Each file's size and modification time are recorded beside it; a
# file that still has both is taken as unchanged, any other is hashed.

def source_weight_files(path):
    """(name, full path) of the files attnscope.source.sha256 covers, in hashing order."""
    if os.path.isfile(path):
        return [(os.path.basename(path), path)]
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return [("model.safetensors", os.path.join(path, "model.safetensors"))]
    index = os.path.join(path, "model.safetensors.index.json")
    shards = sorted(set(_weights_index(index).values()))
    return [("model.safetensors.index.json", index)] + [(s, os.path.join(path, s)) for s in shards]


def sha256_files(paths):
    """Lower-case hex sha256 of the files' bytes, one after another."""
    h = hashlib.sha256()
    for p in paths:
        try:
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError as e:
            _fail(p, "cannot be read (%s)" % (e.strerror or e))
    return h.hexdigest()


def _changed_files(record, files):
    """The files whose size or modification time differ from attnscope.source.files: all of them
    when there is no such record (a model converted before it was kept) or it lists other files."""
    by_name = {r.get("name"): r for r in record if isinstance(r, dict)} if isinstance(record, list) else {}
    if not isinstance(record, list) or len(record) != len(files) or sorted(by_name, key=str) != sorted(n for n, _ in files):
        return [full for _, full in files]
    changed = []
    for name, full in files:
        st, r = os.stat(full), by_name[name]
        if not (r.get("size") == st.st_size and r.get("mtime_ns") == st.st_mtime_ns):
            changed.append(full)
    return changed


def _check_source(source, config_file):
    """The referenced weights' directory, after checking them against the recorded sha256 (hashed
    only when a file's size or modification time differs from the record)."""
    path = source["path"]
    if not (os.path.exists(os.path.join(path, "model.safetensors"))
            or os.path.exists(os.path.join(path, "model.safetensors.index.json"))):
        _fail(config_file, "refers to the original weights at %s, which hold no model.safetensors (moved or deleted?)" % path)
    recorded = source.get("sha256")
    if not isinstance(recorded, str):
        _fail(config_file, "attnscope.source has no sha256 of the original weights at %s" % path)
    try:
        files = source_weight_files(path)
    except ConvertedModelError as e:
        _fail(config_file, "refers to the original weights at %s: %s" % (path, e))
    for name, full in files:
        if not os.path.isfile(full):
            _fail(config_file, "refers to the original weights at %s, whose file %s is missing (moved or deleted?)" % (path, name))
    changed = _changed_files(source.get("files"), files)
    if changed:
        now = sha256_files([full for _, full in files])
        if now != recorded:
            _fail(config_file, "refers to the original weights %s, which changed since the conversion: their sha256 is %s, "
                  "attnscope.source.sha256 records %s" % (", ".join(changed), now, recorded))
    return path


# ---- config.json: the model's sizes and the "attnscope" object ----------------------------------

_INT_MAX = 2 ** 31 - 1
_LLAMA_FAMILY = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
_ARCHS = ", ".join(("GPT2LMHeadModel", "GPTNeoXForCausalLM") + _LLAMA_FAMILY)


def _config_int(config, keys, file, default=None):
    """A positive integer field (the first of `keys` present), or `default` when absent."""
    for k in keys:
        v = config.get(k)
        if v is None or (default is None and not _is_int(v)):
            continue
        if not (_is_int(v) and 1 <= v <= _INT_MAX):
            _fail(file, '"%s" = %s must be a positive integer up to %d' % (k, json.dumps(v), _INT_MAX))
        return v
    if default is None:
        _fail(file, 'missing integer field "%s"' % keys[0])
    return default


def _config_number(config, key, default, file):
    v = config.get(key)
    if v is None:
        return default
    if not _is_number(v):
        _fail(file, '"%s" must be a number' % key)
    return float(v)


def _config_bool(config, key, default):
    v = config.get(key)
    return v if isinstance(v, bool) else default


def _config_gelu(config, key, default, file):
    """The tanh approximation or the exact GELU, as torch.nn.functional.gelu's `approximate`."""
    name = config.get(key, default)
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return "tanh"
    if name == "gelu":
        return "none"
    _fail(file, 'activation "%s" is not supported (gelu or gelu_new for this architecture; silu only for Llama)' % name)


def _rope_scaling(config, file):
    """rope_scaling: None (absent, null or rope_type "default") or the llama3 parameters
    (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings); others refused."""
    rs = config.get("rope_scaling")
    if rs is None:
        return None
    if not isinstance(rs, dict):
        _fail(file, "rope_scaling must be an object or null, not %s" % json.dumps(rs))
    kind = rs.get("rope_type", rs.get("type", ""))
    if kind == "default":
        return None
    if kind != "llama3":
        _fail(file, 'rope_scaling of type "%s" is not supported (only "llama3"; found %s)' % (kind, json.dumps(rs)))
    out = []
    for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
        v = rs.get(key)
        if not (_is_number(v) and math.isfinite(v) and v > 0):
            _fail(file, 'rope_scaling (llama3) needs a number "%s" (found %s)' % (key, json.dumps(rs)))
        out.append(float(v))
    if not out[2] > out[1]:
        _fail(file, "rope_scaling: high_freq_factor must be larger than low_freq_factor (HF divides by their difference)")
    return tuple(out)


def model_shape(config, file):
    """The sizes attnscope reads from a Hugging Face config.json (its architecture's field names)."""
    if not isinstance(config, dict):
        _fail(file, "config is not a JSON object")
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    if not arch:
        _fail(file, 'no "architectures" entry; attnscope reads ' + _ARCHS)
    c = types.SimpleNamespace(arch=arch, file=file, head_dim=0, sliding_window=0)
    if arch == "GPT2LMHeadModel":
        c.kind = LinearGPT2
        c.d_model = _config_int(config, ("n_embd", "hidden_size"), file)
        c.n_layer = _config_int(config, ("n_layer", "num_hidden_layers"), file)
        c.n_head = _config_int(config, ("n_head", "num_attention_heads"), file)
        c.n_ctx = _config_int(config, ("n_positions", "n_ctx", "max_position_embeddings"), file)
        c.d_ff = _config_int(config, ("n_inner",), file, 4 * c.d_model)
        c.n_kv_head = c.n_head
    elif arch == "GPTNeoXForCausalLM":
        c.kind = LinearNeoX
        c.d_model = _config_int(config, ("hidden_size",), file)
        c.n_layer = _config_int(config, ("num_hidden_layers",), file)
        c.n_head = _config_int(config, ("num_attention_heads",), file)
        c.n_ctx = _config_int(config, ("max_position_embeddings",), file)
        c.d_ff = _config_int(config, ("intermediate_size",), file, 4 * c.d_model)
        c.n_kv_head = c.n_head
    elif arch in _LLAMA_FAMILY:
        # Llama, Mistral, Qwen2, Qwen3: one layout (LinearLlama); their differences are read there.
        c.kind = LinearLlama
        c.d_model = _config_int(config, ("hidden_size",), file)
        c.n_layer = _config_int(config, ("num_hidden_layers",), file)
        c.n_head = _config_int(config, ("num_attention_heads",), file)
        c.n_ctx = _config_int(config, ("max_position_embeddings",), file)
        c.d_ff = _config_int(config, ("intermediate_size",), file)
        c.n_kv_head = _config_int(config, ("num_key_value_heads",), file, c.n_head)
        # Qwen3Config's head_dim defaults to 128; the others derive it from hidden_size.
        c.head_dim = _config_int(config, ("head_dim",), file, 128 if arch == "Qwen3ForCausalLM" else 0)
        if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM") and _config_bool(config, "use_sliding_window", False):
            _fail(file, "use_sliding_window = true is not supported (Qwen's per-layer window from max_window_layers); "
                  "attnscope runs these models with full causal attention only")
        c.rope_llama3 = _rope_scaling(config, file)
        # Mistral's window over softmax attention: a mixed model's softmax heads keep it.
        sw = config.get("sliding_window")
        c.sliding_window = sw if arch == "MistralForCausalLM" and _is_int(sw) and sw > 0 else 0
    else:
        _fail(file, 'architecture "%s" is not supported; attnscope reads %s' % (arch, _ARCHS))
    c.vocab_size = _config_int(config, ("vocab_size",), file)
    if c.head_dim == 0:
        if c.d_model % c.n_head:
            _fail(file, "hidden size %d is not divisible by %d heads" % (c.d_model, c.n_head))
        c.head_dim = c.d_model // c.n_head
    if c.n_head % c.n_kv_head:
        _fail(file, "%d query heads cannot share %d key/value heads evenly" % (c.n_head, c.n_kv_head))
    return c


FEATURE_MAPS = ("prf", "prf-orthogonal", "prf-hyperbolic", "learned-prf", "hedgehog", "t2r", "elu", "relu",
                "exp", "taylor2", "cosformer", "flex-stationary", "flex-nonstationary")


def parse_header(config, file, n_layer, n_head):
    """The "attnscope" object's feature map spec and dims [layer][head], checked as attnscope does."""
    a = config.get("attnscope")
    if not isinstance(a, dict):
        _fail(file, 'has no "attnscope" object')
    where = file + ": attnscope"
    if not _is_int(a.get("format_version")) or a["format_version"] != 1:
        _fail(where, "format_version must be 1 (this attnscope reads version 1)")
    fm = a.get("feature_map")
    if not isinstance(fm, dict):
        _fail(where, "has no feature_map object")
    if not isinstance(fm.get("name"), str):
        _fail(where + ".feature_map", "has no name")
    if fm["name"] not in FEATURE_MAPS:
        _fail(where + ".feature_map.name", "'%s' is not a feature map attnscope knows" % fm["name"])
    spec = {"name": fm["name"],
            "activation": fm["activation"] if isinstance(fm.get("activation"), str) else "exp",
            "tied": fm["tied"] if isinstance(fm.get("tied"), bool) else True,
            "temperature": float(fm["temperature"]) if _is_number(fm.get("temperature")) else 1.0}
    spec["window"] = parse_window(a.get("window"), where + ".window")
    spec["head_types"] = parse_head_types(a.get("head_types"), n_layer, n_head, spec["window"], where + ".head_types")
    rows = parse_dims(a.get("dims"), n_layer, n_head, where + ".dims", spec["head_types"])
    decay = a.get("decay", "none")
    if decay not in DECAYS:
        _fail(where + ".decay", "'%s' is not none, fixed or gated" % (decay,))
    spec["head_decays"] = parse_head_decays(a.get("head_decays"), decay, n_layer, n_head, spec["head_types"],
                                            where + ".head_decays", "decay" in a)
    return spec, rows


DECAYS = ("none", "fixed", "gated")


def parse_head_decays(decays, decay, n_layer, n_head, head_types, where, decay_given):
    """Each head's decay [S][H]: attnscope.head_decays ([[none|fixed|gated, ...] per layer], a model
    that mixes them; a softmax head's is none), else attnscope.decay for every head."""
    if decays is None:
        return [[decay] * n_head for _ in range(n_layer)]
    if decay_given:
        _fail(where, 'and "decay" both given: a model names one decay for every head or each head\'s (head_decays)')
    for s, h, d in _head_table(decays, DECAYS, "head decays", n_layer, n_head, where):
        if d != "none" and head_types is not None and head_types[s][h] == "softmax":
            _fail(where, "layer %d head %d is a softmax head: its decay is none" % (s, h))
    return decays


def _head_table(table, names, what, n_layer, n_head, where):
    """(s, h, name) of a per-head table [[name, ...] per layer] of n_layer x n_head entries from `names`."""
    if not isinstance(table, list) or len(table) != n_layer:
        _fail(where, "must list the %s of each of the %d layers" % (what, n_layer))
    for s, row in enumerate(table):
        if not isinstance(row, list) or len(row) != n_head:
            _fail(where, "layer %d must list %d %s" % (s, n_head, what))
        for h, t in enumerate(row):
            if t not in names:
                _fail(where, "layer %d head %d: '%s' is not %s or %s" % (s, h, t, ", ".join(names[:-1]), names[-1]))
            yield s, h, t


def parse_window(w, where):
    """attnscope.window: W >= 0 (absent or 0: plain linear attention; W > 0: hybrid heads)."""
    if w is None:
        return 0
    if not (_is_int(w) and 0 <= w <= _INT_MAX):
        _fail(where, "must be a non-negative integer up to %d (0: plain linear attention), got %s" % (_INT_MAX, json.dumps(w)))
    return w


HEAD_TYPES = ("softmax", "hybrid", "linear")


def parse_head_types(types_, n_layer, n_head, window, where):
    """attnscope.head_types: [[softmax|hybrid|linear, ...] per layer] (mixed models), or None when
    absent (every head hybrid with a window, linear without); a hybrid head needs window > 0."""
    if types_ is None:
        return None
    for s, h, t in _head_table(types_, HEAD_TYPES, "head types", n_layer, n_head, where):
        if t == "hybrid" and window < 1:
            _fail(where, "layer %d head %d is hybrid, which needs a window of at least 1 token (the window is %d)"
                  % (s, h, window))
    return types_


MAX_FEATURE_DIM = 16384  # attnscope's kMaxFeatureDim


def parse_dims(dims, n_layer, n_head, where, head_types=None):
    """dims per layer (M) or per head ([M, ...]) for n_layer x n_head, as attnscope's parse_dims_json;
    with head types a softmax head's dimension is 0 (it has no map)."""
    if not isinstance(dims, list):
        _fail(where, "\"dims\" is not a list of feature dimensions")
    if len(dims) != n_layer:
        _fail(where, "has dims for %d layers, the model has %d" % (len(dims), n_layer))

    def dimension(m, s):
        if not _is_int(m):
            _fail(where, "layer %d has a feature dimension that is not a whole number: %s" % (s, json.dumps(m)))
        if m == 0 and head_types is not None:
            return m
        if m < 1 or m > MAX_FEATURE_DIM:
            _fail(where, "layer %d has feature dimension %d, outside 1..%d" % (s, m, MAX_FEATURE_DIM))
        return m

    rows = []
    for s, d in enumerate(dims):
        if isinstance(d, list):
            if len(d) != n_head:
                _fail(where, "layer %d lists %d per-head dimensions, the model has %d heads" % (s, len(d), n_head))
            rows.append([dimension(m, s) for m in d])
        else:
            rows.append([dimension(d, s)] * n_head)
    for s in range(n_layer if head_types is not None else 0):
        for h in range(n_head):
            if (head_types[s][h] == "softmax") != (rows[s][h] == 0):
                _fail(where, "layer %d head %d is a %s head with feature dimension %d (0 for a softmax head, which "
                      "has no map; 1..%d for the others)" % (s, h, head_types[s][h], rows[s][h], MAX_FEATURE_DIM))
    return rows


# ---- feature maps: the tensors each stores, checked, then each returns (values, log_scale) -------

def map_tensor_shapes(spec, d, M, where):
    """The tensors a head's map stores (name -> shape, in attnscope's order) and its feature count,
    for head dimension d and M features (the fixed-size maps ignore M)."""
    n = spec["name"]

    def half():
        if M % 2:
            _fail(where, "feature map %s: features (M) must be even (pairs of features), got %d" % (n, M))
        return M // 2

    if n in ("prf", "prf-orthogonal"):
        return {"w": [M, d]}, M
    if n == "prf-hyperbolic":
        return {"w": [half(), d]}, M
    if n == "learned-prf":
        return {"z": [M, d], "alpha": [M]}, M
    if n in ("hedgehog", "t2r"):
        if n == "hedgehog" and spec["activation"] not in ("exp", "softmax", "softmax-joint"):
            _fail(where, "feature map hedgehog: unknown activation '%s' (valid: exp, softmax, softmax-joint)" % spec["activation"])
        out = half() if n == "hedgehog" else M
        sides = ("",) if spec["tied"] else ("q.", "k.")
        return {side + k: shape for side in sides for k, shape in (("W", [d, out]), ("b", [out]))}, M
    if n in ("flex-stationary", "flex-nonstationary"):
        omegas = ("omega",) if n == "flex-stationary" else ("omega1", "omega2")
        shapes = {w: [half(), d] for w in omegas}
        shapes["tau"] = [1]
        return shapes, M
    if n == "exp" and not (math.isfinite(spec["temperature"]) and spec["temperature"] != 0):
        _fail(where, "feature map exp: temperature must be finite and non-zero, got %g" % spec["temperature"])
    if n in ("elu", "relu", "exp"):
        return {}, d
    if n == "taylor2":
        return {}, 1 + d + d * d
    _fail(where, "feature map %s is not supported by attnscope_linear.py" % n)


def _head_map(spec, tensors, d, M, file, s, h):
    """Head (s, h)'s FeatureMap from its stored tensors, each checked as attnscope checks it."""
    where = "%s (layer %d head %d)" % (file, s, h)
    shapes, features = map_tensor_shapes(spec, d, M, where)
    n = spec["name"]
    for name in tensors:
        if name not in shapes:
            _fail(where, "unexpected tensor '%s' for feature map %s (it has: %s)" % (name, n, ", ".join(shapes) or "none"))
    for name, shape in shapes.items():
        if name not in tensors:
            _fail(where, "missing tensor '%s' of feature map %s" % (name, n))
        t = tensors[name]
        if list(t.shape) != shape:
            _fail(where, "tensor '%s' has shape %s, feature map %s needs %s" % (name, _shape_str(t.shape), n, _shape_str(shape)))
        if t.dtype != torch.float32:
            _fail(where, "tensor '%s' is not float32" % name)
        if not bool(torch.isfinite(t).all()):
            _fail(where, "tensor '%s' holds NaN or inf" % name)
    if features != M:
        _fail(file, "layer %d head %d has %d features, the dims say %d" % (s, h, features, M))
    return FeatureMap(spec, tensors, d, features)


def read_feature_maps(file, spec, dims, shape):
    """[layer][head] FeatureMap from feature_maps.safetensors: every head's tensors and nothing else;
    with a window W > 0 also every head's gamma (layers.{s}.heads.{h}.gamma, a float32 scalar)."""
    if not os.path.exists(file):
        _fail(file, "is missing: it should hold every head's feature map")
    tensors = read_safetensors(file)
    window = spec.get("window", 0)
    gammas = sorted(k for k in tensors if re.fullmatch(r"layers\.[0-9]+\.heads\.[0-9]+\.gamma", k))
    if window == 0 and gammas:
        _fail(file, "holds %d hybrid-head gamma tensors (the first '%s') but config.json's attnscope.window is 0 or "
              "absent (plain linear attention): a stale file?" % (len(gammas), gammas[0]))
    head_types = spec.get("head_types")
    maps, used = [], 0
    for s in range(shape.n_layer):
        row = []
        for h in range(shape.n_head):
            prefix = "layers.%d.heads.%d.feature_map." % (s, h)
            own = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            used += len(own)
            kind = head_types[s][h] if head_types is not None else ("hybrid" if window > 0 else "linear")
            if kind == "softmax":
                if own:
                    _fail(file, "layer %d head %d is a softmax head but has feature-map tensors" % (s, h))
                row.append(SoftmaxHead(shape.sliding_window))
                continue
            m = _head_map(spec, own, shape.head_dim, dims[s][h], file, s, h)
            if kind == "hybrid":
                m.window = window
                m.gamma = _head_gamma(tensors, file, s, h, window)
                used += 1
            decay = spec["head_decays"][s][h]
            if decay == "fixed":
                m.log_a = torch.nn.functional.logsigmoid(_head_scalar(
                    tensors, file, s, h, "decay.delta", "the head's decay is fixed (config.json)", "a head's decay delta"))
                used += 1
            if decay == "gated":
                why = "the head's decay is gated (config.json)"
                m.gate_b = _head_scalar(tensors, file, s, h, "decay.b", why, "a gate's bias b")
                m.gate_w = _head_vector(tensors, file, s, h, "decay.w", shape.d_model, why, "a gate's weights w")
                used += 2
            row.append(m)
        maps.append(row)
    if used != len(tensors):
        kinds = {d for row in spec["head_decays"] for d in row}
        own = ["feature_map.*"] + (["gamma"] if window > 0 else []) + (["decay.delta"] if "fixed" in kinds else []) \
            + (["decay.w", "decay.b"] if "gated" in kinds else [])
        _fail(file, "holds %d tensors outside layers.{0..%d}.heads.{0..%d}.%s"
              % (len(tensors) - used, shape.n_layer - 1, shape.n_head - 1,
                 own[0] if len(own) == 1 else "{" + ", ".join(own) + "}"))
    return maps


def _head_scalar(tensors, file, s, h, what, why, kind):
    """Head (s, h)'s scalar tensor layers.{s}.heads.{h}.WHAT as float64, checked (float32, finite);
    `why` says why it must be there, `kind` what it is ("a hybrid head's gamma")."""
    name = "layers.%d.heads.%d.%s" % (s, h, what)
    where = "%s (layer %d head %d)" % (file, s, h)
    if name not in tensors:
        _fail(where, "missing tensor '%s': %s" % (name, why))
    t = tensors[name]
    if list(t.shape) != []:
        _fail(where, "tensor '%s' has shape %s, %s is a scalar (shape [])" % (name, _shape_str(t.shape), kind))
    if t.dtype != torch.float32:
        _fail(where, "tensor '%s' is not float32" % name)
    if not bool(torch.isfinite(t).all()):
        _fail(where, "tensor '%s' holds NaN or inf" % name)
    return t.to(torch.float64)


def _head_vector(tensors, file, s, h, what, n, why, kind):
    """Head (s, h)'s tensor layers.{s}.heads.{h}.WHAT of shape [n] as float64, checked (float32, finite)."""
    name = "layers.%d.heads.%d.%s" % (s, h, what)
    where = "%s (layer %d head %d)" % (file, s, h)
    if name not in tensors:
        _fail(where, "missing tensor '%s': %s" % (name, why))
    t = tensors[name]
    if list(t.shape) != [n]:
        _fail(where, "tensor '%s' has shape %s, %s has shape [%d]" % (name, _shape_str(t.shape), kind, n))
    if t.dtype != torch.float32:
        _fail(where, "tensor '%s' is not float32" % name)
    if not bool(torch.isfinite(t).all()):
        _fail(where, "tensor '%s' holds NaN or inf" % name)
    return t.to(torch.float64)


def _head_gamma(tensors, file, s, h, window):
    """Head (s, h)'s hybrid balance gamma (g = sigmoid(gamma)) as a float64 scalar, checked."""
    return _head_scalar(tensors, file, s, h, "gamma",
                        "config.json's attnscope.window is %d, so every head is hybrid and needs its gamma" % window,
                        "a hybrid head's gamma")


def _shift(logits):
    m = logits.max(-1, keepdim=True).values
    return torch.exp(logits - m), m


class FeatureMap:
    def __init__(self, spec, tensors, d, features):
        self.name = spec["name"]
        self.activation = spec["activation"]
        self.temperature = spec["temperature"]
        self.t = {k: v.to(torch.float64) for k, v in tensors.items()}
        self.d = d
        self.features = features
        self.window = 0  # hybrid heads (attnscope.window W > 0): W and gamma, set by read_feature_maps
        self.gamma = None
        self.log_a = None  # decayed heads (attnscope.decay "fixed"): log a = logsigmoid(delta), set by read_feature_maps
        self.gate_w = None  # gated heads (attnscope.decay "gated"): w [d_model] and b, set by read_feature_maps
        self.gate_b = None

    def query(self, x):
        return self._apply(x, "q")

    def key(self, x):
        return self._apply(x, "k")

    def _linear(self, x, side):
        if "W" in self.t:
            return x @ self.t["W"] + self.t["b"].unsqueeze(-2)
        return x @ self.t[side + ".W"] + self.t[side + ".b"].unsqueeze(-2)

    def _apply(self, x, side):
        # x [..., L, d]. The tensors may carry a leading [G] (a group's stacked maps, GroupMap) with x
        # [B, G, L, d]: hence transpose(-1, -2) and unsqueeze(-2) rather than .T and plain broadcasting.
        n, d = self.name, self.d
        zero = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
        if n in ("prf", "prf-orthogonal", "learned-prf", "prf-hyperbolic"):
            xs = x / d ** 0.25
            half_sq = 0.5 * (xs * xs).sum(-1, keepdim=True)
            w = self.t["z"] if n == "learned-prf" else self.t["w"]
            proj = xs @ w.transpose(-1, -2)
            if n == "prf-hyperbolic":
                proj = torch.cat([proj, -proj], -1)
            logits = proj - half_sq - 0.5 * math.log(proj.shape[-1])
            if n == "learned-prf":
                logits = logits + 0.5 * self.t["alpha"].unsqueeze(-2)
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
            log_scale = (x * x).sum(-1, keepdim=True) * torch.exp(-self.t["tau"]).unsqueeze(-1) - 0.5 * math.log(self.t[
                "omega" if n == "flex-stationary" else "omega1"].shape[-2])
            if n == "flex-stationary":
                a = x @ self.t["omega"].transpose(-1, -2)
                return torch.cat([torch.cos(a), torch.sin(a)], -1), log_scale
            w1, w2 = self.t["omega1"], self.t["omega2"]
            a = x @ (0.5 * (w1 + w2)).transpose(-1, -2)
            c = torch.cos(x @ (0.5 * (w1 - w2)).transpose(-1, -2))
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
    L = vk.shape[1]
    # Each row reads its keys relative to c_i, the largest key log scale it can see (as attnscope's
    # kernel): with decay, later keys' scales are far above earlier rows' keys.
    c = torch.cummax(lk, 1).values  # [B, L, 1]
    if state:
        c = torch.maximum(c, state["c"])
    expo = (lk.transpose(1, 2) - c).masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
    kern = (vq @ vk.transpose(1, 2)) * torch.exp(expo)
    num, den = kern @ v, kern.sum(-1, keepdim=True)
    if state:
        keep = torch.exp(state["c"] - c)  # [B, L, 1]
        num = num + (vq @ state["S"]) * keep
        den = den + (vq * state["z"].unsqueeze(1)).sum(-1, keepdim=True) * keep
    if state is not None:
        c_new = c[:, -1:]  # [B, 1, 1]: the largest scale of every key so far
        vks = vk * torch.exp(lk - c_new)
        S_new, z_new = vks.transpose(1, 2) @ v, vks.sum(1)
        if state:
            keep = torch.exp(state["c"] - c_new)
            S_new, z_new = S_new + state["S"] * keep, z_new + state["z"] * keep.squeeze(-1)
        state.update(S=S_new, z=z_new, c=c_new)
    # A query with no positive weight (ReLU-type maps) is 0/0: that head contributes 0, as in attnscope.
    y = num / den
    return torch.where(torch.isnan(y), torch.zeros_like(y), y)


def decay_lambda(m, x, first, prev):
    """Lambda_i of this call's positions first .. first + n - 1, [B, n, 1] float64 (SPEC 5's decayed
    heads; zeros for a head without decay). x [B, n, D] is the layer's input; `prev` [B, 1] the
    Lambda of the position before `first` (a gated head's running sum; None at the start). For a
    group's GroupMap: [B G, n, 1] and `prev` [B G, 1], the heads folded into the batch."""
    if isinstance(m, GroupMap):
        return m.decay_lambda(x, first, prev)
    B, n = x.shape[0], x.shape[1]
    if m.gate_w is not None:
        lam = torch.cumsum(torch.nn.functional.logsigmoid(x.to(torch.float64) @ m.gate_w + m.gate_b), 1)
        return (lam if prev is None else lam + prev).unsqueeze(-1)
    if m.log_a is None:
        return torch.zeros(B, n, 1, dtype=torch.float64)
    return (torch.arange(first + 1, first + n + 1, dtype=torch.float64) * m.log_a).view(1, n, 1).expand(B, n, 1)


class SoftmaxHead:
    """A head a mixed model keeps exact (attnscope.head_types "softmax"): softmax attention over every
    key (the last `sliding_window` with Mistral's window), its key-value cache the state."""
    def __init__(self, sliding_window=0):
        self.sliding_window = sliding_window


def softmax_attention(q, k, v, sliding_window, state=None):
    """Causal softmax attention [B, L, d_v] (float64); `state` keeps the keys and values read so far."""
    if state:
        k, v = torch.cat([state["k"], k], 1), torch.cat([state["v"], v], 1)
    L, n = q.shape[1], k.shape[1]
    i = torch.arange(n - L, n).view(L, 1)
    j = torch.arange(n).view(1, n)
    visible = j <= i
    if sliding_window > 0:
        visible = visible & (i - j < sliding_window)
    scores = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    y = torch.softmax(scores.masked_fill(~visible, -math.inf), -1) @ v
    if state is not None:
        keep = sliding_window if sliding_window > 0 else n
        state.update(k=k[:, -keep:], v=v[:, -keep:])
    return y


def attend(m, q, k, v, x, state=None):
    """One head's attention output [B, L, d_v] from its queries and keys after RoPE (float64, what
    softmax attention would use) and the layer's input x [B, L, D] (gated decays read it): linear
    attention with the head's map, or hybrid with a window. A decayed head multiplies the map's
    weight of key j for query i by exp(Lambda_i - Lambda_j): the keys' log scales - Lambda_j, the
    queries' + Lambda_i (which cancels in a linear head's row). `state` also counts the positions
    seen (its "pos") and keeps the last position's Lambda ("lam"). A softmax head (SoftmaxHead) runs
    softmax attention exactly."""
    if isinstance(m, SoftmaxHead):
        return softmax_attention(q, k, v, m.sliding_window, state)
    first = state.get("pos", 0) if state is not None else 0
    lam = decay_lambda(m, x, first, state.get("lam") if state else None).to(q.dtype)  # [B, L, 1]
    if m.window > 0:
        y = hybrid_attention(q, k, v, m, lam, state)
    else:
        (vq, lq), (vk, lk) = m.query(q), m.key(k)
        y = linear_attention((vq, lq + lam), (vk, lk - lam), v, state)
    if state is not None:
        state["pos"] = first + q.shape[1]
        state["lam"] = lam[:, -1].to(torch.float64)  # [B, 1]
    return y


def _log_abs(x):
    """sign(x), log|x| (-inf for 0)."""
    return torch.sign(x), torch.log(x.abs())


def _linear_part(sign1, log1, y1, sign2, log2, y2):
    """Two signed linear parts (each: row weight sign * exp(log), normalized output y) added."""
    top = torch.maximum(log1, log2)
    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    a, b = sign1 * torch.exp(log1 - top), sign2 * torch.exp(log2 - top)
    den = a + b
    num = torch.nan_to_num(y1 * a.unsqueeze(-1)) + torch.nan_to_num(y2 * b.unsqueeze(-1))
    sign, log = _log_abs(den)
    return sign, log + top, num / den.unsqueeze(-1)


def hybrid_attention(q, k, v, m, lam, state=None):
    """Hybrid attention (SPEC 5, LoLCATs): q, k [B, L, d] after RoPE, v [B, L, d_v], float64; m the
    head's FeatureMap with window W = m.window > 0 and balance gamma = m.gamma; lam [B, L, 1] the
    decay's Lambda of this call's positions (zeros without decay).

    Query i gives key j <= i the weight g exp(q_i.k_j / sqrt d) when i - j < W and
    (1 - g) phi(q_i).phi(k_j) when i - j >= W, normalized by the row's sum; g = sigmoid(gamma). All in
    the log domain (log g = logsigmoid(gamma), log(1 - g) = logsigmoid(-gamma)), the two parts read
    against one per-row maximum, so large |q|, |k| neither overflow nor underflow the row. The linear
    part of a row is its keys' summed kernel values; a row whose sum is <= 0 (relu-type maps, signed
    Fourier maps) gets no linear weight (the only clamp the recurrent form can apply as well).

    Batch form: the window part in blocks of n = min(W, L) queries against the n + W - 1 keys they can
    see (memory ~ L (n + W)); the linear part over keys j <= i - W as the L x L kernel, as
    linear_attention does. `state` (a dict, empty at the start) carries earlier calls: S, z, c over
    keys older than the window (linear_attention's bookkeeping) and a ring of the last W raw keys and
    values (and their Lambda); the keys this call pushes out of the ring go into S, z. So a sequence
    can be fed in pieces, one token at a time at constant memory.
    """
    W = m.window
    B, L, d = q.shape
    dv = v.shape[-1]
    # gamma: the head's scalar, or a group's one per head [G] (GroupMap: row b G + g is batch row b,
    # head g), repeated over the batch rows.
    gamma = m.gamma.to(q.dtype)
    gamma = gamma.repeat(B // gamma.numel()) if gamma.dim() else gamma
    log_g = torch.nn.functional.logsigmoid(gamma).view(-1, 1, 1, 1)  # against the scores [B, nb, n, width]
    log_1mg = torch.nn.functional.logsigmoid(-gamma).view(-1, 1)  # against the rows' linear weights [B, L]
    # Keys this call sees besides the state's: the ring (earlier calls' last r keys), then its own.
    if state and "ring_k" in state:
        keys, vals = torch.cat([state["ring_k"], k], 1), torch.cat([state["ring_v"], v], 1)
        lams = torch.cat([state["ring_lam"], lam], 1)
    else:
        keys, vals, lams = k, v, lam
    K = keys.shape[1]
    r = K - L  # query i sits at position r + i of keys

    # ---- linear part, per row: sign, log of its weight over exp(log(1 - g) + query log scale), output
    vq, lq = m.query(q)
    lq = (lq + lam).squeeze(-1)  # query i's Lambda
    sign = torch.zeros(B, L, dtype=q.dtype)
    log = torch.full((B, L), -math.inf, dtype=q.dtype)
    y_lin = torch.zeros(B, L, dv, dtype=q.dtype)
    n_lin = K - W  # keys j <= r + L - 1 - W: the only ones some query here reads linearly
    fk = None
    if n_lin > 0:  # key j of `keys` carries its own Lambda, lams[:, j]
        vk0, lk0 = m.key(keys[:, :n_lin])
        fk = (vk0, lk0 - lams[:, :n_lin])
    if n_lin > 0:
        vk, lk = fk
        dot = vq @ vk.transpose(1, 2)  # [B, L, n_lin]
        i = torch.arange(L).unsqueeze(1)
        j = torch.arange(n_lin).unsqueeze(0)
        visible = j <= r + i - W
        a = torch.where(visible, lk.transpose(1, 2) + torch.log(dot.abs()), torch.tensor(-math.inf, dtype=q.dtype))
        top = a.max(-1, keepdim=True).values
        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        t = torch.sign(dot) * torch.exp(a - top)
        den = t.sum(-1)
        sign, log = _log_abs(den)
        log = log + top.squeeze(-1)
        y_lin = (t @ vals[:, :n_lin]) / den.unsqueeze(-1)
    if state and "S" in state:  # keys older than the ring
        den = (vq * state["z"].unsqueeze(1)).sum(-1)
        s2, l2 = _log_abs(den)
        y2 = (vq @ state["S"]) / den.unsqueeze(-1)
        sign, log, y_lin = _linear_part(sign, log, y_lin, s2, l2 + state["c"].view(B, 1), y2)
    lw = torch.where(sign > 0, log + lq + log_1mg, torch.tensor(-math.inf, dtype=q.dtype))  # <= 0: no weight
    y_lin = torch.where((sign > 0).unsqueeze(-1), y_lin, torch.zeros_like(y_lin))

    # ---- window part in blocks: queries b n .. b n + n - 1 against the keys they can see
    We = min(W, K)  # the window never reaches before key 0
    n = min(We, L)
    nb = -(-L // n)
    width = n + We - 1
    left = We - r  # keys padded on the left so that query i's window is padded keys i + 1 .. i + We
    right = max(0, nb * n + We - left - K)
    kp = torch.nn.functional.pad(keys, (0, 0, left, right))[:, 1:]
    vp = torch.nn.functional.pad(vals, (0, 0, left, right))[:, 1:]
    kw = kp.unfold(1, width, n)[:, :nb]  # [B, nb, d, width]
    vw = vp.unfold(1, width, n)[:, :nb]  # [B, nb, d_v, width]
    qb = torch.nn.functional.pad(q, (0, 0, 0, nb * n - L)).view(B, nb, n, d)
    scores = (qb @ kw) / math.sqrt(d) + log_g  # [B, nb, n, width]
    b = torch.arange(nb).view(nb, 1, 1)
    ii = torch.arange(n).view(1, n, 1)
    c = torch.arange(width).view(1, 1, width)
    inside = (c >= ii) & (c <= ii + We - 1) & (b * n + 1 + c - left >= 0)
    scores = scores.masked_fill(~inside, -math.inf)

    def blocks(x, fill):
        return torch.nn.functional.pad(x, (0, nb * n - L), value=fill).view(B, nb, n)
    lwb = blocks(lw, -math.inf)
    top = torch.maximum(scores.max(-1).values, lwb)
    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)  # only padding rows
    e = torch.exp(scores - top.unsqueeze(-1))
    el = torch.exp(lwb - top)
    ylb = torch.nn.functional.pad(y_lin, (0, 0, 0, nb * n - L)).view(B, nb, n, dv)
    num = e @ vw.transpose(-1, -2) + el.unsqueeze(-1) * ylb
    den = e.sum(-1) + el
    y = (num / den.unsqueeze(-1)).view(B, nb * n, dv)[:, :L]

    # ---- the recurrent state: keys leaving the ring go into S, z; the ring keeps the last W
    if state is not None:
        if n_lin > 0:  # relative to c, the largest key log scale in S, z (linear_attention's bookkeeping)
            vk, lk = fk
            c_new = lk.max(1, keepdim=True).values  # [B, 1, 1]
            if "S" in state:
                c_new = torch.maximum(c_new, state["c"])
            vk = vk * torch.exp(lk - c_new)
            S_new, z_new = vk.transpose(1, 2) @ vals[:, :n_lin], vk.sum(1)
            if "S" in state:
                keep = torch.exp(state["c"] - c_new)
                S_new, z_new = S_new + state["S"] * keep, z_new + state["z"] * keep.squeeze(-1)
            state.update(S=S_new, z=z_new, c=c_new)
        state.update(ring_k=keys[:, max(0, K - W):], ring_v=vals[:, max(0, K - W):], ring_lam=lams[:, max(0, K - W):])
    return y


# ---- the recurrent form: a layer's heads in groups, each group one computation -------------------

class GroupMap:
    """The maps of a group of G heads (HeadGroup) as one map for attend, linear_attention and
    hybrid_attention, whose rows then hold the G heads folded into the batch: row b G + g is batch
    row b, the group's head g. Stacked once: the heads' map tensors [G, ...] (one query or key call
    for all G heads), gamma [G], the decay's log a [G] or gate w [G, D] and b [G]. Maps that do not
    stack (other families or tensor shapes) are applied head by head; the rest stays stacked."""

    def __init__(self, maps):
        m0 = maps[0]
        self.maps, self.size = maps, len(maps)
        self.d, self.features, self.window = m0.d, m0.features, m0.window
        self.gamma = torch.stack([m.gamma for m in maps]) if m0.window > 0 else None
        self.log_a = torch.stack([m.log_a for m in maps]) if m0.log_a is not None else None
        self.gate_w = torch.stack([m.gate_w for m in maps]) if m0.gate_w is not None else None
        self.gate_b = torch.stack([m.gate_b for m in maps]) if m0.gate_w is not None else None
        shapes = {k: t.shape for k, t in m0.t.items()}
        same = all((m.name, m.activation, m.temperature, m.d) == (m0.name, m0.activation, m0.temperature, m0.d)
                   and {k: t.shape for k, t in m.t.items()} == shapes for m in maps)
        self.stacked = None  # a FeatureMap whose tensors are [G, ...]
        if same:
            spec = {"name": m0.name, "activation": m0.activation, "temperature": m0.temperature}
            self.stacked = FeatureMap(spec, {k: torch.stack([m.t[k] for m in maps]) for k in shapes}, m0.d, m0.features)

    def query(self, x):
        return self._apply(x, "q")

    def key(self, x):
        return self._apply(x, "k")

    def _apply(self, x, side):
        """x [B G, L, d] -> (values [B G, L, M], log_scale [B G, L, 1]): every head's map on its rows."""
        G = self.size
        x = x.reshape(x.shape[0] // G, G, x.shape[1], x.shape[2])
        if self.stacked is not None:
            vals, log = self.stacked._apply(x, side)
        else:
            out = [m._apply(x[:, g], side) for g, m in enumerate(self.maps)]
            vals, log = torch.stack([v for v, _ in out], 1), torch.stack([l for _, l in out], 1)
        return vals.flatten(0, 1), log.flatten(0, 1)

    def decay_lambda(self, x, first, prev):
        """decay_lambda of the G heads at once: [B G, n, 1]; `prev` [B G, 1] or None."""
        B, n, G = x.shape[0], x.shape[1], self.size
        if self.gate_w is not None:
            lam = torch.cumsum(torch.nn.functional.logsigmoid(x.to(torch.float64) @ self.gate_w.T + self.gate_b), 1)
            if prev is not None:
                lam = lam + prev.view(B, 1, G)
            return lam.transpose(1, 2).reshape(B * G, n, 1)  # [B, n, G] -> rows b G + g
        if self.log_a is None:
            return torch.zeros(B * G, n, 1, dtype=torch.float64)
        lam = torch.arange(first + 1, first + n + 1, dtype=torch.float64) * self.log_a.view(G, 1)  # [G, n]
        return lam.expand(B, G, n).reshape(B * G, n, 1)


class HeadGroup:
    """Heads of one layer that the recurrent form runs as one computation (head_groups): `heads` their
    indices in the layer, `kv` their key/value heads (grouped-query attention), `map` the group's
    GroupMap, or a SoftmaxHead for softmax heads."""

    def __init__(self, heads, maps, per_kv):
        self.heads = torch.tensor(heads)
        self.kv = torch.tensor([j // per_kv for j in heads])
        self.size = len(heads)
        self.map = maps[0] if isinstance(maps[0], SoftmaxHead) else GroupMap(maps)


def head_groups(row, per_kv=1):
    """A layer's heads (row: [head] -> FeatureMap or SoftmaxHead) in groups, in the order of their
    first heads: softmax heads by their sliding window; the others by head type (hybrid: window > 0),
    feature dimension M, window and decay (none, fixed, gated). per_kv query heads share a key/value head."""
    groups = {}
    for j, m in enumerate(row):
        if isinstance(m, SoftmaxHead):
            key = ("softmax", m.sliding_window)
        else:
            decay = "gated" if m.gate_w is not None else "fixed" if m.log_a is not None else "none"
            key = ("hybrid" if m.window > 0 else "linear", m.features, m.window, decay)
        groups.setdefault(key, []).append(j)
    return [HeadGroup(heads, [row[j] for j in heads], per_kv) for heads in groups.values()]


def attend_groups(layer, q, k, v, x):
    """One layer's attention in the recurrent form, one computation per group of heads: q [B, L, H, d],
    k, v [B, L, H_kv, d] after RoPE, x [B, L, D] the layer's input, `layer` the cache's (HeadGroup,
    state) pairs of the layer. A group's G heads are folded into the batch (row b G + g) and run
    through attend with its GroupMap, so its state holds them stacked: S [B G, M, d_v], z [B G, M],
    c [B G, 1, 1] (each head's running log-scale maximum), the hybrid ring's keys, values and Lambda
    [B G, r, ...], a softmax group's keys and values. Returns [B, L, H, d_v] float64, heads in order."""
    B, L = q.shape[:2]

    def rows(t, heads):  # [B, L, heads, d] -> the heads' rows [B G, L, d] float64
        return t[:, :, heads].transpose(1, 2).reshape(B * len(heads), L, t.shape[-1]).to(torch.float64)
    out = torch.empty(q.shape[:3] + v.shape[-1:], dtype=torch.float64)
    for g, state in layer:
        y = attend(g.map, rows(q, g.heads), rows(k, g.kv), rows(v, g.kv), x, state)
        out[:, :, g.heads] = y.view(B, g.size, L, -1).transpose(1, 2)
    return out


def _cache(maps, per_kv=1):
    """An empty recurrent state: per layer, each group of heads (head_groups) with its state dict. The
    groups stack the maps once, as they are when the cache is made (so a new cache sees edited maps)."""
    return [[(g, {}) for g in head_groups(row, per_kv)] for row in maps]


def _rope_tables(theta, rotary_dim, pos, L, llama3=None):
    """cos, sin [1, L, 1, rotary_dim / 2] of positions pos .. pos + L - 1 (float64, then float32).
    llama3: (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings) rescales
    the inverse frequencies as transformers' _compute_llama3_parameters."""
    inv = 1.0 / torch.pow(torch.tensor(theta, dtype=torch.float64),
                          torch.arange(0, rotary_dim // 2, dtype=torch.float64) * 2 / rotary_dim)
    if llama3 is not None:
        factor, low, high, orig = llama3
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelen > orig / low, inv / factor, torch.where(wavelen < orig / high, inv, blended))
    ang = torch.outer(torch.arange(pos, pos + L, dtype=torch.float64), inv)
    return (t.to(torch.float32)[None, :, None, :] for t in (torch.cos(ang), torch.sin(ang)))


def _rotate_half(x, cos, sin, rotary_dim):
    """RoPE on the first rotary_dim dims of x [B, L, heads, d] (rotate-half layout)."""
    half = rotary_dim // 2
    a, b, rest = x[..., :half], x[..., half:rotary_dim], x[..., rotary_dim:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], -1)


# ---- GPT-2 -------------------------------------------------------------------------------------

class LinearGPT2(torch.nn.Module):
    def __init__(self, shape, config, weights, maps):
        super().__init__()
        self.shape = shape
        self.maps = maps  # [layer][head] -> FeatureMap
        self.n_layer, self.n_head, self.d_model = shape.n_layer, shape.n_head, shape.d_model
        D, F, V = shape.d_model, shape.d_ff, shape.vocab_size
        need = {"wte.weight": [V, D], "wpe.weight": [shape.n_ctx, D], "ln_f.weight": [D], "ln_f.bias": [D]}
        for s in range(self.n_layer):
            for name, dims in (("ln_1.weight", [D]), ("ln_1.bias", [D]), ("attn.c_attn.weight", [D, 3 * D]),
                               ("attn.c_attn.bias", [3 * D]), ("attn.c_proj.weight", [D, D]), ("attn.c_proj.bias", [D]),
                               ("ln_2.weight", [D]), ("ln_2.bias", [D]), ("mlp.c_fc.weight", [D, F]),
                               ("mlp.c_fc.bias", [F]), ("mlp.c_proj.weight", [F, D]), ("mlp.c_proj.bias", [D])):
                need["h.%d.%s" % (s, name)] = dims
        p = "transformer." if weights.has("transformer.wte.weight") else ""  # both spellings exist
        self.w = {k: weights.get(p + k, dims) for k, dims in need.items()}
        self.eps = _config_number(config, "layer_norm_epsilon", 1e-5, shape.file)
        self.gelu_approx = _config_gelu(config, "activation_function", "gelu_new", shape.file)
        tied = _config_bool(config, "tie_word_embeddings", True)
        self.lm_head = (weights.get("lm_head.weight", [V, D]) if not tied and weights.has("lm_head.weight")
                        else self.w["wte.weight"])

    def _ln(self, x, name):
        return torch.nn.functional.layer_norm(x, (self.d_model,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def new_cache(self):
        return _cache(self.maps)

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
            if cache:  # the recurrent form: a computation per group of heads
                q, k, v = (t.view(B, L, H, d) for t in (q, k, v))
                a = attend_groups(cache[s], q, k, v, h).reshape(B, L, D).to(torch.float32)
            else:  # the batch form: head by head
                heads = []
                for j in range(H):
                    sl = slice(j * d, (j + 1) * d)
                    qh, kh, vh = (t[..., sl].to(torch.float64) for t in (q, k, v))
                    heads.append(attend(self.maps[s][j], qh, kh, vh, h))
                a = torch.cat(heads, -1).to(torch.float32)
            x = x + a @ w[pre + "attn.c_proj.weight"] + w[pre + "attn.c_proj.bias"]
            h = self._ln(x, pre + "ln_2")
            u = torch.nn.functional.gelu(h @ w[pre + "mlp.c_fc.weight"] + w[pre + "mlp.c_fc.bias"], approximate=self.gelu_approx)
            x = x + u @ w[pre + "mlp.c_proj.weight"] + w[pre + "mlp.c_proj.bias"]
        x = self._ln(x, "ln_f")
        return x @ self.lm_head.T


# ---- Llama family (HF layout: RMSNorm, rotate-half RoPE, SwiGLU, grouped-query attention) --------
# Llama, Mistral, Qwen2 and Qwen3 differ only in: biases (Llama/Qwen3 attention_bias: q, k, v, o;
# Qwen2: q, k, v always, o never), Qwen3's per-head q_norm/k_norm (RMSNorm over head_dim, before
# RoPE), and Mistral's sliding_window. The window limits *softmax* attention to the last
# sliding_window keys: only a mixed model's softmax heads (SoftmaxHead) keep it; linear and hybrid
# heads read every key through their map (hybrids: their own attnscope.window), as in attnscope.

class LinearLlama(torch.nn.Module):
    def __init__(self, shape, config, weights, maps):
        super().__init__()
        self.shape = shape
        self.maps = maps
        self.n_layer, self.d_model, self.n_head = shape.n_layer, shape.d_model, shape.n_head
        self.n_kv, self.head_dim = shape.n_kv_head, shape.head_dim
        D, F, V = shape.d_model, shape.d_ff, shape.vocab_size
        q, kv = self.n_head * self.head_dim, self.n_kv * self.head_dim
        need = {"model.embed_tokens.weight": [V, D], "model.norm.weight": [D]}
        optional = {}  # MLP biases, read where the config has them and the checkpoint holds them
        for s in range(self.n_layer):
            pre = "model.layers.%d." % s
            for name, dims in (("input_layernorm.weight", [D]), ("self_attn.q_proj.weight", [q, D]),
                               ("self_attn.k_proj.weight", [kv, D]), ("self_attn.v_proj.weight", [kv, D]),
                               ("self_attn.o_proj.weight", [D, q]), ("post_attention_layernorm.weight", [D]),
                               ("mlp.gate_proj.weight", [F, D]), ("mlp.up_proj.weight", [F, D]),
                               ("mlp.down_proj.weight", [D, F])):
                need[pre + name] = dims
            arch = shape.arch
            flag = arch in ("LlamaForCausalLM", "Qwen3ForCausalLM") and _config_bool(config, "attention_bias", False)
            if flag or arch == "Qwen2ForCausalLM":
                need.update({pre + "self_attn.q_proj.bias": [q], pre + "self_attn.k_proj.bias": [kv],
                             pre + "self_attn.v_proj.bias": [kv]})
            if flag:
                need[pre + "self_attn.o_proj.bias"] = [D]
            if arch == "Qwen3ForCausalLM":
                need.update({pre + "self_attn.q_norm.weight": [self.head_dim],
                             pre + "self_attn.k_norm.weight": [self.head_dim]})
            if arch == "LlamaForCausalLM" and _config_bool(config, "mlp_bias", False):
                optional.update({pre + "mlp.up_proj.bias": [F], pre + "mlp.down_proj.bias": [D]})
        need.update({k: dims for k, dims in optional.items() if weights.has(k)})
        self.w = {k: weights.get(k, dims) for k, dims in need.items()}
        self.eps = _config_number(config, "rms_norm_eps", 1e-6, shape.file)
        self.theta = _config_number(config, "rope_theta", 10000.0, shape.file)
        self.qk_norm = shape.arch == "Qwen3ForCausalLM"
        tied = _config_bool(config, "tie_word_embeddings", False)
        self.lm_head = (self.w["model.embed_tokens.weight"] if tied or not weights.has("lm_head.weight")
                        else weights.get("lm_head.weight", [V, D]))

    def _rms(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def _linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if name + ".bias" in self.w else y

    def new_cache(self):
        return _cache(self.maps, self.n_head // self.n_kv)

    def forward(self, ids, cache=None, pos=0):
        B, L = ids.shape
        H, Hkv, d = self.n_head, self.n_kv, self.head_dim
        w = self.w
        cos, sin = _rope_tables(self.theta, d, pos, L, self.shape.rope_llama3)
        x = w["model.embed_tokens.weight"][ids]
        for s in range(self.n_layer):
            pre = "model.layers.%d." % s
            h = self._rms(x, w[pre + "input_layernorm.weight"])
            q = self._linear(h, pre + "self_attn.q_proj").view(B, L, H, d)
            k = self._linear(h, pre + "self_attn.k_proj").view(B, L, Hkv, d)
            if self.qk_norm:  # Qwen3: per head, before RoPE
                q = self._rms(q, w[pre + "self_attn.q_norm.weight"])
                k = self._rms(k, w[pre + "self_attn.k_norm.weight"])
            q = _rotate_half(q, cos, sin, d)
            k = _rotate_half(k, cos, sin, d)
            v = self._linear(h, pre + "self_attn.v_proj").view(B, L, Hkv, d)
            if cache:  # the recurrent form: a computation per group of heads
                a = attend_groups(cache[s], q, k, v, h).reshape(B, L, H * d).to(torch.float32)
            else:  # the batch form: head by head
                heads = []
                for j in range(H):
                    kv = j // (H // Hkv)  # grouped-query: kv head kv serves query heads kv*g .. kv*g+g-1
                    qh, kh, vh = (t.to(torch.float64) for t in (q[:, :, j], k[:, :, kv], v[:, :, kv]))
                    heads.append(attend(self.maps[s][j], qh, kh, vh, h))
                a = torch.cat(heads, -1).to(torch.float32)
            x = x + self._linear(a, pre + "self_attn.o_proj")
            h = self._rms(x, w[pre + "post_attention_layernorm.weight"])
            u = torch.nn.functional.silu(h @ w[pre + "mlp.gate_proj.weight"].T) * self._linear(h, pre + "mlp.up_proj")
            x = x + self._linear(u, pre + "mlp.down_proj")
        x = self._rms(x, w["model.norm.weight"])
        return x @ self.lm_head.T


# ---- GPT-NeoX (Pythia: fused per-head qkv [H, 3, d], partial rotary, parallel residual) ---------

class LinearNeoX(torch.nn.Module):
    def __init__(self, shape, config, weights, maps):
        super().__init__()
        self.shape = shape
        self.maps = maps
        self.n_layer, self.d_model, self.n_head = shape.n_layer, shape.d_model, shape.n_head
        self.head_dim = shape.head_dim
        D, F, V = shape.d_model, shape.d_ff, shape.vocab_size
        need = {"embed_in.weight": [V, D], "final_layer_norm.weight": [D], "final_layer_norm.bias": [D]}
        per_layer = [("input_layernorm.weight", [D]), ("input_layernorm.bias", [D]),
                     ("attention.query_key_value.weight", [3 * D, D]), ("attention.dense.weight", [D, D]),
                     ("post_attention_layernorm.weight", [D]), ("post_attention_layernorm.bias", [D]),
                     ("mlp.dense_h_to_4h.weight", [F, D]), ("mlp.dense_h_to_4h.bias", [F]),
                     ("mlp.dense_4h_to_h.weight", [D, F]), ("mlp.dense_4h_to_h.bias", [D])]
        if _config_bool(config, "attention_bias", True):
            per_layer += [("attention.query_key_value.bias", [3 * D]), ("attention.dense.bias", [D])]
        for s in range(self.n_layer):
            need.update({"layers.%d.%s" % (s, name): dims for name, dims in per_layer})
        self.w = {k: weights.get("gpt_neox." + k, dims) for k, dims in need.items()}
        self.eps = _config_number(config, "layer_norm_eps", 1e-5, shape.file)
        pct = _config_number(config, "rotary_pct", _config_number(config, "partial_rotary_factor", 1.0, shape.file), shape.file)
        if not 0 < pct <= 1:
            _fail(shape.file, "rotary_pct must be in (0, 1]")
        self.rotary_dim = int(self.head_dim * pct)  # HF truncates, as attnscope does
        self.theta = _config_number(config, "rotary_emb_base", _config_number(config, "rope_theta", 10000.0, shape.file), shape.file)
        self.parallel = _config_bool(config, "use_parallel_residual", True)
        self.gelu_approx = _config_gelu(config, "hidden_act", "gelu", shape.file)
        tied = _config_bool(config, "tie_word_embeddings", False)
        self.lm_head = self.w["embed_in.weight"] if tied else weights.get("embed_out.weight", [V, D])

    def new_cache(self):
        return _cache(self.maps)

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
            if cache:  # the recurrent form: a computation per group of heads
                a = attend_groups(cache[s], q, k, v, h).reshape(B, L, H * d).to(torch.float32)
            else:  # the batch form: head by head
                heads = []
                for j in range(H):
                    qh, kh, vh = (t[:, :, j].to(torch.float64) for t in (q, k, v))
                    heads.append(attend(self.maps[s][j], qh, kh, vh, h))
                a = torch.cat(heads, -1).to(torch.float32)
            a = self._linear(a, pre + "attention.dense")

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


# ---- loading and running -----------------------------------------------------------------------

def _weights_dir(directory, a, config_file):
    """OUT itself when it holds the weights, else attnscope.source.path once its sha256 checks out."""
    if (os.path.exists(os.path.join(directory, "model.safetensors"))
            or os.path.exists(os.path.join(directory, "model.safetensors.index.json"))):
        return directory
    source = a.get("source")
    if not (isinstance(source, dict) and isinstance(source.get("path"), str)):
        _fail(config_file, "has no model.safetensors beside it and no attnscope.source.path to the original weights")
    return _check_source(source, config_file)


def load(directory):
    """The converted model in `directory` as a torch.nn.Module (forward(ids [B, L]) -> logits).
    Raises ConvertedModelError ("FILE: problem") for anything attnscope would refuse to load."""
    config_file = os.path.join(directory, "config.json")
    if not os.path.isfile(config_file):
        _fail(directory, "not a model directory: no config.json")
    config = _read_json(config_file)
    shape = model_shape(config, config_file)
    spec, dims = parse_header(config, config_file, shape.n_layer, shape.n_head)
    if spec["name"] == "cosformer":
        _fail(config_file + ": attnscope.feature_map.name",
              "cosformer depends on token positions and a horizon; it cannot run as a converted model")
    weights = Weights(_weights_dir(directory, config["attnscope"], config_file))
    maps = read_feature_maps(os.path.join(directory, "feature_maps.safetensors"), spec, dims, shape)
    model = shape.kind(shape, config, weights, maps)
    model.eval()
    return model


def generate(model, ids, new_tokens):
    """Greedy continuation (the new ids only) in the recurrent form: the prompt fills the state once,
    then each token is one step. When positions run out the state restarts over the last n_ctx
    tokens, as attnscope's generate does."""
    seq = list(ids)
    n_ctx = model.shape.n_ctx
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


def _token_ids(text):
    ids = []
    for t in text.split(","):
        if t.strip():
            try:
                ids.append(int(t))
            except ValueError:
                raise argparse.ArgumentTypeError("'%s' is not a token id" % t.strip())
    if not ids:
        raise argparse.ArgumentTypeError("no token ids given")
    return ids


def main(argv=None):
    ap = argparse.ArgumentParser(description="Run an attnscope converted model with PyTorch alone")
    ap.add_argument("directory")
    ap.add_argument("--ids", required=True, type=_token_ids, help="comma-separated prompt token ids")
    ap.add_argument("--new-tokens", type=int, default=20)
    args = ap.parse_args(argv)
    if args.new_tokens < 0:
        ap.error("argument --new-tokens: must be >= 0, got %d" % args.new_tokens)
    try:
        model = load(args.directory)
    except ConvertedModelError as e:
        print(e, file=sys.stderr)
        return 1
    vocab = model.shape.vocab_size
    outside = [i for i in args.ids if not 0 <= i < vocab]
    if outside:
        ap.error("argument --ids: token id %d is outside the vocabulary (0..%d)" % (outside[0], vocab - 1))
    print(" ".join(str(t) for t in generate(model, args.ids, args.new_tokens)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
