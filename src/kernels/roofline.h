// The machine's limits, measured by the program itself: STREAM-style triad bandwidth at the
// pool's thread count, for the decode roofline (bytes read per token / bandwidth).
#pragma once

namespace kvlm {

// GB/s of a[i] = b[i] + s * c[i] over arrays far larger than the caches (12 bytes per element
// counted, as STREAM does). Best of `reps`.
double measure_triad_gbps(int reps = 5);

// Seconds the hypervisor ran something else while this machine's CPUs wanted to run ("steal" in
// /proc/stat, summed over CPUs), so far; -1 where the kernel does not say. A VM's timings swing
// with it: two readings around a measurement say how much of it the host took.
double host_steal_seconds();

}  // namespace kvlm
