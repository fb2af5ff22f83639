#!/usr/bin/env python3
"""Independent numpy reference for the sentence-transformers BERT models the server runs in
process: all-MiniLM-L6-v2 and multilingual-e5-small (docs/models.md).

Implements, from model.safetensors + config.json alone, exactly what
sentence-transformers does for these models (modules.json: Transformer -> Pooling(mean) ->
Normalize):

  text    = the model's prompt + text (config_sentence_transformers.json "prompts": e5's
            "query: " for questions, "passage: " for what is stored; none for MiniLM)
  tokens  = tokenizer.json (HF `tokenizers`), [CLS] ... [SEP], NO fixed padding,
            truncation at max_seq_length from sentence_bert_config.json (256), else 512
  h0      = LayerNorm(word_emb[ids] + pos_emb[0..n) + type_emb[0])       eps from config
  6 x     : a = softmax(Q K^T / sqrt(d_head) + mask_bias) V   (12 heads, d_head = 32)
            h = LayerNorm(h + Wo a + bo)
            h = LayerNorm(h + W2 gelu_erf(W1 h + b1) + b2)              (hidden_act "gelu" = erf)
  pooled  = sum(h * mask) / max(sum(mask), 1e-9)       (1_Pooling: pooling_mode_mean_tokens)
  out     = pooled / max(||pooled||_2, 1e-12)          (2_Normalize)

The BERT pooler (pooler.dense) is NOT used by sentence-transformers and is ignored here.
Arithmetic is float64 by default (the "truth"; a float32 implementation such as candle should
agree to ~1e-6 per component); --dtype float32 runs the same graph in float32.

Usage:
  python bench/reference_embed.py "sentence a" "sentence b"        -> JSON list of vectors
  python bench/reference_embed.py --model-dir DIR --tokens "text"  -> also show the tokens
  python bench/reference_embed.py --batch ...    pad all inputs into one batch (mask path)
  python bench/reference_embed.py --gelu tanh ...  tanh-approximate GELU (to size that error)
  python bench/reference_embed.py --query "question" ...   embed these as questions
  python bench/reference_embed.py --write-fixture tests/fixtures/minilm_reference.json \
      "The deploy pipeline uses blue-green releases on EKS." "데이터베이스 백업은 매일 밤 실행된다."

The model dir defaults to <repo>/.models/all-MiniLM-L6-v2 (`mcp-memory model fetch` puts it
there). Needs numpy, tokenizers, safetensors (bench/requirements-model.txt). Never touches the
network: the tokenizer is loaded from the file and HF_HUB_OFFLINE is forced on.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_DIR = REPO_ROOT / ".models" / "all-MiniLM-L6-v2"


_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    # numpy has no erf ufunc; math.erf is accurate to double precision (slow, but exact).
    return _ERF(x.astype(np.float64)).astype(x.dtype)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # biased variance, as torch
    return (x - mu) / np.sqrt(var + eps) * w + b


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    # torch Linear stores weight as (out, in)
    return x @ w.T + b


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mean_pool(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' Pooling (mean over the mask) then Normalize (L2)."""
    m = mask[:, :, None].astype(h.dtype)
    summed = (h * m).sum(axis=1)
    counts = np.maximum(m.sum(axis=1), 1e-9)
    pooled = summed / counts
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return pooled / norms


