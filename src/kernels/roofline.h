// The machine's limits, measured by the program itself: STREAM-style triad bandwidth at the
// pool's thread count, for the decode roofline (bytes read per token / bandwidth).
#pragma once

namespace kvlm {

// GB/s of a[i] = b[i] + s * c[i] over arrays far larger than the caches (12 bytes per element
// counted, as STREAM does). Best of `reps`.
double measure_triad_gbps(int reps = 5);

}  // namespace kvlm
