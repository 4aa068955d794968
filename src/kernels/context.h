// Context: what a computation runs with, passed by reference (as gemma.cpp passes a MatMulEnv&):
// - its thread pool;
// - the instruction set its kernels use (a cap below what the CPU and KVLM_ISA allow);
// - scratch that keeps its size between calls, so the forward pass's activations and the Q8_0
//   copy of a layer's input are allocated once per batch shape, not on every call;
// - its backend: the ops a forward pass is built from (backend.h), the CPU's on this pool.
// One Context serves one computation at a time; two Contexts compute at once in one process.
// A backend other than the CPU would hang its device, streams and device buffers here.
#pragma once
#include <memory>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/qgemm.h"

namespace kvlm {

class Context {
 public:
  // Owns a pool of `threads` (0: the physical cores). Throws KvlmError if the threads cannot start.
  explicit Context(int threads, Isa isa_cap = kTopIsa);
  // Uses the process pool (ThreadPool::global(): sized by --threads, or a ThreadPool::Scope's).
  explicit Context(Isa isa_cap = kTopIsa);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ThreadPool& pool() const { return owned_ ? *owned_ : ThreadPool::global(); }
  // The ISA this context's kernels use: its cap, within what the CPU and KVLM_ISA allow.
  Isa isa() const;
  Isa isa_cap() const { return isa_cap_; }
  // Where this context's buffers live (scratch, and the KV pages an engine on it allocates).
  // Only the host exists today; a device backend's context names its device.
  Device device() const { return backend_->device(); }
  Backend& backend() { return *backend_; }

  // At least n floats for `slot`, kept between calls (grown, never shrunk). Contents undefined.
  float* scratch(int slot, size_t n);
  // The Q8_0 copy of a quantized layer's input, reused from call to call.
  QuantizedActs& quantized_acts() { return acts_; }
  // Bytes the scratch holds now (for the ledger and tests).
  size_t scratch_bytes() const;

  // The calling thread's default context, on the process pool; made on first use.
  static Context& this_thread();
  // `ctx` when given, else this_thread() (options whose context is optional).
  static Context& or_this_thread(Context* ctx) { return ctx ? *ctx : this_thread(); }

 private:
  std::unique_ptr<ThreadPool> owned_;
  Isa isa_cap_;
  std::unique_ptr<Backend> backend_;
  std::vector<Buffer<float>> scratch_;  // activations, on the context's device
  QuantizedActs acts_;
};

}  // namespace kvlm
