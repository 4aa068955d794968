// The whole of a small file (configs, tokenizers, JSON, prompt lists) as bytes; throws KvlmError
// naming it. Only regular files are read, and only up to `max_bytes`: a device (/dev/zero), a
// FIFO or a folder given by mistake is an error at once, never an endless read.
#pragma once
#include <cstddef>
#include <string>

namespace kvlm {

constexpr size_t kMaxSmallFile = size_t{1} << 30;  // 1 GiB: far above any real tokenizer or config

std::string read_file(const std::string& path, size_t max_bytes = kMaxSmallFile);
// Throws unless path names a regular file (what, e.g. "tokenizer", goes into the message).
void require_regular_file(const std::string& path, const char* what = "file");

}  // namespace kvlm
