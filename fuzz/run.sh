#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 30) on a copy of its seed corpus; fails on any crash.
# Usage: fuzz/run.sh BUILD_DIR [SECONDS]   (KVLM_FUZZ_TARGETS="gguf config" runs only those)
set -euo pipefail
build=$1
secs=${2:-30}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for target in ${KVLM_FUZZ_TARGETS:-safetensors gguf config tokenizer_json llama2c cli_args request block_record chat_template}; do
  mkdir -p "$work/$target"
  cp -r "$here/corpus/$target/." "$work/$target/"
  # Real models' templates as further seeds where ../shared is here (read, never committed).
  shared=${KVLM_SHARED:-$here/../../shared}
  if [ "$target" = chat_template ] && [ -d "$shared/chat-templates" ]; then cp "$shared"/chat-templates/*.jinja "$work/$target/"; fi
  # Every fixture's config.json: each family's reader starts from a config it accepts.
  if [ "$target" = config ]; then
    for f in "$here"/../tests/fixtures/*/config.json; do cp "$f" "$work/config/$(basename "$(dirname "$f")").json"; done
  fi
  # A model whose matrices hold super-blocks of every type is about 300 KB: the GGUF target reads
  # inputs that long, and starts from one cut inside its last super-block as well.
  max_len=65536
  if [ "$target" = gguf ]; then
    max_len=400000
    head -c -100 "$here/corpus/gguf/tiny_row_quants.gguf" >"$work/gguf/cut_in_a_super_block.gguf"
    # Each family's Q8_0 fixture (llama.cpp's converter wrote them), so every family's reader is fuzzed.
    for f in "$here"/../tests/fixtures/*/model-Q8_0.gguf; do
      cp "$f" "$work/gguf/$(basename "$(dirname "$f")").gguf"
    done
  fi
  echo "== fuzz_$target for ${secs}s on $(ls "$work/$target" | wc -l) seeds"
  if ! "$build/fuzz/fuzz_$target" -max_total_time="$secs" -rss_limit_mb=2048 -max_len="$max_len" -print_final_stats=1 \
      -artifact_prefix="$work/" "$work/$target" >"$work/$target.log" 2>&1; then
    tail -n 60 "$work/$target.log"
    echo "fuzz_$target FAILED"
    exit 1
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^Done" "$work/$target.log" || true
done
echo "fuzzers ran clean"
