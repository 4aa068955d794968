// Read-only memory map of a whole file. Readers validate every offset against size().
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvlm {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws KvlmError if missing/unreadable
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool contains(const uint8_t* p) const { return p >= data_ && p < data_ + size_; }
  // Gives back the whole pages inside [p, p + n): a tensor copied into another layout is not read
  // from the file again, and its pages would otherwise count in the process's memory until unmap.
  void drop_pages(const uint8_t* p, size_t n) const;
  // Maps [p, p + n) in one call (MADV_POPULATE_READ, Linux 5.14+; advice only elsewhere): weights
  // used from the mapping would otherwise fault in one 4 KiB page at a time in the first forward.
  void populate(const uint8_t* p, size_t n) const;

 private:
  void advise(const uint8_t* p, size_t n, bool whole_pages_only, int advice) const;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvlm
