#!/usr/bin/env python3
"""Writes the hand-made seed corpora of the tokenizer, model_config and capture_manifest fuzz
targets (tests/fuzz/corpus/<target>/). Small valid files of each kind, plus a few invalid ones near
the edges of what the parsers accept. The vocabularies are made up here (only their layout follows
GPT-2's byte-level and Llama's SentencePiece exports); the configs follow the shape of
resources/models/brown-gpt2-mini/config.json and of public Pythia / Llama configs, scaled down.
Run from anywhere; it rewrites the files it owns and leaves the reproducers (crash_*) alone."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def dump(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def write(target, name, text):
    path = os.path.join(HERE, "corpus", target, name)
    with open(path, "wb") as f:
        f.write(text.encode("utf-8") if isinstance(text, str) else text)


# --- byte-level BPE (GPT-2) -------------------------------------------------------------------------
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def byte_level_vocab(merges):
    vocab = {B2U[b]: i for i, b in enumerate(sorted(B2U))}
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    return vocab


G = B2U[ord(" ")]  # "Ġ"
GPT2_MERGES = [(G, "t"), ("h", "e"), (G, "a"), (G + "t", "he"), ("i", "n"), (G, "w"), ("o", "r"),
               (G + "w", "or"), ("l", "d"), (G + "wor", "ld"), ("4", "2")]


def gpt2_json(merges_as_pairs=False, prefix_space=False, nfc=False):
    vocab = byte_level_vocab(GPT2_MERGES)
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot
    bl = {"type": "ByteLevel", "add_prefix_space": prefix_space, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "special": True}],
        "normalizer": {"type": "NFC"} if nfc else None,
        "pre_tokenizer": bl,
        "post_processor": None,
        "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab,
                  "merges": [[a, b] if merges_as_pairs else a + " " + b for a, b in GPT2_MERGES]},
    }


def llama3_json():
    """Byte-level with a Split regex (Llama 3 / Qwen style), ignore_merges and a BOS template."""
    root = gpt2_json()
    vocab = root["model"]["vocab"]
    bos = len(vocab)
    vocab["<|begin_of_text|>"] = bos
    root["added_tokens"].append({"id": bos, "content": "<|begin_of_text|>", "special": True})
    root["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+(?!\S)|\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    root["post_processor"] = {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}
    root["model"]["ignore_merges"] = True
    return root


# --- SentencePiece-style BPE (Llama 2) --------------------------------------------------------------
META = "\u2581"


def llama_json(metaspace_form, byte_fallback=True):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if byte_fallback:
        for b in range(256):
            vocab["<0x%02X>" % b] = len(vocab)
    merges = [(META, "h"), ("e", "l"), ("l", "o"), (META + "h", "el"), (META + "hel", "lo"),
              (META, "w"), ("o", "r"), (META + "w", "or"), ("l", "l")]
    for p in [META, "h", "e", "l", "o", "w", "r", "d", "x"]:
        vocab[p] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    root = {"version": "1.0",
            "added_tokens": [{"id": i, "content": t, "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])]}
    if metaspace_form:
        root["normalizer"] = None
        root["pre_tokenizer"] = {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": True}
        root["decoder"] = {"type": "Metaspace", "replacement": META, "prepend_scheme": "first"}
        root["post_processor"] = None
    else:
        root["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": META},
            {"type": "Replace", "pattern": {"String": " "}, "content": META}]}
        root["pre_tokenizer"] = None
        root["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
        root["post_processor"] = {"type": "TemplateProcessing", "single": [
            {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}
    root["model"] = {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": byte_fallback,
                     "vocab": vocab, "merges": [a + " " + b for a, b in merges]}
    return root


def tokenizer_seeds():
    t = "tokenizer"
    write(t, "valid_gpt2_bytelevel.json", dump(gpt2_json()))
    write(t, "valid_gpt2_pairs_prefix_nfc.json", dump(gpt2_json(merges_as_pairs=True, prefix_space=True, nfc=True)))
    write(t, "valid_gpt2_split_regex.json", dump(llama3_json()))
    write(t, "valid_sp_prepend_bytefallback.json", dump(llama_json(False)))
    write(t, "valid_sp_metaspace_unk.json", dump(llama_json(True, byte_fallback=False)))
    # vocab.json NUL merges.txt
    vocab = byte_level_vocab(GPT2_MERGES)
    vocab["<|endoftext|>"] = len(vocab)
    merges = "#version: 0.2\n" + "".join(a + " " + b + "\n" for a, b in GPT2_MERGES)
    write(t, "valid_vocab_merges", dump(vocab) + "\0" + merges)
    # Near misses.
    bad = gpt2_json()
    bad["model"]["merges"].append("x zz")
    write(t, "invalid_merge_unknown_token.json", dump(bad))
    bad = gpt2_json()
    del bad["model"]["vocab"][B2U[0]]
    write(t, "invalid_missing_byte.json", dump(bad))
    bad = llama3_json()
    bad["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+"
    write(t, "invalid_regex.json", dump(bad))
    bad = llama_json(False)
    bad["added_tokens"].append({"id": 3, "content": "<extra>", "special": False})
    write(t, "invalid_added_reuses_id.json", dump(bad))
    write(t, "invalid_vocab_merges_line", dump(vocab) + "\0#version: 0.2\nĠt he extra\n")


# --- config.json ------------------------------------------------------------------------------------
def config_seeds():
    t = "model_config"
    gpt2 = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "layer_norm_epsilon": 1e-05,
            "model_type": "gpt2", "n_embd": 128, "n_head": 4, "n_inner": 512, "n_layer": 4, "n_positions": 256,
            "scale_attn_weights": True, "tie_word_embeddings": True, "torch_dtype": "float32", "vocab_size": 4096}
    write(t, "valid_gpt2.json", json.dumps(gpt2, indent=2))
    gpt2_aliases = {"architectures": ["GPT2LMHeadModel"], "hidden_size": 64, "num_hidden_layers": 2,
                    "num_attention_heads": 2, "n_ctx": 128, "vocab_size": 512, "activation_function": "gelu"}
    write(t, "valid_gpt2_aliases.json", json.dumps(gpt2_aliases))
    neox = {"architectures": ["GPTNeoXForCausalLM"], "hidden_act": "gelu", "hidden_size": 128,
            "intermediate_size": 512, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
            "model_type": "gpt_neox", "num_attention_heads": 8, "num_hidden_layers": 6, "rotary_emb_base": 10000,
            "rotary_pct": 0.25, "tie_word_embeddings": False, "torch_dtype": "float16",
            "use_parallel_residual": True, "vocab_size": 50304}
    write(t, "valid_gpt_neox.json", json.dumps(neox, indent=2))
    llama = {"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 256,
             "intermediate_size": 688, "max_position_embeddings": 2048, "model_type": "llama",
             "num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-05,
             "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
             "vocab_size": 32000}
    write(t, "valid_llama_gqa.json", json.dumps(llama, indent=2))
    llama_hd = dict(llama, head_dim=64, attention_bias=True, mlp_bias=True, num_key_value_heads=8)
    write(t, "valid_llama_head_dim.json", json.dumps(llama_hd))
    write(t, "invalid_rope_scaling.json", json.dumps(dict(llama, rope_scaling={"type": "linear", "factor": 2.0})))
    llama3 = dict(llama, head_dim=64, tie_word_embeddings=True,
                  rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                "original_max_position_embeddings": 8192, "rope_type": "llama3"})
    write(t, "valid_llama3_rope_scaling.json", json.dumps(llama3))
    mistral = dict(llama, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=512)
    write(t, "valid_mistral_window.json", json.dumps(mistral))
    qwen2 = dict(llama, architectures=["Qwen2ForCausalLM"], model_type="qwen2", rope_theta=1000000.0,
                 use_sliding_window=False, sliding_window=32768, max_window_layers=4, tie_word_embeddings=True)
    write(t, "valid_qwen2.json", json.dumps(qwen2))
    write(t, "invalid_qwen2_sliding_window.json", json.dumps(dict(qwen2, use_sliding_window=True)))
    qwen3 = dict(qwen2, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=128, attention_bias=False)
    write(t, "valid_qwen3_head_dim.json", json.dumps(qwen3))
    write(t, "invalid_architecture.json", json.dumps(dict(gpt2, architectures=["BertModel"])))
    write(t, "invalid_heads.json", json.dumps(dict(gpt2, n_head=3)))
    write(t, "invalid_kv_heads.json", json.dumps(dict(llama, num_key_value_heads=3)))
    write(t, "invalid_not_object.json", "[1, 2, 3]")


# --- capture manifest.json --------------------------------------------------------------------------
def manifest_seeds():
    t = "capture_manifest"
    T, H, L, d = 4, 8, 32, 8
    man = {"format": "attnscope-capture", "version": 1,
           "model": {"path": "/models/stories260K", "architecture": "llama2.c", "n_layer": 5, "n_head": H,
                     "n_kv_head": 4, "head_dim": d, "d_model": 64, "n_ctx": 512, "vocab_size": 512},
           "texts": ["corpus.txt"],
           "tokenization": {"tokenizer": "llama2c", "tokenizer_path": "/models/stories260K/tok512.bin",
                            "bos_prepended": True, "eos_between_documents": True},
           "num_seqs": T, "seq_len": L, "seed": 0, "dtype": "f32", "rope": "post", "layers": 5,
           "tensors": {k: [T, H, L, d] for k in "qkv"}, "kv_heads_expanded": True}
    write(t, "valid_llama2c.json", json.dumps(man, indent=2))
    gpt2 = json.loads(json.dumps(man))
    gpt2["model"].update(architecture="GPT2LMHeadModel", n_layer=4, n_head=4, n_kv_head=4, head_dim=32,
                         d_model=128, n_ctx=256, vocab_size=4096, path="resources/models/brown-gpt2-mini")
    gpt2["layers"] = 4
    gpt2["tokenization"] = {"tokenizer": "gpt2-bpe", "tokenizer_path": "resources/models/brown-gpt2-mini",
                            "bos_prepended": False, "eos_between_documents": True}
    gpt2["dtype"] = "f16"
    gpt2["rope"] = "pre"
    gpt2["kv_heads_expanded"] = False
    write(t, "valid_gpt2_f16.json", json.dumps(gpt2))
    no_path = json.loads(json.dumps(gpt2))
    del no_path["tokenization"]["tokenizer_path"]
    write(t, "valid_no_tokenizer_path.json", json.dumps(no_path))
    write(t, "invalid_format.json", json.dumps(dict(man, format="something-else")))
    bad = json.loads(json.dumps(man))
    del bad["model"]["head_dim"]
    write(t, "invalid_missing_head_dim.json", json.dumps(bad))
    write(t, "invalid_seq_len_string.json", json.dumps(dict(man, seq_len="32")))


if __name__ == "__main__":
    tokenizer_seeds()
    config_seeds()
    manifest_seeds()
