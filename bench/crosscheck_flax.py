#!/usr/bin/env python3
"""Cross-check bench/reference_embed.py (our numpy BERT) against a second, independently written
implementation: Hugging Face transformers' own FlaxBertModel (JAX/XLA, CPU), loaded from the same
model.safetensors, plus transformers' pure-Python BertTokenizer (vocab.txt) against the Rust
`tokenizers` reading tokenizer.json.

Not part of the project's tooling; run it in a throwaway venv (no torch needed):
  python3 -m venv /tmp/venv-xcheck
  /tmp/venv-xcheck/bin/pip install "transformers==4.57.1" "jax[cpu]==0.6.2" "flax==0.10.7" \
      safetensors numpy
  /tmp/venv-xcheck/bin/python bench/crosscheck_flax.py [MODEL_DIR]
(transformers 5 dropped Flax; 4.57 + jax 0.6 + flax 0.10 is a combination that works.)
"""
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_embed import DEFAULT_MODEL_DIR, SentenceBert  # noqa: E402

SENTENCES = [
    "The deploy pipeline uses blue-green releases on EKS.",
    "데이터베이스 백업은 매일 밤 실행된다.",
    "How do we ship releases to production?",
    "Run `cargo nextest run --workspace` before pushing; CI rejects failing tests.",
    "Café naïve résumé — ÀÉÎÕÜ déjà vu; 東京 北京; emoji 🚀🔥; tabs\tand\nnewlines",
    "",
    "a " * 400,  # longer than 256 word pieces: exercises truncation
]


def main() -> int:
    model_dir = Path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL_DIR)
    from transformers import BertTokenizer, FlaxBertModel

    ours64 = SentenceBert(model_dir, dtype="float64")
    ours32 = SentenceBert(model_dir, dtype="float32")

    # 1. tokenisation: Rust tokenizers (tokenizer.json) vs transformers' slow Python BertTokenizer
    slow = BertTokenizer(str(model_dir / "vocab.txt"), do_lower_case=True)
    tok_mismatch = 0
    for s in SENTENCES:
        a = ours64.encode_tokens([s])[0].ids
        b = slow(s, truncation=True, max_length=ours64.max_len)["input_ids"]
        if a != b:
            tok_mismatch += 1
            print(f"TOKEN MISMATCH for {s[:40]!r}:\n  tokenizers {a}\n  slow       {b}")
    print(f"tokenizer cross-check: {len(SENTENCES) - tok_mismatch}/{len(SENTENCES)} identical")

    # 2. forward pass: HF FlaxBertModel (float32) + mean pooling + L2 norm
    flax = FlaxBertModel.from_pretrained(str(model_dir), from_pt=True)
    encs = ours64.encode_tokens(SENTENCES)
    T = max(len(e.ids) for e in encs)
    ids = np.zeros((len(encs), T), dtype=np.int32)
    mask = np.zeros_like(ids)
    for r, e in enumerate(encs):
        ids[r, : len(e.ids)] = e.ids
        mask[r, : len(e.ids)] = 1
    hidden = np.asarray(flax(input_ids=ids, attention_mask=mask,
                             token_type_ids=np.zeros_like(ids)).last_hidden_state, dtype=np.float64)
    m = mask[:, :, None].astype(np.float64)
    pooled = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    ref_flax = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    e64 = ours64.embed(SENTENCES)                # each sentence alone, no padding
    e64b = ours64.embed(SENTENCES, batch=True)   # padded batch (mask path)
    e32 = ours32.embed(SENTENCES)
    gelu_tanh = SentenceBert(model_dir, dtype="float64", gelu="tanh").embed(SENTENCES)

    def report(name, a, b):
        d = np.abs(a - b).max()
        cos = min(float((x @ y) / np.linalg.norm(x) / np.linalg.norm(y)) for x, y in zip(a, b))
        print(f"{name:44s} max|diff| = {d:.3e}   min cosine = {cos:.9f}")
        return d

    print(f"{len(SENTENCES)} sentences, lengths {[len(e.ids) for e in encs]}")
    d = report("numpy f64 vs HF FlaxBertModel f32", e64, ref_flax)
    report("numpy f32 vs HF FlaxBertModel f32", e32, ref_flax)
    report("numpy f64 vs numpy f32", e64, e32)
    report("numpy f64 alone vs numpy f64 padded batch", e64, e64b)
    report("numpy f64 erf-GELU vs tanh-approx GELU", e64, gelu_tanh)
    ok = d < 1e-5 and tok_mismatch == 0
    print("CROSS-CHECK", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
