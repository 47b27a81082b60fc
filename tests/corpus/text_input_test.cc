// Tests for text inputs (corpus/text_input.h): which files a directory names, the fortune
// separators, and chunked reads that add up to the whole text for any chunk size.
#include "mxtrain/corpus/text_input.h"

#include <gtest/gtest.h>

#include "corpus/corpus_test_util.h"
#include "mxtrain/common.h"

namespace mxtrain::corpus {
namespace {
using testing::ScratchDir;
using testing::write_text;
namespace fs = std::filesystem;

TEST(TextInput, DirectoriesAreSortedFortuneFilesWithoutIndexes) {
  ScratchDir d;
  fs::create_directories(d / "dir/off");
  write_text(d / "dir/b", "second\n%\nentry\n");
  write_text(d / "dir/a", "first\n%\n%\nlast line without newline");
  write_text(d / "dir/a.dat", "index");
  write_text(d / "dir/a.u8", "index");
  write_text(d / "dir/off/c", "not read");
  write_text(d / "plain.txt", "%\nkept as is");
  const TextInput in = resolve_text_input({d / "dir", d / "plain.txt"});
  ASSERT_EQ(in.files.size(), 3u);
  EXPECT_EQ(in.files[0].path, d / "dir/a");
  EXPECT_TRUE(in.files[0].fortune);
  EXPECT_EQ(in.files[1].path, d / "dir/b");
  EXPECT_FALSE(in.files[2].fortune);
  EXPECT_EQ(in.input_bytes, 35u + 15u + 12u);
  EXPECT_EQ(read_all_text(in),
            "first\n\n\nlast line without newline\nsecond\n\nentry\n%\nkept as is");
  EXPECT_NE(in.description.find("directory (2 files in "), std::string::npos) << in.description;
}

TEST(TextInput, ChunksAddUpToTheTextAndEndAtLines) {
  ScratchDir d;
  std::string text;
  for (int i = 0; i < 500; ++i) text += "entry " + std::to_string(i) + " of a long list\n%\n";
  fs::create_directories(d / "dir");
  write_text(d / "dir/x", text);
  write_text(d / "dir/y", std::string(5000, 'z') + " tail");  // a line longer than chunks
  const TextInput in = resolve_text_input({d / "dir"});
  const std::string all = read_all_text(in);
  for (size_t max : {1u, 7u, 64u, 1000u, 1u << 20}) {
    TextReader r(in);
    std::string chunk, joined;
    int cut_mid_line = 0;
    while (r.read(chunk, max)) {
      ASSERT_FALSE(chunk.empty());
      joined += chunk;
      if (chunk.back() != '\n') ++cut_mid_line;
      EXPECT_LE(r.position(), in.input_bytes);
    }
    EXPECT_EQ(joined, all) << "max " << max;
    EXPECT_EQ(r.input_bytes_read(), in.input_bytes);
    if (max == 1000) {
      EXPECT_LE(cut_mid_line, 6) << "only the long line is cut";
    }
  }
}

TEST(TextInput, RefusesMissingAndEmptyInputs) {
  ScratchDir d;
  EXPECT_THROW(resolve_text_input({}), Error);
  EXPECT_THROW(resolve_text_input({d / "missing"}), Error);
  fs::create_directories(d / "empty");
  EXPECT_THROW(resolve_text_input({d / "empty"}), Error);
  const TextInput f = resolve_text_input({"fortunes"});
  EXPECT_GT(f.files.size(), 10u);
  EXPECT_GT(f.input_bytes, 2000000u);
}

}  // namespace
}  // namespace mxtrain::corpus
