// tools/fuzz/checkpoint_data_fuzzer.cc — the per-rank data-file reader of
// checkpoint/checkpoint.cc (PieceReader: header, byte ranges, CRC-32 per
// piece) and the assembly of global tensors from pieces, through
// checkpoint::ReadAllGlobal (the path `ckpt inspect/export` take; Load runs
// the same reader and assembly).
//
// Input: a part (4-byte length + bytes) holding a serialised proto::Metadata,
// one mode byte, then the bytes of rank_00000.bin. The harness writes
// metadata.pb with a valid trailer; in odd mode it also sets each piece's
// crc32 to the CRC of the bytes it names (when they lie inside the file), so
// inputs get past the checksums to the offsets, shapes and runs behind them.
#include <zlib.h>

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/metadata.pb.h"
#include "tools/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gtp::fuzz::Input in(data, size);
  const std::string meta_bytes = in.Part();
  const bool fix_crcs = in.Byte() & 1;
  const std::string file = in.Rest();
  gtp::checkpoint::proto::Metadata meta;
  if (!meta.ParseFromString(meta_bytes)) return 0;
  if (fix_crcs) {
    for (auto& e : *meta.mutable_tensors()) {
      for (auto& p : *e.mutable_pieces()) {
        if (p.file() != "rank_00000.bin" || p.offset() < 0 || p.bytes() < 0 ||
            static_cast<uint64_t>(p.offset()) > file.size() ||
            static_cast<uint64_t>(p.bytes()) > file.size() - p.offset()) {
          continue;
        }
        p.set_crc32(static_cast<uint32_t>(
            ::crc32(0L, reinterpret_cast<const Bytef*>(file.data()) + p.offset(), p.bytes())));
      }
    }
  }
  std::string out;
  meta.SerializeToString(&out);
  const uint32_t crc =
      static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(out.data()), out.size()));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  out += "GTPM";
  const std::string dir = gtp::fuzz::ScratchDir();
  gtp::fuzz::WriteFile(dir + "/metadata.pb", out);
  gtp::fuzz::WriteFile(dir + "/rank_00000.bin", file);
  (void)gtp::checkpoint::ReadAllGlobal(dir);
  return 0;
}
