#!/usr/bin/env python3
"""Independent float64 numpy forward of sentence-transformers/all-mpnet-base-v2, the reference
for src/embed/mpnet.rs (tests/fixtures/mpnet_reference.json).

Pipeline = sentence-transformers modules.json: Transformer(MPNet) -> Pooling(mean) -> Normalize.
Formulas follow HF transformers' MPNet model:
  MPNetEmbeddings.forward, create_position_ids_from_input_ids,
  MPNetSelfAttention.forward, MPNetAttention.forward, MPNetIntermediate/MPNetOutput,
  MPNetEncoder.compute_position_bias, MPNetEncoder.relative_position_bucket,
  MPNetModel.forward (get_extended_attention_mask);
and sentence-transformers Transformer.tokenize / Pooling (mean) / Normalize.

Needs: numpy, tokenizers, safetensors (bench/requirements-model.txt).

    .venv-model/bin/python bench/reference_mpnet.py MODEL_DIR "some text" ["other text" ...]
    .venv-model/bin/python bench/reference_mpnet.py MODEL_DIR --write-fixture PATH TEXT...
"""
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The arithmetic MPNet shares with BERT (LayerNorm, exact GELU, softmax, mean pooling).
from reference_embed import gelu_erf as gelu, layer_norm, linear, mean_pool, softmax  # noqa: E402

PAD_ID = 1  # MPNetEmbeddings.padding_idx (hard-coded 1 in HF; == config.pad_token_id)


# ---------------------------------------------------------------- relative position bias
def relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
    """MPNetEncoder.relative_position_bucket, bidirectional, reproducing torch's float32 log.

    relative_position = memory_position - context_position = j - i (key minus query).
    """
    rp = np.asarray(relative_position, dtype=np.int64)
    ret = np.zeros_like(rp)
    n = -rp
    num_buckets //= 2                              # 16 per direction
    ret += (n < 0).astype(np.int64) * num_buckets  # key after query -> buckets 16..31
    n = np.abs(n)
    max_exact = num_buckets // 2                   # 8
    is_small = n < max_exact
    with np.errstate(divide="ignore", invalid="ignore"):
        # torch: torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
        #        * (num_buckets - max_exact), then .to(torch.long) (truncation)
        f = np.log(n.astype(np.float32) / np.float32(max_exact))
        f = f / np.float32(math.log(max_distance / max_exact))
        f = f * np.float32(num_buckets - max_exact)
        f = np.where(is_small, 0.0, f)             # n < 8 rows are discarded below anyway
    val_if_large = max_exact + f.astype(np.int64)
    val_if_large = np.minimum(val_if_large, num_buckets - 1)
    ret += np.where(is_small, n, val_if_large)
    return ret


