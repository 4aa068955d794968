// Software prefetch for the x86 kernels: each helper asks for every 64-byte line of a range, into
// L1. Shared by the attention kernels and the quantized GEMM.
#pragma once
#include <cstddef>

#include "core/cpu.h"

#if KVLM_X86
#include <immintrin.h>

namespace kvlm {

// The lines of [p, p + bytes).
inline void prefetch_bytes(const void* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + o, _MM_HINT_T0);
}

// The lines of [p, p + Bytes), with no loop left at run time: a loop of unknown count in the
// attention's value sums made GCC store all twelve accumulators every key.
template <int Bytes>
inline void prefetch_span(const void* p) {
  const char* c = static_cast<const char*>(p);
  for (int o = 0; o < Bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
  if (Bytes % 64 != 0) _mm_prefetch(c + Bytes - 1, _MM_HINT_T0);
}

}  // namespace kvlm
#endif  // KVLM_X86
