#include "data/gpt_dataset.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "data/corpus.h"
#include "data/indexed_dataset.h"
#include "data/mock.h"
#include "gtest/gtest.h"

namespace gtp::data {
namespace {

// Documents whose tokens are all distinct: document d holds 1000·(d+1) + i.
std::vector<std::vector<int32_t>> DistinctDocs(const std::vector<size_t>& lengths) {
  std::vector<std::vector<int32_t>> docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    docs.emplace_back();
    for (size_t i = 0; i < lengths[d]; ++i) docs.back().push_back(1000 * (d + 1) + i);
  }
  return docs;
}

GptDataset Make(std::shared_ptr<const TokenSource> src, int64_t T, bool shuffle, uint64_t seed = 1,
                int32_t eod = -1, DocumentRange range = {}) {
  GptDatasetOptions o;
  o.seq_length = T;
  o.shuffle = shuffle;
  o.seed = seed;
  o.eod_token = eod;
  o.documents = range;
  auto ds = GptDataset::Create(std::move(src), o);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return std::move(ds).value();
}

TEST(GptDataset, UnshuffledSamplesAreConsecutiveWindows) {
  auto docs = DistinctDocs({5, 0, 3, 9});
  std::vector<int32_t> stream;
  for (const auto& d : docs) {
    stream.insert(stream.end(), d.begin(), d.end());
    stream.push_back(-7);  // checked below with eod = 7
  }
  auto src = std::make_shared<VectorTokenSource>(docs);

  // With an end-of-document token after each document.
  GptDataset eod = Make(src, 4, /*shuffle=*/false, 1, /*eod=*/7);
  EXPECT_EQ(eod.tokens_per_epoch(), 21u);
  EXPECT_EQ(eod.samples_per_epoch(), 5u);  // (21 - 1) / 4
  for (uint64_t s = 0; s < 12; ++s) {
    std::vector<int32_t> got = eod.GetSample(s);
    uint64_t w = s % 5;
    for (size_t i = 0; i < 5; ++i) {
      int32_t want = stream[w * 4 + i] == -7 ? 7 : stream[w * 4 + i];
      ASSERT_EQ(got[i], want) << "sample " << s << " token " << i;
    }
  }

  // Without: documents back to back.
  std::vector<int32_t> plain;
  for (int32_t t : stream)
    if (t != -7) plain.push_back(t);
  GptDataset no_eod = Make(src, 3, false);
  EXPECT_EQ(no_eod.samples_per_epoch(), (17u - 1) / 3);
  for (uint64_t s = 0; s < no_eod.samples_per_epoch(); ++s) {
    EXPECT_EQ(no_eod.GetSample(s),
              std::vector<int32_t>(plain.begin() + 3 * s, plain.begin() + 3 * s + 4));
  }
}

// A shuffled epoch still tiles the (document-shuffled) stream: its samples
// cover S·T + 1 distinct tokens, every token of the range at most once except
// the shared boundary tokens, and within a document tokens stay in order.
TEST(GptDataset, ShuffledEpochTilesTheStream) {
  auto docs = DistinctDocs({13, 7, 1, 30, 22, 5, 9, 17, 2, 40});
  auto src = std::make_shared<VectorTokenSource>(docs);
  const int64_t T = 8;
  GptDataset ds = Make(src, T, /*shuffle=*/true, /*seed=*/42);
  const uint64_t S = ds.samples_per_epoch();
  ASSERT_EQ(S, (146u - 1) / 8);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::map<int32_t, int> seen;
    std::set<int32_t> firsts;
    for (uint64_t j = 0; j < S; ++j) {
      std::vector<int32_t> s = ds.GetSample(epoch * S + j);
      firsts.insert(s[0]);
      for (size_t i = 0; i < s.size(); ++i) {
        ++seen[s[i]];
        if (i > 0 && s[i] / 1000 == s[i - 1] / 1000) {
          ASSERT_EQ(s[i], s[i - 1] + 1);
        }
      }
    }
    EXPECT_EQ(firsts.size(), S);  // distinct samples
    EXPECT_EQ(seen.size(), S * T + 1);
    int twice = 0;
    for (auto& [tok, n] : seen) {
      ASSERT_LE(n, 2);
      twice += n == 2;
    }
    EXPECT_EQ(twice, static_cast<int>(S - 1));
  }
}

