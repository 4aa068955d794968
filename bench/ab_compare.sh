#!/usr/bin/env bash
# A/B of two kvlm binaries on the same built-in shapes (seeded synthetic weights, so both read
# identical matrices), alternating old and new so drift in the machine hits both alike.
# Prefill: TTFT of a 512-token prompt; decode: TPOT over 64 new tokens with the cache on.
# Usage: bench/ab_compare.sh OLD_KVLM NEW_KVLM [ROUNDS]   (prints one JSON line per run)
set -euo pipefail
OLD="$1" NEW="$2" ROUNDS="${3:-3}"
CELLS=("tinyllama-1.1b q8_0" "tinyllama-1.1b q4_0" "gpt2 q8_0")
for cell in "${CELLS[@]}"; do
  read -r preset weights <<<"$cell"
  for ((r = 0; r < ROUNDS; ++r)); do
    for side in old new; do
      bin="$OLD"; [ "$side" = new ] && bin="$NEW"
      out=$("$bin" bench --preset "$preset" --weights "$weights" --prompt-tokens 512 --new-tokens 64 \
            --runs 3 --warmup 1 --cache-on-only --no-roofline --json 2>/dev/null)
      python3 - "$side" "$preset" "$weights" <<PY
import json, sys
j = json.loads('''$out''')
on = j["results"]["cache_on"]
print(json.dumps({"side": sys.argv[1], "preset": sys.argv[2], "weights": sys.argv[3],
                  "prefill_ms": on["ttft_ms"]["mean"], "tpot_ms": on["tpot_ms"]["64"]["mean"]}))
PY
    done
  done
done
