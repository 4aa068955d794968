#include "core/cpu.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kvlm {

namespace {

// Linux hands a process the AMX tile state only when asked (the state is 8 KiB per thread, so
// the kernel saves it only for processes that want it); asked once, before any thread uses tiles.
bool os_grants_amx_tiles() {
#if defined(__x86_64__) && defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  bool osxsave = false;
  if (__get_cpuid(0, &a, &b, &c, &d)) f.intel = b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;  // "GenuineIntel"
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f.fma = c & (1u << 12);
    f.f16c = c & (1u << 29);
    osxsave = c & (1u << 27);
  }
  // The OS must save the wide registers (XCR0): YMM for AVX2, ZMM and mask registers for AVX-512.
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  const bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ymm && (b & (1u << 5));
    f.avx512f = zmm && (b & (1u << 16));
    f.avx512dq = zmm && (b & (1u << 17));
    f.avx512bw = zmm && (b & (1u << 30));
    f.avx512vl = zmm && (b & (1u << 31));
    f.avx512_vnni = zmm && (c & (1u << 11));
    const bool tiles = (xcr0 & 0x60000) == 0x60000;  // XTILECFG and XTILEDATA
    f.amx_tile = tiles && (d & (1u << 24));
    f.amx_int8 = f.amx_tile && (d & (1u << 25));
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = zmm && (a & (1u << 5));
  f.fma = f.fma && ymm;
  f.f16c = f.f16c && ymm;
  if (f.amx_tile && !os_grants_amx_tiles()) f.amx_tile = f.amx_int8 = false;
#endif
#if KVLM_AVX512_EMULATION
  // The AVX-512 kernels run emulated on any AVX2 machine (kernels/avx512_emulation.h).
  if (f.avx2 && f.fma && f.f16c) f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = f.avx512_vnni = f.avx512_bf16 = true;
  f.amx_tile = f.amx_int8 = false;  // tiles have no emulation
#endif
  return f;
}

bool has_avx2(const CpuFeatures& f) { return f.avx2 && f.fma && f.f16c; }
// The AVX-512 row is the VNNI generation (Ice Lake, Zen 4 on): its int8 dots are vpdpbusd. A CPU
// with AVX-512 but no VNNI (Skylake-X) runs the AVX2 kernels.
bool has_avx512(const CpuFeatures& f) {
  return has_avx2(f) && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512_vnni;
}
// The AMX row: the AVX-512 row's kernels plus int8 tile multiplies for many-token products.
bool has_amx(const CpuFeatures& f) { return has_avx512(f) && f.amx_tile && f.amx_int8; }
bool always(const CpuFeatures&) { return true; }

#if defined(__x86_64__)
constexpr bool kX86 = true;
#else
constexpr bool kX86 = false;
#endif

const IsaRow kIsas[] = {
    {Isa::Scalar, "scalar", always, true},
    {Isa::Avx2, "avx2", has_avx2, kX86},     // AVX2 + FMA + F16C (the packed weights' f16 scales)
    {Isa::Avx512, "avx512", has_avx512, kX86},   // F/BW/DQ/VL + VNNI; where no own kernel, the AVX2 one runs
    {Isa::Amx, "amx", has_amx, kX86},            // + AMX-TILE/INT8 (Sapphire Rapids on); else the AVX-512 kernels
};

Isa choose() {
  const CpuFeatures& f = cpu_features();
  Isa best = Isa::Scalar;
  for (const IsaRow& r : kIsas)
    if (r.has_kernels && r.supported(f)) best = r.isa;
  if (const char* cap = std::getenv("KVLM_ISA"); cap && *cap) {
    const IsaRow* row = nullptr;
    for (const IsaRow& r : kIsas)
      if (std::strcmp(r.name, cap) == 0) row = &r;
    if (!row) fail("KVLM_ISA='", cap, "' is not an instruction set kvlm knows (scalar, avx2, avx512, amx)");
    if (static_cast<int>(row->isa) < static_cast<int>(best)) best = row->isa;
  }
  return best;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool avx512_emulated() {
#if KVLM_AVX512_EMULATION
  return true;
#else
  return false;
#endif
}

std::string CpuFeatures::flags() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512dq, "avx512dq");
  add(avx512vl, "avx512vl");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_bf16, "avx512_bf16");
  add(amx_tile, "amx_tile");
  add(amx_int8, "amx_int8");
#if KVLM_AVX512_EMULATION
  add(true, "(avx512 emulated)");
#endif
  return s.empty() ? "none" : s;
}

const IsaRow* isa_table(int* n) {
  *n = static_cast<int>(sizeof kIsas / sizeof kIsas[0]);
  return kIsas;
}

Isa active_isa() {
  static const Isa isa = choose();
  return isa;
}

const char* isa_name(Isa isa) {
  for (const IsaRow& r : kIsas)
    if (r.isa == isa) return r.name;
  return "?";
}

}  // namespace kvlm
