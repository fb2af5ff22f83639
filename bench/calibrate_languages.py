"""The directions in which a model puts Korean text apart from English text, for recall's
query levelling (docs/models.md, "Recall across languages").

Each pair of bench/language_pairs.json says one thing in Korean and in English. Both are
embedded as queries (`cargo bench --bench vectors`, so with the server's own arithmetic); the
differences ko - en of the pairs span what the language alone adds to a vector, and their
first AXES principal directions (no centring: the mean difference is the strongest of them)
are written as little-endian f32 rows to src/embed/languages/<model>.f32.

    cargo bench --bench vectors -- .models/multilingual-e5-small <texts> <out>   # see main()
    .venv-model/bin/python bench/calibrate_languages.py .models/multilingual-e5-small
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

AXES = 4
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    model = os.path.abspath(sys.argv[1])
    name = os.path.basename(model.rstrip("/"))
    pairs = json.load(open(os.path.join(ROOT, "bench", "language_pairs.json")))["pairs"]
    with tempfile.TemporaryDirectory() as scratch:
        texts = os.path.join(scratch, "texts.json")
        json.dump({"queries": [t for p in pairs for t in (p["ko"], p["en"])]}, open(texts, "w"))
        out = os.path.join(scratch, "vectors")
        subprocess.run(
            ["cargo", "bench", "--bench", "vectors", "--", model, texts, out],
            cwd=ROOT,
            check=True,
        )
        vectors = np.fromfile(out + ".queries.f32", dtype="<f4").reshape(len(pairs) * 2, -1)
    differences = vectors[0::2].astype(np.float64) - vectors[1::2]
    axes = np.linalg.svd(differences, full_matrices=False)[2][:AXES]
    target = os.path.join(ROOT, "src", "embed", "languages", f"{name}.f32")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    axes.astype("<f4").tofile(target)
    print(f"{target}: {AXES} axes of width {axes.shape[1]}")


if __name__ == "__main__":
    main()
