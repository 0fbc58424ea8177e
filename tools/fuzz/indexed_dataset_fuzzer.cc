// tools/fuzz/indexed_dataset_fuzzer.cc — data::IndexedDataset::Open (the
// Megatron .idx header, arrays and document index against the .bin size)
// and reads of what it accepts.
//
// Input: a part (4-byte length + bytes) holding PREFIX.idx, then PREFIX.bin.
// Open promises that reads of an accepted dataset never fail, so every
// document's first and last tokens are read. int64 datasets are opened but
// not read: a token outside int32 aborts by contract (indexed_dataset.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "tools/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gtp::fuzz::Input in(data, size);
  const std::string idx = in.Part();
  const std::string bin = in.Rest();
  const std::string prefix = gtp::fuzz::ScratchDir() + "/ds";
  gtp::fuzz::WriteFile(gtp::data::IndexPath(prefix), idx);
  gtp::fuzz::WriteFile(gtp::data::BinPath(prefix), bin);
  auto ds = gtp::data::IndexedDataset::Open(prefix);
  if (!ds.ok()) return 0;
  const gtp::data::IndexedDataset& d = **ds;
  (void)d.document_index();
  for (size_t s = 0; s < d.num_sequences(); ++s) (void)d.sequence_length(s);
  if (d.dtype() == gtp::data::IndexDType::kI64) return 0;
  std::vector<int32_t> buf(64);
  for (size_t doc = 0; doc < d.num_documents(); ++doc) {
    const size_t len = d.document_length(doc);
    const size_t n = std::min<size_t>(len, buf.size());
    d.Read(doc, 0, n, buf.data());
    d.Read(doc, len - n, n, buf.data());
  }
  return 0;
}
