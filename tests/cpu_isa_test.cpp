// The ISA table (core/cpu.h): detection agrees with the compiler's own CPU checks, the choice
// respects what kvlm has kernels for, and KVLM_ISA caps it (the scalar end-to-end run in
// tests/CMakeLists.txt relies on that).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/cpu.h"
#include "kernels/dot.h"

namespace kvlm {
namespace {

TEST(CpuIsa, DetectionAgreesWithTheCompiler) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(f.avx2, static_cast<bool>(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(f.fma, static_cast<bool>(__builtin_cpu_supports("fma")));
  if (avx512_emulated()) {  // the AVX-512 row is emulated on every AVX2 CPU
    EXPECT_EQ(f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni, f.avx2);
  } else {
    EXPECT_EQ(f.avx512f, static_cast<bool>(__builtin_cpu_supports("avx512f")));
    EXPECT_EQ(f.avx512bw, static_cast<bool>(__builtin_cpu_supports("avx512bw")));
    EXPECT_EQ(f.avx512vl, static_cast<bool>(__builtin_cpu_supports("avx512vl")));
    EXPECT_EQ(f.avx512_vnni, static_cast<bool>(__builtin_cpu_supports("avx512vnni")));
  }
  std::printf("CPU flags: %s\n", f.flags().c_str());
#else
  GTEST_SKIP() << "not x86-64: no CPUID features to compare";
#endif
}

TEST(CpuIsa, TheTableIsOrderedAndTheChoiceHasKernels) {
  int n = 0;
  const IsaRow* rows = isa_table(&n);
  ASSERT_GE(n, 2);
  EXPECT_EQ(rows[0].isa, Isa::Scalar);
  EXPECT_TRUE(rows[0].has_kernels);
  for (int i = 1; i < n; ++i) EXPECT_GT(static_cast<int>(rows[i].isa), static_cast<int>(rows[i - 1].isa));
  const Isa active = active_isa();
  bool found = false;
  for (int i = 0; i < n; ++i)
    if (rows[i].isa == active) {
      found = true;
      EXPECT_TRUE(rows[i].has_kernels);
      EXPECT_TRUE(rows[i].supported(cpu_features()));
    }
  EXPECT_TRUE(found);
  EXPECT_STREQ(kernel_isa(), isa_name(active));
  // KVLM_ISA caps the choice: under the scalar run every kernel is the scalar twin.
  const char* cap = std::getenv("KVLM_ISA");
  if (cap && std::string(cap) == "scalar") {
    EXPECT_EQ(active, Isa::Scalar);
  }
  std::printf("kernels: %s%s\n", isa_name(active), cap ? (std::string(" (KVLM_ISA=") + cap + ")").c_str() : "");
}

}  // namespace
}  // namespace kvlm
