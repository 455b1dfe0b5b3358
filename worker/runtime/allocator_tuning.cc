#include "worker/runtime/allocator_tuning.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dapple::worker {

void TuneAllocatorForTraining() {
#if defined(__GLIBC__)
  // mallopt fixes the thresholds (it turns glibc's dynamic mmap threshold off); values above
  // glibc's limits are refused and leave the default, so stay within them.
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

}  // namespace dapple::worker
