#!/usr/bin/env bash
# Are two kvlm binaries' outputs bit-identical? `kvlm logits` on stories260K and every HF fixture
# (three weight formats, prefill and stepwise; compared with cmp), on every fixture's GGUF files
# as stored, and on the KL fixture's model quantized by the new binary into row-quant types; and `kvlm generate --json` ids
# on stories260K as HF, llama2.c and GGUF (four KV types, paged and contiguous, residual 0 and 16,
# plus sinks). A run that produces nothing on either side counts as a difference, except a model
# only the new binary loads (a family added since), counted apart.
# Usage: bench/identical_outputs.sh OLD_KVLM NEW_KVLM [SHARED_DIR]
set -uo pipefail
OLD="$1" NEW="$2" S="${3:-../shared}/models" T=$(mktemp -d)
n=0 fail=0 new_only=0
IDS=1,103,107,61,178,190,97,63,211,96,1,15,29,0,100,200  # below every fixture's vocabulary of 256
for m in $S/stories260K/stories260K.bin tests/fixtures/*/; do
  [ -f "$m" ] || [ -f "$m/config.json" ] || continue
  for w in f32 bf16 q8_0; do for step in "" --stepwise; do
    for side in old new; do
      bin="$OLD"; [ $side = new ] && bin="$NEW"
      "$bin" logits --model "$m" --weights $w --ids $IDS --out "$T/$side" $step >/dev/null 2>&1 || rm -f "$T/$side"
    done
    n=$((n + 1))
    if [ ! -s "$T/old" ] && [ -s "$T/new" ] && ! "$OLD" logits --model "$m" --ids 1 --out "$T/probe" >/dev/null 2>&1; then
      new_only=$((new_only + 1))
    elif [ ! -s "$T/old" ] || ! cmp -s "$T/old" "$T/new"; then fail=$((fail + 1)); echo "DIFF/EMPTY logits $m $w $step"; fi
    rm -f "$T/old" "$T/new"
  done; done
done
logits_pair() {  # model, extra flags...
  local m="$1"; shift
  for side in old new; do
    bin="$OLD"; [ $side = new ] && bin="$NEW"
    "$bin" logits --model "$m" --ids $IDS --out "$T/$side" "$@" >/dev/null 2>&1 || rm -f "$T/$side"
  done
  n=$((n + 1))
  if [ ! -s "$T/old" ] && [ -s "$T/new" ] && ! "$OLD" logits --model "$m" --ids 1 --out "$T/probe" >/dev/null 2>&1; then
    new_only=$((new_only + 1))
  elif [ ! -s "$T/old" ] || ! cmp -s "$T/old" "$T/new"; then fail=$((fail + 1)); echo "DIFF/EMPTY logits $m $*"; fi
  rm -f "$T/old" "$T/new"
}
for m in tests/fixtures/*/model-*.gguf; do
  [ "$(dirname "$m")" = tests/fixtures/kld ] && continue
  for step in "" --stepwise; do logits_pair "$m" $step; done
done
for t in Q4_K_M Q6_K Q3_K_M IQ4_XS Q5_0 Q4_1 MXFP4_MOE; do
  "$NEW" quantize tests/fixtures/kld/model-F16.gguf "$T/q.gguf" $t >/dev/null 2>&1 || continue
  for step in "" --stepwise; do logits_pair "$T/q.gguf" $step; done
done
ids() { "$@" 2>/dev/null | python3 -c "import sys,json; print(json.load(sys.stdin)['generated_ids'])" 2>/dev/null; }
for m in $S/stories260K-hf $S/stories260K/stories260K.bin $S/stories260K/stories260K-f32.gguf; do
  for kd in f32 bf16 int8 int4; do for lay in paged contiguous; do for res in 0 16; do
    a=(generate --model $m --prompt "Once upon a time" --max-new-tokens 60 --ignore-eos --json --kv-dtype $kd --kv-layout $lay --kv-residual $res --block-size 8)
    o=$(ids "$OLD" "${a[@]}"); w=$(ids "$NEW" "${a[@]}"); n=$((n + 1))
    if [ -z "$o" ] || [ "$o" != "$w" ]; then fail=$((fail + 1)); echo "DIFF/EMPTY generate $m $kd $lay $res"; fi
  done; done; done
done
a=(generate --model $S/stories260K-hf --prompt "Once upon a time" --max-new-tokens 700 --ignore-eos --json --kv-layout contiguous --window 100 --sink-tokens 4)
o=$(ids "$OLD" "${a[@]}"); w=$(ids "$NEW" "${a[@]}"); n=$((n + 1))
if [ -z "$o" ] || [ "$o" != "$w" ]; then fail=$((fail + 1)); echo "DIFF/EMPTY generate sinks"; fi
rm -rf "$T"
echo "compared $n runs, $fail differing or empty ($new_only of a model only the new binary loads)"
[ $fail -eq 0 ]
