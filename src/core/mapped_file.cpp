#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace kvlm {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  struct stat pre {};
  // stat first: open() on a FIFO would block until a writer appears.
  if (::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode))
    fail(path, S_ISDIR(pre.st_mode) ? ": is a folder, not a model file" : ": not a regular file (a device, pipe or socket)");
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail(path, ": mmap failed: ", std::strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

void MappedFile::advise(const uint8_t* p, size_t n, bool whole_pages_only, int advice) const {
  if (!contains(p) || n == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE)), at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = std::min(at + n, reinterpret_cast<uintptr_t>(data_) + size_);
  // Pages partly outside the range hold a neighbour's bytes: dropping skips them, mapping takes them.
  const uintptr_t lo = whole_pages_only ? (at + page - 1) / page * page : at / page * page;
  const uintptr_t hi = whole_pages_only ? end / page * page : end;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, advice);  // advice only: failure is harmless
}

void MappedFile::drop_pages(const uint8_t* p, size_t n) const { advise(p, n, true, MADV_DONTNEED); }

void MappedFile::populate(const uint8_t* p, size_t n) const {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL
#endif
  advise(p, n, false, MADV_POPULATE_READ);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kvlm
