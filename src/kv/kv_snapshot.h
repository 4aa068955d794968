// Snapshots of one sequence: its tokens and every KV row it holds, in one file, so a later run
// (or another server) continues where it stopped, as llama.cpp's --prompt-cache does. Pages are
// saved as stored (quantized ones with their f32 ring of newest rows), so restoring and going on
// gives exactly the tokens an uninterrupted run gives.
//
// The file: a fixed header (magic, version, model fingerprint, codec and block shape, tenant,
// lengths, the SHA-256 of the body), then the body: tokens, block payloads, the f32 ring. It is
// written aside and renamed into place. A snapshot of another model, codec or tenant, or one whose
// checksum fails, is refused with the reason.
#pragma once
#include <string>
#include <vector>

#include "core/sha256.h"
#include "kv/paged_cache.h"

namespace kvlm {

// Writes `cache` (which holds KV for tokens[0, cache.length())) and `tokens` to `path`.
// Throws KvlmError when the cache cannot be saved (rows freed by a sliding window, evicted by
// sinks) or the file cannot be written.
void save_kv_snapshot(const PagedKvCache& cache, const std::vector<int>& tokens, const Sha256Digest& model,
                      const std::string& salt, const std::string& path);

// The tokens of a snapshot, after its structure and checksum are checked (they cover the
// tokens, so these are the tokens that were saved); throws KvlmError naming the problem.
std::vector<int> kv_snapshot_tokens(const std::string& path);

// Fills the empty `cache` from the snapshot at `path` for the longest common prefix of the
// snapshot's tokens and `tokens`, leaving at least one token to compute. Returns the positions
// restored. Throws KvlmError naming why the snapshot is refused (damaged, truncated, another
// model, codec or tenant); the cache is left empty then.
int restore_kv_snapshot(PagedKvCache& cache, const std::vector<int>& tokens, const Sha256Digest& model,
                        const std::string& salt, const std::string& path);

}  // namespace kvlm
