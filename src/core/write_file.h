// Writes a file so that a reader, or a restart after a crash, sees the old file or the whole new
// one, never part of it: the bytes go to `path.<pid>.tmp`, which is renamed over `path`. A
// temporary file left by a crash ends in ".tmp" (its owner's start-up may remove those).
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>

namespace kvlm {

// The parts, in order, as one file; false (and no temporary left) when any write fails.
bool write_file_atomically(const std::string& path, std::initializer_list<std::pair<const void*, size_t>> parts);

}  // namespace kvlm
