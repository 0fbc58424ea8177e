// MakeDatasets: errors about the data name the setting, the split and a fix.
#include "recipes/trainer/state.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "gtest/gtest.h"

namespace gtp::recipes {
namespace {

std::string Tmp(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

proto::Recipe Indexed(const std::string& path, int64_t seq_len) {
  proto::Recipe r;
  r.mutable_data()->set_source("indexed");
  r.mutable_data()->set_path(path);
  r.mutable_model()->set_seq_len(seq_len);
  return r;
}

std::string Error(const proto::Recipe& r) {
  std::unique_ptr<data::GptDataset> t, v;
  absl::Status st = MakeDatasets(r, &t, &v);
  EXPECT_FALSE(st.ok());
  return std::string(st.message());
}

// 10 documents: the validation split (the last 2 %) is empty. The message
// used to be "documents [10, 10) hold 0 tokens".
TEST(MakeDatasets, AnEmptyValidationSplitIsNamed) {
  const std::string prefix = Tmp("ten_docs");
  std::vector<std::vector<int32_t>> docs(10, std::vector<int32_t>(40, 7));
  ASSERT_TRUE(data::WriteIndexedDataset(prefix, data::IndexDType::kU16, docs).ok());
  const std::string msg = Error(Indexed(prefix, 16));
  EXPECT_NE(msg.find("the validation split of data.path " + prefix + " (documents [10, 10) of 10; "
                     "validation is the last 2 % (data.valid_fraction))"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("give the dataset more documents or tokens, a smaller model.seq_len, or another data.valid_fraction"), std::string::npos)
      << msg;
  // A larger validation share makes the split: 20 % of 10 documents.
  proto::Recipe wider = Indexed(prefix, 16);
  wider.mutable_data()->set_valid_fraction(0.2f);
  std::unique_ptr<data::GptDataset> t, v;
  ASSERT_TRUE(MakeDatasets(wider, &t, &v).ok());
  EXPECT_EQ(v->tokens_per_epoch(), 2u * 40u);
  // The training split too short for one sample.
  EXPECT_NE(Error(Indexed(prefix, 1000)).find("the training split of data.path"), std::string::npos);
}

TEST(MakeDatasets, ADirectoryOrAFileNameIsNotAPrefix) {
  const std::string dir = Tmp("a_data_dir");
  mkdir(dir.c_str(), 0755);
  EXPECT_NE(Error(Indexed(dir, 16)).find("is a directory: give the prefix of its NAME.idx and NAME.bin"),
            std::string::npos);
  const std::string prefix = Tmp("named");
  ASSERT_TRUE(data::WriteIndexedDataset(prefix, data::IndexDType::kU16, {{1, 2, 3}}).ok());
  EXPECT_NE(Error(Indexed(prefix + ".bin", 16)).find("without the extension: data.path=" + prefix),
            std::string::npos);
}

}  // namespace
}  // namespace gtp::recipes
