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

void MappedFile::drop_pages(const uint8_t* p, size_t n) const {
  if (!contains(p) || n == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t hi = std::min(reinterpret_cast<uintptr_t>(p) + n, reinterpret_cast<uintptr_t>(data_) + size_) / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);  // advice only: failure is harmless
}

void MappedFile::populate(const uint8_t* p, size_t n) const {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
  if (!contains(p) || n == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t hi = std::min(reinterpret_cast<uintptr_t>(p) + n, reinterpret_cast<uintptr_t>(data_) + size_);
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_READ);  // EINVAL on old kernels: harmless
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kvlm
