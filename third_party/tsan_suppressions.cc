// ThreadSanitizer suppressions for --config=tsan (docs/RELIABILITY.md), linked into every binary
// that uses //third_party:absl under that config. Each entry says why it is not a race of ours.

extern "C" const char* __tsan_default_suppressions() {
  return
      // abseil 20220623's Mutex::IncrementSynchSem posts a waiter's semaphore, which lives in the
      // waiter's ThreadIdentity (allocated by that thread through LowLevelAlloc's mmap). The
      // identity reached the waking thread through the Mutex's waiter queue, whose synchronization
      // abseil hides from TSan on purpose, so TSan sees no happens-before and reports the atomic
      // futex write as racing with the mmap. A false positive (google/sanitizers#953,
      // abseil-cpp#760/#1239); later abseil releases wrap this very call in
      // ABSL_ANNOTATE_IGNORE_READS_AND_WRITES, which this entry matches (reports with the frame).
      "race:absl::*::Mutex::IncrementSynchSem\n";
}
