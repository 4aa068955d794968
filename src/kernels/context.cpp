#include "kernels/context.h"

#include "kernels/cpu_backend.h"

namespace kvlm {

Context::Context(int threads, Isa isa_cap)
    : owned_(std::make_unique<ThreadPool>(threads > 0 ? threads : ThreadPool::default_threads())),
      isa_cap_(isa_cap),
      backend_(std::make_unique<CpuBackend>(*this)) {}

Context::Context(Isa isa_cap) : isa_cap_(isa_cap), backend_(std::make_unique<CpuBackend>(*this)) {}

Isa Context::isa() const { return capped_isa(isa_cap_); }

float* Context::scratch(int slot, size_t n) {
  if (slot >= static_cast<int>(scratch_.size())) scratch_.resize(slot + 1);
  Buffer<float>& v = scratch_[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

size_t Context::scratch_bytes() const {
  size_t b = (acts_.d.capacity() + acts_.x8.capacity()) * sizeof(float) + acts_.q.capacity();
  for (const auto& v : scratch_) b += v.capacity() * sizeof(float);
  return b;
}

Context& Context::this_thread() {
  thread_local Context ctx;
  return ctx;
}

}  // namespace kvlm