TEST(GptDataset, SeedAndEpochChangeTheOrder) {
  MockOptions m;
  m.vocab_size = 50000;
  m.num_documents = 64;
  auto src = *MockTokenSource::Create(m);
  GptDataset a = Make(src, 16, true, 1), a2 = Make(src, 16, true, 1), b = Make(src, 16, true, 2);
  const uint64_t S = a.samples_per_epoch();
  int same_seed_diff = 0, epoch_diff = 0;
  for (uint64_t j = 0; j < 50; ++j) {
    EXPECT_EQ(a.GetSample(j), a2.GetSample(j));
    same_seed_diff += a.GetSample(j) != b.GetSample(j);
    epoch_diff += a.GetSample(j) != a.GetSample(S + j);
  }
  EXPECT_GT(same_seed_diff, 45);
  EXPECT_GT(epoch_diff, 45);
  EXPECT_EQ(a.epoch_of(S - 1), 0u);
  EXPECT_EQ(a.epoch_of(S), 1u);
}

TEST(GptDataset, ReadsOnlyItsDocumentRange) {
  auto docs = DistinctDocs({10, 10, 10, 10, 10, 10});
  auto src = std::make_shared<VectorTokenSource>(docs);
  GptDataset ds = Make(src, 4, true, 3, -1, DocumentRange{2, 4});
  EXPECT_EQ(ds.tokens_per_epoch(), 20u);
  for (uint64_t s = 0; s < 3 * ds.samples_per_epoch(); ++s) {
    for (int32_t t : ds.GetSample(s)) {
      ASSERT_TRUE(t / 1000 == 3 || t / 1000 == 4) << t;
    }
  }
}

TEST(GptDataset, BatchShiftsTargetsByOne) {
  auto src = std::make_shared<VectorTokenSource>(DistinctDocs({50, 50}));
  GptDataset ds = Make(src, 5, true);
  std::vector<uint64_t> idx = {3, 0, 7};
  std::vector<int32_t> tokens(15), targets(15);
  ds.GetBatch(idx, tokens.data(), targets.data());
  for (size_t b = 0; b < idx.size(); ++b) {
    std::vector<int32_t> s = ds.GetSample(idx[b]);
    for (size_t t = 0; t < 5; ++t) {
      EXPECT_EQ(tokens[b * 5 + t], s[t]);
      EXPECT_EQ(targets[b * 5 + t], s[t + 1]);
    }
  }
}

TEST(GptDataset, SameSamplesFromIndexedFileAndMemory) {
  auto docs = DistinctDocs({31, 4, 0, 27, 12, 50});
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string prefix = std::string(dir ? dir : "/tmp") + "/gpt_indexed";
  ASSERT_TRUE(WriteIndexedDataset(prefix, IndexDType::kI32, docs).ok());
  auto file = IndexedDataset::Open(prefix);
  ASSERT_TRUE(file.ok()) << file.status();
  GptDataset a = Make(*file, 6, true, 9, /*eod=*/0);
  GptDataset b = Make(std::make_shared<VectorTokenSource>(docs), 6, true, 9, 0);
  for (uint64_t s = 0; s < 3 * a.samples_per_epoch(); ++s)
    ASSERT_EQ(a.GetSample(s), b.GetSample(s));
}

TEST(GptDataset, CorpusSamplesAreCorpusText) {
  GptDataset ds = Make(EmbeddedCorpusSource(), 64, /*shuffle=*/false, 0, -1,
                       EmbeddedCorpusSplit(CorpusSplit::kAll));
  EXPECT_EQ(ds.samples_per_epoch(), (kEmbeddedCorpusBytes - 1) / 64);
  std::vector<int32_t> s = ds.GetSample(10);
  for (size_t i = 0; i < s.size(); ++i) {
    ASSERT_EQ(s[i], static_cast<unsigned char>(EmbeddedCorpus()[640 + i]));
  }
}

TEST(GptDataset, ConcurrentReadersAgreeWithSerial) {
  auto src = std::make_shared<VectorTokenSource>(DistinctDocs({100, 37, 64, 5, 91, 12}));
  GptDataset ds = Make(src, 7, true, 5);
  const uint64_t n = 6 * ds.samples_per_epoch();  // several epochs: exercises the cache
  std::vector<std::vector<int32_t>> serial(n), parallel(n);
  for (uint64_t s = 0; s < n; ++s) serial[s] = ds.GetSample(s);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t s = t; s < n; s += 4) parallel[s] = ds.GetSample(s);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(serial, parallel);
}

TEST(GptDataset, RejectsBadOptions) {
  auto src = std::make_shared<VectorTokenSource>(DistinctDocs({3, 2}));
  GptDatasetOptions o;
  o.seq_length = 0;
  EXPECT_FALSE(GptDataset::Create(src, o).ok());
  o.seq_length = 5;  // 5 tokens < T + 1
  EXPECT_FALSE(GptDataset::Create(src, o).ok());
  o.seq_length = 2;
  o.documents = {1, 3};
  EXPECT_FALSE(GptDataset::Create(src, o).ok());
  o.documents = {0, 2};
  EXPECT_TRUE(GptDataset::Create(src, o).ok());
  EXPECT_FALSE(GptDataset::Create(nullptr, o).ok());
}

}  // namespace
}  // namespace gtp::data
