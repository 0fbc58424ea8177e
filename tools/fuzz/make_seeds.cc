// tools/fuzz/make_seeds.cc — writes the seed corpora under tools/fuzz/corpus/
// (committed; rerun after a format change):
//   bazel run //tools/fuzz:make_seeds -- $PWD/tools/fuzz/corpus
// Each seed is a small valid input of one target, in that target's framing.
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/metadata.pb.h"
#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "data/indexed_dataset.h"
#include "tools/fuzz/fuzz_util.h"

namespace fs = std::filesystem;
using gtp::fuzz::Frame;

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Put(const std::string& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  gtp::fuzz::WriteFile(dir + "/" + name, bytes);
}

uint32_t Crc(const std::string& s) {
  return static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(s.data()), s.size()));
}

// A two-tensor checkpoint of one rank: w f32 [4, 3] in two pieces (rows
// 0-1 and 2-3, the second as two runs) and b f32 [3].
void Checkpoint(std::string* meta_bytes, std::string* data_file) {
  std::string file(16, '\0');
  std::memcpy(file.data(), "GTPCKPT", 8);
  const uint32_t version = 1;
  std::memcpy(file.data() + 8, &version, 4);
  gtp::checkpoint::proto::Metadata meta;
  meta.set_format_version(1);
  meta.set_iteration(10);
  meta.set_world_size(1);
  (*meta.mutable_extra())["recipe"] = "name: \"seed\"";
  auto add_piece = [&](gtp::checkpoint::proto::TensorEntry* e, std::vector<std::pair<int, int>> runs,
                       int cols, const std::vector<float>& values) {
    std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    auto* p = e->add_pieces();
    for (auto [row, rows] : runs) {
      auto* r = p->add_runs();
      r->set_global_row(row);
      r->set_rows(rows);
    }
    p->set_col_offset(0);
    p->set_cols(cols);
    p->set_file("rank_00000.bin");
    p->set_offset(file.size());
    p->set_bytes(bytes.size());
    p->set_crc32(Crc(bytes));
    file += bytes;
  };
  auto* w = meta.add_tensors();
  w->set_key("w");
  w->set_dtype(gtp::DTypeName(gtp::DType::kF32));
  w->add_global_shape(4);
  w->add_global_shape(3);
  add_piece(w, {{0, 2}}, 3, {1, 2, 3, 4, 5, 6});
  add_piece(w, {{2, 1}, {3, 1}}, 3, {7, 8, 9, 10, 11, 12});
  auto* b = meta.add_tensors();
  b->set_key("b");
  b->set_dtype(gtp::DTypeName(gtp::DType::kF32));
  b->add_global_shape(3);
  add_piece(b, {{0, 3}}, 1, {0.5f, -1.f, 2.f});
  meta.SerializeToString(meta_bytes);
  *data_file = file;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus dir>\n");
    return 2;
  }
  const std::string root = argv[1];
  const std::string tmp = gtp::fuzz::ScratchDir();

  // Checkpoint metadata and data file.
  std::string meta, file;
  Checkpoint(&meta, &file);
  std::string with_trailer = meta;
  const uint32_t crc = Crc(meta);
  for (int i = 0; i < 4; ++i) with_trailer.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  with_trailer += "GTPM";
  Put(root + "/checkpoint_metadata", "fixed_trailer", std::string(1, '\1') + meta);
  Put(root + "/checkpoint_metadata", "raw_valid", std::string(1, '\0') + with_trailer);
  Put(root + "/checkpoint_data", "fixed_crcs", Frame(meta) + std::string(1, '\1') + file);
  Put(root + "/checkpoint_data", "raw_valid", Frame(meta) + std::string(1, '\0') + file);

  // safetensors: two tensors and metadata.
  gtp::checkpoint::SafeTensorsFile st;
  st.metadata["format"] = "pt";
  st.tensors["a.weight"] = {gtp::DType::kF32, gtp::Shape{2, 2}, std::vector<uint8_t>(16, 1)};
  st.tensors["b"] = {gtp::DType::kBF16, gtp::Shape{3}, std::vector<uint8_t>(6, 2)};
  if (!gtp::checkpoint::WriteSafeTensors(tmp + "/s.safetensors", st).ok()) return 1;
  Put(root + "/safetensors", "two_tensors", ReadAll(tmp + "/s.safetensors"));

  // Indexed datasets: u16 (one sequence per document) and i32 (a document
  // of two sequences, an empty document).
  if (!gtp::data::WriteIndexedDataset(tmp + "/u16", gtp::data::IndexDType::kU16,
                                      {{1, 2, 3}, {4}, {5, 6}})
           .ok()) {
    return 1;
  }
  Put(root + "/indexed_dataset", "u16",
      Frame(ReadAll(tmp + "/u16.idx")) + ReadAll(tmp + "/u16.bin"));
  {
    auto w = gtp::data::IndexedDatasetWriter::Create(tmp + "/i32", gtp::data::IndexDType::kI32);
    if (!w.ok() || !(*w)->AddSequence({7, 8}).ok() || !(*w)->AddSequence({9}).ok() ||
        !(*w)->EndDocument().ok() || !(*w)->EndDocument().ok() || !(*w)->AddDocument({10}).ok() ||
        !(*w)->Finish().ok()) {
      return 1;
    }
  }
  Put(root + "/indexed_dataset", "i32",
      Frame(ReadAll(tmp + "/i32.idx")) + ReadAll(tmp + "/i32.bin"));

  // Recipes: gpt_tiny's text with overrides (recipe files are seeds too:
  // tools/fuzz/run.sh adds recipes/*/*.pbtxt).
  Put(root + "/config", "gpt_tiny_overrides",
      "name: \"gpt_tiny\"\nmodel { vocab_size: 256 seq_len: 64 n_layer: 4 n_embd: 64 n_head: 4 }\n"
      "parallel { world_size: 4 tp: 2 tp_num_weight_shards: 4 }\n"
      "data { source: \"corpus\" seed: 1234 }\noptim { lr: 3e-3 min_lr: 3e-4 }\n"
      "train { steps: 200 micro_batch: 8 global_batch: 16 }\ncheckpoint { every: 100 }\n"
      "%%\ntrain.steps=50\noptim.weight_decay=0\nparallel.pp=2\nparallel.pp_boundaries=0:2\n"
      "model.norm=rmsnorm\n");
  Put(root + "/config", "pattern",
      "model { vocab_size: 512 seq_len: 32 layer_pattern: \"M*|-E\" n_embd: 32 n_head: 2 "
      "moe { num_experts: 4 } }\nparallel { pp: 2 cp: 2 }\ndata { source: \"mock\" }\n"
      "optim { lr: 1e-3 }\ntrain { steps: 3 micro_batch: 1 }\n%%\nparallel.vpp=1\n");
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
