// The CPU's features, detected once, and the one table of instruction sets kvlm's kernels are
// built for. A kernel asks isa_at_least(Isa::Avx2); a new ISA is one row here (plus its kernels).
//
// KVLM_ISA=scalar|avx2|avx512|amx (environment) caps the choice below what the CPU offers, so the
// scalar twins can run end to end on any machine (tests do), and a benchmark can pin an ISA.
#pragma once
#include <string>

// 1 where the x86 SIMD kernels are compiled in; elsewhere (aarch64) only the scalar twins build.
#if defined(__x86_64__)
#define KVLM_X86 1
#else
#define KVLM_X86 0
#endif

// The target the AVX-512 kernels are compiled for. Their test-only emulation (KVLM_AVX512_EMULATION:
// kernels/avx512_emulation.h) compiles them for AVX2, with the AVX-512 intrinsics emulated.
#if KVLM_AVX512_EMULATION
#define KVLM_AVX512_TARGET "avx2,fma,f16c"
#else
#define KVLM_AVX512_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"
#endif
// A pragma whose arguments are macros (a target pragma naming KVLM_AVX512_TARGET).
#define KVLM_PRAGMA_STRING(x) _Pragma(#x)
#define KVLM_PRAGMA(x) KVLM_PRAGMA_STRING(x)
// Every function between KVLM_TARGET_BEGIN("avx2,fma") and KVLM_TARGET_END is compiled for that
// target: GCC takes a target pragma, clang (the fuzz build) an attribute pragma.
#if defined(__clang__)
#define KVLM_TARGET_BEGIN(t) KVLM_PRAGMA(clang attribute push(__attribute__((target(t))), apply_to = function))
#define KVLM_TARGET_END _Pragma("clang attribute pop")
#else
#define KVLM_TARGET_BEGIN(t) _Pragma("GCC push_options") KVLM_PRAGMA(GCC target(t))
#define KVLM_TARGET_END _Pragma("GCC pop_options")
#endif

namespace kvlm {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_vnni = false, avx512_bf16 = false;
  // Intel AMX: tile registers and their int8 multiply, with the OS saving the tiles (XCR0) and
  // granting this process their state (Linux asks for it once, with arch_prctl).
  bool amx_tile = false, amx_int8 = false;
  // CPUID's vendor: some tuning differs by maker (an Intel core's software prefetches hold L1
  // fill buffers, so a burst of them stalls its loads; AMD's do not measurably).
  bool intel = false;
  std::string flags() const;  // the detected flags, space-separated (for benchmark records)
};

// Detected once (CPUID on x86-64; none elsewhere).
const CpuFeatures& cpu_features();
// Whether this binary's AVX-512 kernels are the test-only emulation (tests/CMakeLists.txt's
// kvlm_tests_avx512_emulated), which reports the AVX-512 flags on every AVX2 CPU.
bool avx512_emulated();

// Ordered: a higher ISA implies the lower ones' kernels run too.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Amx = 3 };
constexpr Isa kTopIsa = Isa::Amx;  // the default cap: no cap

struct IsaRow {
  Isa isa;
  const char* name;
  bool (*supported)(const CpuFeatures&);  // what the CPU must have for this row's kernels
  bool has_kernels;                       // kvlm ships kernels for it (false where not yet)
};
// Every ISA kvlm knows, lowest first.
const IsaRow* isa_table(int* n);

// The ISA the kernels use: the highest row the CPU supports and kvlm has kernels for, capped by
// KVLM_ISA. Chosen once. Throws on an unknown KVLM_ISA name.
Isa active_isa();
const char* isa_name(Isa isa);
// This thread's cap on top of that: an execution context's choice (kernels/context.h). Thread
// pools carry the submitting thread's cap to their workers for each job.
inline thread_local Isa t_isa_cap = kTopIsa;
// The ISA kernels run at under `cap`: the lower of the cap and active_isa().
inline Isa capped_isa(Isa cap) { return static_cast<int>(cap) < static_cast<int>(active_isa()) ? cap : active_isa(); }
inline Isa thread_isa() { return capped_isa(t_isa_cap); }
inline bool isa_at_least(Isa isa) { return static_cast<int>(thread_isa()) >= static_cast<int>(isa); }

// Sets this thread's cap for the scope's life.
class IsaScope {
 public:
  explicit IsaScope(Isa cap) : prev_(t_isa_cap) { t_isa_cap = cap; }
  ~IsaScope() { t_isa_cap = prev_; }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  Isa prev_;
};

// Waits a moment in a spin loop (PAUSE on x86, YIELD on Arm).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace kvlm
