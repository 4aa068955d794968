#!/usr/bin/env bash
# Installs the Debian 12 packages kvlm builds against (skips apt when all are present).
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libcli11-dev libpcre2-dev
      libgtest-dev libbenchmark-dev libcpp-httplib-dev libhwy-dev libssl-dev clang libclang-rt-14-dev
      python3-venv prometheus chromium chromium-driver)
# prometheus: promtool checks the server's /metrics; chromium + its driver: the chat page test
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
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import openai, pytest, selenium, nanobind, numpy" >/dev/null 2>&1; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "openai>=1.40" "pytest>=7" "selenium>=4.10" \
      "nanobind>=2.0" "numpy>=1.21"
fi

