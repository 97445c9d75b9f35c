#!/usr/bin/env bash
# Install the real inference engine the engine tests use (llama-cpp-python[server] and gguf) into the current
# Python. The compiled wheel is cached, so only the first run on a machine pays for the build (~6-10 min on
# 2 cores). Exits non-zero when the engine cannot be had; the engine tests then skip with that reason.
# Prints the folder of the cached wheel on stdout.
set -euo pipefail
version="${MYLM_LLAMA_CPP_VERSION:-0.3.36}"
# Built for x86-64 with AVX2 (no -march=native): a native build on a CPU with AMX tiles (Sapphire Rapids and
# later, as CI's virtual machines have) enables ggml's AMX kernels, and every decode then segfaults inside the VM.
# The flavour names the cache folder, so a wheel built with other flags is never picked up again.
flavour="avx2"
default_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
if [ "$(uname -m)" != "x86_64" ]; then flavour="native"; default_args=""; fi
cache="${MYLM_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mylm/wheels/$flavour}"
python="${PYTHON:-python}"
mkdir -p "$cache"
if ! compgen -G "$cache/llama_cpp_python-$version-*.whl" >/dev/null; then
  echo "install_engine: building llama-cpp-python $version once; the wheel is cached in $cache" >&2
  # --no-cache-dir: pip's own wheel cache would hand back a wheel built earlier with other flags.
  CMAKE_ARGS="${CMAKE_ARGS:-$default_args}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    "$python" -m pip wheel --quiet --no-cache-dir --no-deps "llama-cpp-python==$version" -w "$cache"
fi
# --only-binary: never fall back to compiling the source distribution behind the cache's back.
"$python" -m pip install --quiet --find-links "$cache" --only-binary llama-cpp-python \
  "llama-cpp-python[server]==$version" "gguf>=0.10"
"$python" -c "import llama_cpp, llama_cpp.server.app, gguf" 
echo "install_engine: llama-cpp-python $version ready" >&2
echo "$cache"  # the wheel folder, for a later `pip install --find-links` of the `local` extra
