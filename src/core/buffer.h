// Buffer<T>: an array of T in one device's memory, the storage type of weights, activations and
// KV pages. Today every buffer lives on the host: 64-byte aligned, and from 2 MiB up 2 MiB
// aligned and advised as transparent huge pages (decode sweeps the weights: ~500x fewer TLB
// misses). A device backend adds a Device row and its allocator in buffer.cpp; code that only
// passes buffers around does not change.
//
// The API is the part of std::vector the engine uses (size, data, indexing, resize, assign), so
// host code reads the same. New elements are zero.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <vector>

namespace kvlm {

enum class Device { Host };
const char* device_name(Device d);

// Untyped allocation on a device; Buffer<T> below is what code holds.
void* device_alloc(Device d, size_t bytes);  // zeroed; throws KvlmError naming the size when it cannot
void device_free(Device d, void* p, size_t bytes);
// p (from device_alloc(d, old_bytes)) moved to new_bytes > old_bytes without copying, where both
// are mappings of their own (large): its pages are remapped, the added ones zero. nullptr where
// that does not apply or fails (p is then untouched): the caller copies instead. A KV cache
// growing from 8K to 16K positions copied its 370 MB (TinyLlama f32) within one decode step.
void* device_grow(Device d, void* p, size_t old_bytes, size_t new_bytes);

template <class T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>, "buffers hold plain numbers");

 public:
  Buffer() = default;
  explicit Buffer(size_t n, Device d = Device::Host) : device_(d) { resize(n); }
  Buffer(size_t n, const T& value) { assign(n, value); }
  Buffer(std::initializer_list<T> v) { assign(v.begin(), v.end()); }
  Buffer(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: a vector reads as a buffer
  Buffer(const Buffer& o) : device_(o.device_) { assign(o.begin(), o.end()); }
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer o) noexcept {
    swap(o);
    return *this;
  }
  Buffer& operator=(const std::vector<T>& v) {
    assign(v.begin(), v.end());
    return *this;
  }
  ~Buffer() { release(); }

  // A view of n values someone else owns, used as they are stored (a mapped model file's
  // weights: loading then reads nothing, and the pages stay shared with the page cache). `owner`
  // keeps the memory alive. The memory may be a read-only mapping, so a borrowed buffer is never
  // written: growing or assigning it first moves it to memory of its own.
  static Buffer borrow(const T* p, size_t n, std::shared_ptr<const void> owner) {
    Buffer b;
    b.p_ = const_cast<T*>(p);
    b.n_ = b.cap_ = n;
    b.owner_ = std::move(owner);
    return b;
  }

  void swap(Buffer& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    std::swap(cap_, o.cap_);
    std::swap(device_, o.device_);
    std::swap(owner_, o.owner_);
  }

  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  size_t capacity() const { return cap_; }
  bool empty() const { return n_ == 0; }
  Device device() const { return device_; }
  T* data() { return p_; }
  const T* data() const { return p_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }

  // Keeps the first min(n, size()) elements; new ones are zero. Growing a non-empty buffer
  // takes half as much again, so scratch that grows step by step reallocates rarely.
  void resize(size_t n) {
    if (n > cap_ || (owner_ && n > n_)) {
      const size_t cap = cap_ > 0 ? std::max(n, cap_ + cap_ / 2) : n;
      if (!owner_ && p_) {
        if (T* q = static_cast<T*>(device_grow(device_, p_, cap_ * sizeof(T), cap * sizeof(T)))) {
          // Remapped in place of a copy: values past size() from before a shrink are cleared;
          // the pages past the old capacity were never written, or are new (zero).
          std::memset(static_cast<void*>(q + n_), 0, (cap_ - n_) * sizeof(T));
          p_ = q;
          cap_ = cap;
          n_ = n;
          return;
        }
      }
      T* q = static_cast<T*>(device_alloc(device_, cap * sizeof(T)));
      if (n_) std::memcpy(q, p_, n_ * sizeof(T));
      const size_t keep = n_;
      release();
      p_ = q;
      cap_ = cap;
      n_ = keep;
    } else if (n > n_) {
      std::memset(static_cast<void*>(p_ + n_), 0, (n - n_) * sizeof(T));
    }
    n_ = n;
  }
  void assign(size_t n, const T& value) {
    if (n > cap_ || owner_) release();  // sized exactly: a fresh content is no growth
    resize(0);
    resize(n);
    std::fill(p_, p_ + n, value);
  }
  template <class It>
  void assign(It first, It last) {
    const size_t n = static_cast<size_t>(std::distance(first, last));
    if (n > cap_ || owner_) release();
    resize(0);
    resize(n);
    std::copy(first, last, p_);
  }
  // Gives the memory back (std::vector's clear keeps it; a buffer's owner means to free it).
  void clear() { Buffer().swap(*this); }

 private:
  void release() {
    if (p_ && !owner_) device_free(device_, p_, cap_ * sizeof(T));
    owner_.reset();
    p_ = nullptr;
    n_ = cap_ = 0;
  }

  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
  Device device_ = Device::Host;
  std::shared_ptr<const void> owner_;  // set for a borrowed view (the memory is not ours to free)
};

}  // namespace kvlm
