// <immintrin.h> for the files with AVX-512 kernels: in the emulation build (KVLM_AVX512_EMULATION,
// tests only) the AVX-512 intrinsics they use are replaced by lane-by-lane C++.
#pragma once
#include <immintrin.h>
#if KVLM_AVX512_EMULATION
#include "kernels/avx512_emulation.h"
#endif