def _bucket_f64(rp, num_buckets=32, max_distance=128):
    # same formula in float64, used only to show the float32 detail does not matter
    n = -np.asarray(rp, dtype=np.int64)
    ret = (n < 0).astype(np.int64) * (num_buckets // 2)
    n = np.abs(n)
    nb = num_buckets // 2
    me = nb // 2
    with np.errstate(divide="ignore"):
        v = me + (np.log(n / me) / math.log(max_distance / me) * (nb - me))
    v = np.where(n < me, 0, v).astype(np.int64)
    return ret + np.where(n < me, n, np.minimum(v, nb - 1))


def compute_position_bias(rel_bias_table, seq_len):
    """MPNetEncoder.compute_position_bias (position_ids=None): returns [heads, q, k]."""
    ctx = np.arange(seq_len, dtype=np.int64)[:, None]
    mem = np.arange(seq_len, dtype=np.int64)[None, :]
    bucket = relative_position_bucket(mem - ctx)          # [q, k]
    values = rel_bias_table[bucket]                        # [q, k, heads]
    return values.transpose(2, 0, 1)                       # [heads, q, k]


# ---------------------------------------------------------------- helpers
def create_position_ids_from_input_ids(input_ids, padding_idx=PAD_ID):
    mask = (input_ids != padding_idx).astype(np.int64)
    return np.cumsum(mask, axis=1) * mask + padding_idx


# ---------------------------------------------------------------- model
class MPNetNumpy:
    def __init__(self, model_dir):
        self.model_dir = model_dir
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        with open(os.path.join(model_dir, "sentence_bert_config.json")) as f:
            st = json.load(f)
        self.max_seq_length = int(st["max_seq_length"])         # 384
        self.do_lower_case = bool(st.get("do_lower_case", False))  # False (tokenizer lowercases itself)
        with open(os.path.join(model_dir, "1_Pooling", "config.json")) as f:
            pool = json.load(f)
        assert pool["pooling_mode_mean_tokens"] and not pool["pooling_mode_cls_token"]
        assert not pool["pooling_mode_max_tokens"] and not pool["pooling_mode_mean_sqrt_len_tokens"]
        with open(os.path.join(model_dir, "modules.json")) as f:
            mods = [m["type"] for m in json.load(f)]
        assert mods == ["sentence_transformers.models.Transformer",
                        "sentence_transformers.models.Pooling",
                        "sentence_transformers.models.Normalize"], mods

        c = self.config
        assert c["model_type"] == "mpnet" and c["hidden_act"] == "gelu"
        self.H = c["hidden_size"]
        self.nh = c["num_attention_heads"]
        self.hd = self.H // self.nh
        self.L = c["num_hidden_layers"]
        self.eps = c["layer_norm_eps"]
        self.num_buckets = c.get("relative_attention_num_buckets", 32)
        assert self.num_buckets == 32
        assert c["pad_token_id"] == PAD_ID
        assert self.max_seq_length + PAD_ID < c["max_position_embeddings"]

        raw = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {k: v.astype(np.float64) for k, v in raw.items() if v.dtype.kind == "f"}
        assert self.w["encoder.relative_attention_bias.weight"].shape == (self.num_buckets, self.nh)

        # Tokenizer: tokenizer.json ships truncation=128 and padding=Fixed(128); sentence-transformers
        # overrides both per call (padding=True -> longest, max_length=max_seq_length).
        self.tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=self.max_seq_length, strategy="longest_first")

    # -------------------------------------------------------------- tokenizer
    def encode_ids(self, texts):
        texts = [str(t).strip() for t in texts]                 # ST Transformer.tokenize strips
        if self.do_lower_case:
            texts = [t.lower() for t in texts]
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=True)]

    # -------------------------------------------------------------- forward
    def token_embeddings(self, input_ids, attention_mask):
        """MPNetModel.forward -> last_hidden_state, float64 [B, T, H]."""
        w = self.w
        B, T = input_ids.shape
        pos = create_position_ids_from_input_ids(input_ids, PAD_ID)
        x = w["embeddings.word_embeddings.weight"][input_ids] + w["embeddings.position_embeddings.weight"][pos]
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)

        # get_extended_attention_mask: (1 - mask) * finfo(dtype).min, broadcast [B,1,1,T]
        ext = (1.0 - attention_mask.astype(np.float64))[:, None, None, :] * np.finfo(np.float64).min
        bias = compute_position_bias(w["encoder.relative_attention_bias.weight"], T)[None]  # [1,nh,T,T]
        scale = 1.0 / math.sqrt(self.hd)

        def heads(t):
            return t.reshape(B, T, self.nh, self.hd).transpose(0, 2, 1, 3)

        for i in range(self.L):
            p = f"encoder.layer.{i}."
            q = heads(linear(x, w[p + "attention.attn.q.weight"], w[p + "attention.attn.q.bias"]))
            k = heads(linear(x, w[p + "attention.attn.k.weight"], w[p + "attention.attn.k.bias"]))
            v = heads(linear(x, w[p + "attention.attn.v.weight"], w[p + "attention.attn.v.bias"]))
            s = (q @ k.transpose(0, 1, 3, 2)) * scale
            s = s + bias
            s = s + ext
            a = softmax(s)
            ctx = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, self.H)
            o = linear(ctx, w[p + "attention.attn.o.weight"], w[p + "attention.attn.o.bias"])
            x = layer_norm(o + x, w[p + "attention.LayerNorm.weight"], w[p + "attention.LayerNorm.bias"], self.eps)
            h = gelu(linear(x, w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"]))
            h = linear(h, w[p + "output.dense.weight"], w[p + "output.dense.bias"])
            x = layer_norm(h + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        return x

    def embed_ids(self, ids_list):
        """Pad a batch (right, with id 1), run, mean-pool, L2-normalise. Returns [B, H] float64."""
        T = max(len(ids) for ids in ids_list)
        B = len(ids_list)
        input_ids = np.full((B, T), PAD_ID, dtype=np.int64)
        mask = np.zeros((B, T), dtype=np.int64)
        for b, ids in enumerate(ids_list):
            input_ids[b, : len(ids)] = ids
            mask[b, : len(ids)] = 1
        return mean_pool(self.token_embeddings(input_ids, mask), mask)

    def embed(self, texts, batch_size=32, query=False):
        """L2-normalised vectors; `query` is accepted for bench/calibrate_floor.py: MPNet has
        no prompts, so a query is embedded as any other text."""
        ids = self.encode_ids(texts)
        out = []
        for i in range(0, len(ids), batch_size):
            out.append(self.embed_ids(ids[i: i + batch_size]))
        return np.concatenate(out, 0) if out else np.zeros((0, self.H))


def _self_test_buckets():
    rp = np.arange(-1100, 1101)
    assert np.array_equal(relative_position_bucket(rp), _bucket_f64(rp))
    return rp


if __name__ == "__main__":
    args = sys.argv[1:]
    fixture = None
    if len(args) > 2 and args[1] == "--write-fixture":
        fixture = args[2]
        args = [args[0]] + args[3:]
    if len(args) < 2:
        print(__doc__)
        sys.exit(2)
    _self_test_buckets()
    m = MPNetNumpy(args[0])
    texts = args[1:]
    E = m.embed(texts)
    sentences = [{"text": t, "ids": ids, "embedding": [float(f"{v:.8g}") for v in e]}
                 for t, ids, e in zip(texts, m.encode_ids(texts), E)]
    if fixture:
        with open(fixture, "w", encoding="utf-8") as f:
            json.dump({"model": os.path.basename(os.path.normpath(args[0])), "sentences": sentences},
                      f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {fixture}", file=sys.stderr)
    for s in sentences:
        print(json.dumps({"text": s["text"], "ids": s["ids"], "embedding_head": s["embedding"][:8]},
                         ensure_ascii=False))
    if len(texts) > 1:
        print("cosine matrix:\n", np.round(E @ E.T, 4))