class SentenceBert:
    def __init__(self, model_dir: str | Path, dtype: str = "float64", gelu: str = "erf"):
        self.model_dir = Path(model_dir)
        cfg = json.loads((self.model_dir / "config.json").read_text())
        if cfg.get("model_type") != "bert":
            raise SystemExit(f"config.json model_type {cfg.get('model_type')!r} is not bert")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise SystemExit("only absolute position embeddings are implemented")
        act = cfg.get("hidden_act")
        if act != "gelu":
            raise SystemExit(f"hidden_act {act!r}: only 'gelu' (exact erf form) is implemented")
        self.cfg = cfg
        self.eps = float(cfg["layer_norm_eps"])
        self.n_layers = int(cfg["num_hidden_layers"])
        self.n_heads = int(cfg["num_attention_heads"])
        self.hidden = int(cfg["hidden_size"])
        self.d_head = self.hidden // self.n_heads
        self.dtype = np.dtype(dtype)
        self.act = gelu_erf if gelu == "erf" else gelu_tanh

        pool_cfg_path = self.model_dir / "1_Pooling" / "config.json"
        if pool_cfg_path.exists():
            pool = json.loads(pool_cfg_path.read_text())
            if not pool.get("pooling_mode_mean_tokens") or any(
                pool.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens",
                                      "pooling_mode_mean_sqrt_len_tokens")):
                raise SystemExit(f"1_Pooling/config.json is not plain mean pooling: {pool}")

        st_cfg_path = self.model_dir / "sentence_bert_config.json"
        if st_cfg_path.exists():
            self.max_len = int(json.loads(st_cfg_path.read_text())["max_seq_length"])
        else:
            self.max_len = int(cfg.get("max_position_embeddings", 512))

        raw = load_file(str(self.model_dir / "model.safetensors"))
        # Some exports prefix every key with "bert."; this one does not. Accept both.
        self.w = {(k[5:] if k.startswith("bert.") else k): v.astype(self.dtype)
                  for k, v in raw.items() if v.dtype.kind == "f"}

        self.prompts = {"query": "", "passage": ""}
        st_path = self.model_dir / "config_sentence_transformers.json"
        if st_path.exists():
            recorded = json.loads(st_path.read_text()).get("prompts") or {}
            self.prompts["query"] = recorded.get("query", "")
            self.prompts["passage"] = recorded.get("passage", recorded.get("document", ""))

        self.tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        # tokenizer.json ships padding Fixed(128) and truncation 128; sentence-transformers
        # replaces both (no fixed padding, truncation at max_seq_length = 256).
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=self.max_len)

    # -- tokenisation ---------------------------------------------------------------------
    def encode_tokens(self, texts: list[str]):
        return self.tok.encode_batch(texts, add_special_tokens=True)

    # -- forward --------------------------------------------------------------------------
    def forward(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ids/type_ids/mask: (B, T) ints. Returns last hidden state (B, T, H)."""
        w, eps = self.w, self.eps
        B, T = ids.shape
        pos = np.arange(T)
        h = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][pos][None, :, :]
             + w["embeddings.token_type_embeddings.weight"][type_ids])
        h = layer_norm(h, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)

        # Additive key mask: 0 where attended, a very large negative where padded (HF uses the
        # dtype's min; any value that underflows exp() to 0 gives the same result).
        neg = np.finfo(self.dtype).min
        bias = np.where(mask[:, None, None, :] > 0, 0.0, neg).astype(self.dtype)  # (B,1,1,T)
        scale = 1.0 / math.sqrt(self.d_head)

        def heads(x):  # (B,T,H) -> (B,nh,T,dh)
            return x.reshape(B, T, self.n_heads, self.d_head).transpose(0, 2, 1, 3)

        for i in range(self.n_layers):
            p = f"encoder.layer.{i}."
            q = heads(linear(h, w[p + "attention.self.query.weight"], w[p + "attention.self.query.bias"]))
            k = heads(linear(h, w[p + "attention.self.key.weight"], w[p + "attention.self.key.bias"]))
            v = heads(linear(h, w[p + "attention.self.value.weight"], w[p + "attention.self.value.bias"]))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias  # (B,nh,T,T)
            probs = softmax(scores)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(B, T, self.hidden)
            attn = linear(ctx, w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"])
            h = layer_norm(h + attn, w[p + "attention.output.LayerNorm.weight"],
                           w[p + "attention.output.LayerNorm.bias"], eps)
            inter = self.act(linear(h, w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"]))
            out = linear(inter, w[p + "output.dense.weight"], w[p + "output.dense.bias"])
            h = layer_norm(h + out, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
        return h

    def embed(self, texts: list[str], batch: bool = False, query: bool = False) -> np.ndarray:
        """One L2-normalised vector per text (float64 array, shape (N, hidden)), each text
        after the model's query or passage prompt."""
        prompt = self.prompts["query" if query else "passage"]
        encs = self.encode_tokens([prompt + t for t in texts])
        if not batch:  # each text alone: no padding at all (what a one-text call sees)
            out = []
            for e in encs:
                ids = np.array([e.ids]); tt = np.array([e.type_ids]); m = np.array([e.attention_mask])
                out.append(mean_pool(self.forward(ids, tt, m), m)[0])
            return np.array(out, dtype=np.float64)
        T = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), T), dtype=np.int64)
        tt = np.zeros_like(ids)
        m = np.zeros_like(ids)
        for r, e in enumerate(encs):
            n = len(e.ids)
            ids[r, :n], tt[r, :n], m[r, :n] = e.ids, e.type_ids, e.attention_mask
        return mean_pool(self.forward(ids, tt, m), m).astype(np.float64)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("texts", nargs="*", help="passages to embed (what is stored)")
    ap.add_argument("--query", action="append", default=[], help="a question to embed")
    ap.add_argument("--model-dir", default=os.environ.get("MINILM_DIR", str(DEFAULT_MODEL_DIR)))
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--gelu", choices=["erf", "tanh"], default="erf")
    ap.add_argument("--batch", action="store_true", help="run all texts as one padded batch")
    ap.add_argument("--tokens", action="store_true", help="also print tokens and ids")
    ap.add_argument("--digits", type=int, default=7, help="significant digits in the output")
    ap.add_argument("--write-fixture", metavar="PATH",
                    help='write {"model":..., "sentences":[{text, ids, embedding}]} to PATH')
    args = ap.parse_args(argv)

    if not (Path(args.model_dir) / "model.safetensors").exists():
        print(f"no model in {args.model_dir}: run `make models` first", file=sys.stderr)
        return 2
    model = SentenceBert(args.model_dir, dtype=args.dtype, gelu=args.gelu)
    texts = [(t, False) for t in args.texts] + [(t, True) for t in args.query]
    vecs = np.concatenate([model.embed([t for t, q in texts if q == query], batch=args.batch, query=query)
                           for query in (False, True) if any(q == query for _, q in texts)])
    fmt = lambda x: float(f"{x:.{args.digits}g}")  # noqa: E731
    encoded = model.encode_tokens([model.prompts["query" if q else "passage"] + t for t, q in texts])
    out = []
    for (text, query), v, enc in zip(texts, vecs, encoded):
        item = {"text": text, "embedding": [fmt(x) for x in v]}
        if query:
            item["query"] = True
        if args.tokens:
            item["tokens"] = enc.tokens
            item["ids"] = enc.ids
        out.append(item)
    if len(vecs) >= 2:
        print(f"cosine(text0, text1) = {cosine(vecs[0], vecs[1]):.6f}", file=sys.stderr)
    if args.write_fixture:
        fixture = {"model": Path(args.model_dir).name, "sentences": [
            {**{k: v for k, v in o.items() if k != "tokens"}, "ids": enc.ids}
            for o, enc in zip(out, encoded)]}
        Path(args.write_fixture).parent.mkdir(parents=True, exist_ok=True)
        with open(args.write_fixture, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {args.write_fixture}", file=sys.stderr)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
