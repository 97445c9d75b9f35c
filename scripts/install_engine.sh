#!/usr/bin/env bash
# Install the real inference engine the engine tests use (llama-cpp-python[server] and gguf) into the current
# Python. The compiled wheel is cached, so only the first run on a machine pays for the build (~6-10 min on
# 2 cores). Exits non-zero when the engine cannot be had; the engine tests then skip with that reason.
set -euo pipefail
version="${MYLM_LLAMA_CPP_VERSION:-0.3.36}"
cache="${MYLM_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mylm/wheels}"
python="${PYTHON:-python}"
mkdir -p "$cache"
if ! compgen -G "$cache/llama_cpp_python-$version-*.whl" >/dev/null; then
  echo "install_engine: building llama-cpp-python $version once; the wheel is cached in $cache" >&2
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    "$python" -m pip wheel --quiet --no-deps "llama-cpp-python==$version" -w "$cache"
fi
# --only-binary: never fall back to compiling the source distribution behind the cache's back.
"$python" -m pip install --quiet --find-links "$cache" --only-binary llama-cpp-python \
  "llama-cpp-python[server]==$version" "gguf>=0.10"
"$python" -c "import llama_cpp, llama_cpp.server.app, gguf" 
echo "install_engine: llama-cpp-python $version ready" >&2
