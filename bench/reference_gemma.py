#!/usr/bin/env python3
"""Independent float64 numpy forward of google/embeddinggemma-300m, the reference for a Rust port
(tests/fixtures/gemma_reference.json).

Pipeline = sentence-transformers modules.json:
  Transformer(Gemma3TextModel) -> Pooling(mean) -> Dense(768->3072) -> Dense(3072->768) -> Normalize.
Formulas follow HF transformers' gemma3 (>= 4.57, after PR #40700 "[Gemma Embedding] Fix SWA"):
  Gemma3TextScaledWordEmbedding, Gemma3RMSNorm, Gemma3RotaryEmbedding (default rope, two bases),
  Gemma3Attention (q_norm/k_norm, GQA, scaling query_pre_attn_scalar**-0.5), Gemma3MLP,
  Gemma3DecoderLayer (4 norms), Gemma3TextModel.forward (masks: use_bidirectional_attention),
  Gemma3TextConfig (bidirectional => sliding_window = sliding_window // 2 + 1);
and sentence-transformers encode (prompt + text) / Transformer.tokenize (strip, truncation at
max_seq_length) / Pooling (mean, include_prompt) / Dense (no bias, Identity) / Normalize.

  text    = prompt + text, then .strip()         (prompts from config_sentence_transformers.json)
  ids     = tokenizer.json: <bos>=2 ... <eos>=1, truncated to max_seq_length (2048) incl. both
  h0      = E[ids] * f32(sqrt(768))
  24 x    : a = attn(rms(h) ; q_norm, k_norm, rope(theta by layer type), mask by layer type)
            h = h + rms_post_attn(a)
            h = h + rms_post_ffw(W_down(gelu_tanh(W_gate rms_pre_ffw(h)) * W_up rms_pre_ffw(h)))
  hT      = rms_final(h)                        rms(x) = x / sqrt(mean(x^2) + 1e-6) * (1 + w)
  pooled  = mean of hT over all real tokens (bos, prompt and eos included)
  out     = normalize(W3 (W2 pooled))               (2_Dense, 3_Dense: no bias, no activation)
  masks   : full layers see every real token; sliding layers see real tokens j with
            |i - j| < 512 // 2 + 1 = 257 (i.e. |i - j| <= 256). Padding keys are never seen.

Weights are loaded as stored (f32, 1.2 GB) and each layer is cast to float64 when it runs.
Needs: numpy, tokenizers, safetensors (bench/requirements-model.txt).

    python bench/reference_gemma.py MODEL_DIR --query "question" --document "passage" [--raw TEXT]
    python bench/reference_gemma.py MODEL_DIR --write-fixture PATH --query Q... --document D...
    options: --dtype float32 (the same graph in float32), --batch-size N (pad N texts together),
             --tokens (print the tokens too)
Prints JSON [{"text", "prompt", "ids", "embedding"}] on stdout, the cosine matrix on stderr.
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

PAD_ID = 0  # config.pad_token_id; never seen by a real token (padding keys are masked)


# ---------------------------------------------------------------- arithmetic
def rms_norm(x, w, eps):
    """Gemma3RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w)  (note the 1 + w)."""
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * (1.0 + w)


def gelu_tanh(x):
    """ACT2FN["gelu_pytorch_tanh"]."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def rope_tables(theta, head_dim, positions, dtype):
    """Gemma3RotaryEmbedding, rope_type "default": inv_freq_k = theta^(-2k/d), k < d/2;
    cos/sin of [T, d] with the frequencies repeated (cat(freqs, freqs)) for rotate_half."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    freqs = positions.astype(np.float64)[:, None] * inv_freq[None, :]        # [T, d/2]
    emb = np.concatenate([freqs, freqs], axis=-1)                            # [T, d]
    return np.cos(emb).astype(dtype), np.sin(emb).astype(dtype)


def apply_rope(x, cos, sin):
    """q * cos + rotate_half(q) * sin, rotate_half(x) = cat(-x[d/2:], x[:d/2]) (halves, not pairs)."""
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * cos + rot * sin


# ---------------------------------------------------------------- model
class GemmaNumpy:
    def __init__(self, model_dir, dtype=np.float64, window_radius=None):
        self.model_dir = model_dir
        self.dtype = np.dtype(dtype)

        def load_json(*p):
            with open(os.path.join(model_dir, *p), encoding="utf-8") as f:
                return json.load(f)

        c = self.config = load_json("config.json")
        st = load_json("sentence_bert_config.json")
        self.prompts = load_json("config_sentence_transformers.json")["prompts"]
        self.max_seq_length = int(st["max_seq_length"])                # 2048
        self.do_lower_case = bool(st.get("do_lower_case", False))     # False
        pool = load_json("1_Pooling", "config.json")
        assert pool["pooling_mode_mean_tokens"] and pool["include_prompt"]
        assert not any(pool[k] for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens",
                                         "pooling_mode_mean_sqrt_len_tokens",
                                         "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"))
        mods = [m["type"] for m in load_json("modules.json")]
        assert mods == ["sentence_transformers.models.Transformer",
                        "sentence_transformers.models.Pooling",
                        "sentence_transformers.models.Dense",
                        "sentence_transformers.models.Dense",
                        "sentence_transformers.models.Normalize"], mods
        self.dense_dirs = ["2_Dense", "3_Dense"]
        for d in self.dense_dirs:
            dc = load_json(d, "config.json")
            assert dc["bias"] is False and dc["activation_function"].endswith("Identity"), dc

        assert c["model_type"] == "gemma3_text" and c["hidden_activation"] == "gelu_pytorch_tanh"
        assert c["attn_logit_softcapping"] is None and c["rope_scaling"] is None
        assert c["attention_bias"] is False and c["use_bidirectional_attention"] is True
        self.H = c["hidden_size"]                   # 768
        self.nh = c["num_attention_heads"]          # 3
        self.nkv = c["num_key_value_heads"]         # 1
        self.hd = c["head_dim"]                     # 256
        self.L = c["num_hidden_layers"]             # 24
        self.eps = c["rms_norm_eps"]                # 1e-6
        self.layer_types = c["layer_types"]         # 5 sliding : 1 full
        assert len(self.layer_types) == self.L
        self.theta = {"full_attention": c["rope_theta"],                 # 1e6
                      "sliding_attention": c["rope_local_base_freq"]}    # 1e4
        # Gemma3TextConfig: "if use_bidirectional_attention: sliding_window = sliding_window // 2 + 1"
        # and _bidirectional_window_overlay: visible iff abs(q - kv) < sliding_window.
        self.window = c["sliding_window"] // 2 + 1 if window_radius is None else window_radius  # 257
        self.scaling = c["query_pre_attn_scalar"] ** -0.5                # 1/16
        # Gemma3TextScaledWordEmbedding: embed_scale = hidden**0.5, cast to the weight dtype (f32)
        self.embed_scale = float(np.float32(self.H ** 0.5))

        self.w = load_file(os.path.join(model_dir, "model.safetensors"))  # f32, as stored
        assert self.w["embed_tokens.weight"].shape == (c["vocab_size"], self.H)
        self.dense = [load_file(os.path.join(model_dir, d, "model.safetensors"))["linear.weight"]
                      for d in self.dense_dirs]                           # [3072,768], [768,3072]

        self.tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=self.max_seq_length)  # counts <bos>/<eos>

    # -------------------------------------------------------------- tokenizer
    def prompt_for(self, prompt_name):
        return "" if prompt_name is None else self.prompts[prompt_name]

    def encode_ids(self, texts, prompt_names):
        # SentenceTransformer.encode prepends the prompt; Transformer.tokenize strips.
        full = [(self.prompt_for(p) + str(t)).strip() for t, p in zip(texts, prompt_names)]
        if self.do_lower_case:
            full = [t.lower() for t in full]
        out = [e.ids for e in self.tok.encode_batch(full, add_special_tokens=True)]
        for ids in out:
            assert max(ids) < self.config["vocab_size"], "token id outside embed_tokens (<image_soft_token>?)"
        return out

    # -------------------------------------------------------------- forward
    def layer_weights(self, i):
        p = f"layers.{i}."
        names = ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm", "self_attn.q_norm", "self_attn.k_norm",
                 "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
        return {n: self.w[p + n + ".weight"].astype(self.dtype) for n in names}

    def masks(self, mask):
        """Additive masks [B,1,T,T] per layer type. mask: [B,T] 1 = real token."""
        T = mask.shape[1]
        i = np.arange(T)[:, None]
        j = np.arange(T)[None, :]
        key_ok = mask.astype(bool)[:, None, None, :]                       # [B,1,1,T]
        allowed = {
            # causal OR True  -> everything, AND padding
            "full_attention": np.broadcast_to(key_ok, (mask.shape[0], 1, T, T)),
            # (causal AND kv > q - W) OR |q - kv| < W  ->  |q - kv| < W, AND padding
            "sliding_attention": key_ok & (np.abs(i - j) < self.window)[None, None],
        }
        neg = np.finfo(self.dtype).min
        return {k: np.where(v, 0.0, neg).astype(self.dtype) for k, v in allowed.items()}

    def token_embeddings(self, input_ids, mask):
        """Gemma3TextModel.forward -> last_hidden_state [B, T, H] (after the final norm)."""
        dt = self.dtype
        B, T = input_ids.shape
        x = self.w["embed_tokens.weight"][input_ids].astype(dt) * dt.type(self.embed_scale)
        positions = np.arange(T)                       # position_ids = arange, also with padding
        ropes = {k: rope_tables(th, self.hd, positions, dt) for k, th in self.theta.items()}
        masks = self.masks(mask)
        groups = self.nh // self.nkv

        for li in range(self.L):
            lt = self.layer_types[li]
            w = self.layer_weights(li)
            cos, sin = ropes[lt]

            h = rms_norm(x, w["input_layernorm"], self.eps)
            q = (h @ w["self_attn.q_proj"].T).reshape(B, T, self.nh, self.hd).transpose(0, 2, 1, 3)
            k = (h @ w["self_attn.k_proj"].T).reshape(B, T, self.nkv, self.hd).transpose(0, 2, 1, 3)
            v = (h @ w["self_attn.v_proj"].T).reshape(B, T, self.nkv, self.hd).transpose(0, 2, 1, 3)
            q = apply_rope(rms_norm(q, w["self_attn.q_norm"], self.eps), cos, sin)
            k = apply_rope(rms_norm(k, w["self_attn.k_norm"], self.eps), cos, sin)
            k = np.repeat(k, groups, axis=1)           # repeat_kv: 1 kv head shared by 3 q heads
            v = np.repeat(v, groups, axis=1)
            s = (q @ k.transpose(0, 1, 3, 2)) * dt.type(self.scaling) + masks[lt]
            a = softmax(s) @ v                                              # [B, nh, T, hd]
            a = a.transpose(0, 2, 1, 3).reshape(B, T, self.nh * self.hd) @ w["self_attn.o_proj"].T
            x = x + rms_norm(a, w["post_attention_layernorm"], self.eps)

            h = rms_norm(x, w["pre_feedforward_layernorm"], self.eps)
            f = gelu_tanh(h @ w["mlp.gate_proj"].T) * (h @ w["mlp.up_proj"].T)
            f = f @ w["mlp.down_proj"].T
            x = x + rms_norm(f, w["post_feedforward_layernorm"], self.eps)

        return rms_norm(x, self.w["norm.weight"].astype(dt), self.eps)

    def pooled(self, ids_list):
        """Right-pad a batch with <pad>, run, mean-pool over real tokens: [B, H]."""
        T = max(len(ids) for ids in ids_list)
        B = len(ids_list)
        input_ids = np.full((B, T), PAD_ID, dtype=np.int64)
        mask = np.zeros((B, T), dtype=np.int64)
        for b, ids in enumerate(ids_list):
            input_ids[b, : len(ids)] = ids
            mask[b, : len(ids)] = 1
        h = self.token_embeddings(input_ids, mask)
        m = mask[:, :, None].astype(self.dtype)
        return (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)

    def embed_ids(self, ids_list):
        x = self.pooled(ids_list)
        for W in self.dense:                            # Dense: x @ W^T, no bias, Identity
            x = x @ W.astype(self.dtype).T
        n = np.sqrt((x * x).sum(axis=-1, keepdims=True))
        return x / np.maximum(n, 1e-12)                 # Normalize (F.normalize, eps 1e-12)

    def embed(self, texts, prompt_names=None, batch_size=1):
        if prompt_names is None:
            prompt_names = [None] * len(texts)
        ids = self.encode_ids(texts, prompt_names)
        out = [self.embed_ids(ids[i: i + batch_size]) for i in range(0, len(ids), batch_size)]
        return np.concatenate(out, 0) if out else np.zeros((0, self.H))


# ---------------------------------------------------------------- CLI
class _Item(argparse.Action):
    """Keep --query/--document/--raw texts in command-line order."""

    def __call__(self, parser, ns, value, option_string=None):
        items = getattr(ns, "items", None) or []
        items.append(({"--query": "query", "-q": "query", "--document": "document",
                        "-d": "document"}.get(option_string), value))
        ns.items = items


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--write-fixture", metavar="PATH")
    ap.add_argument("-q", "--query", action=_Item, dest="items", metavar="TEXT",
                    help='embed with the "query" prompt')
    ap.add_argument("-d", "--document", action=_Item, dest="items", metavar="TEXT",
                    help='embed with the "document" prompt')
    ap.add_argument("--raw", action=_Item, dest="items", metavar="TEXT", help="embed with no prompt")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--tokens", action="store_true", help="also print the tokens")
    args = ap.parse_args(argv)
    items = args.items or []
    if not items:
        ap.error("give at least one --query, --document or --raw TEXT")

    t0 = time.perf_counter()
    m = GemmaNumpy(args.model_dir, dtype=args.dtype)
    t1 = time.perf_counter()
    texts = [t for _, t in items]
    names = [p for p, _ in items]
    ids = m.encode_ids(texts, names)
    E = m.embed(texts, names, batch_size=args.batch_size)
    t2 = time.perf_counter()
    print(f"load {t1 - t0:.1f}s, embed {t2 - t1:.1f}s for {sum(map(len, ids))} tokens "
          f"({args.dtype})", file=sys.stderr)

    sentences = []
    for t, p, i, e in zip(texts, names, ids, E):
        s = {"text": t, "prompt_name": p, "prompt": m.prompt_for(p), "ids": i,
             "embedding": [float(f"{v:.8g}") for v in e]}
        if args.tokens:
            s["tokens"] = [m.tok.id_to_token(x) for x in i]
        sentences.append(s)
    if args.write_fixture:
        with open(args.write_fixture, "w", encoding="utf-8") as f:
            json.dump({"model": "google/embeddinggemma-300m",
                       "model_safetensors_sha256": _sha256(os.path.join(args.model_dir, "model.safetensors")),
                       "reference": "bench/reference_gemma.py (float64 numpy)",
                       "sliding_window_visible_if": f"abs(i - j) < {m.window}",
                       "max_seq_length": m.max_seq_length,
                       "sentences": sentences},
                      f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {args.write_fixture}", file=sys.stderr)
    json.dump(sentences, sys.stdout, ensure_ascii=False)
    print()
    if len(texts) > 1:
        print("cosine matrix:\n", np.round(E @ E.T, 4), file=sys.stderr)


def _sha256(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


if __name__ == "__main__":
    main()
