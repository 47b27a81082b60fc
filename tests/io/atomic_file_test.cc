// tests/io/atomic_file_test.cc — read_file errors, write_file_atomic and AtomicDir: the
// target is either absent, the complete old version or the complete new one, and no
// temporary file or directory is ever left behind.
#include "mxtrain/io/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include "io/io_test_util.h"

namespace mxtrain::io {
namespace {

using testing::list_dir;
using testing::ScratchDir;

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

TEST(AtomicFile, WriteThenReadExactBytes) {
  ScratchDir d;
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 3);
  write_file_atomic(d / "a.bin", data);
  EXPECT_EQ(read_file(d / "a.bin"), data);
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"a.bin"});
}

TEST(AtomicFile, OverwriteReplacesWholeContents) {
  ScratchDir d;
  write_file_atomic(d / "a.txt", std::string("a much longer first version"));
  write_file_atomic(d / "a.txt", std::string("short"));
  EXPECT_EQ(read_text_file(d / "a.txt"), "short");
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"a.txt"});
}

TEST(AtomicFile, EmptyFileAndGatherWrite) {
  ScratchDir d;
  write_file_atomic(d / "empty", std::string());
  EXPECT_TRUE(read_file(d / "empty").empty());
  std::string a = "head|", b = "", c = "tail";
  write_file_atomic(d / "parts", {std::span<const uint8_t>((const uint8_t*)a.data(), a.size()),
                                  std::span<const uint8_t>((const uint8_t*)b.data(), b.size()),
                                  std::span<const uint8_t>((const uint8_t*)c.data(), c.size())});
  EXPECT_EQ(read_text_file(d / "parts"), "head|tail");
}

TEST(AtomicFile, WriteIntoMissingDirectoryFailsCleanly) {
  ScratchDir d;
  EXPECT_ERROR_CONTAINS(write_file_atomic(d / "nope/a.txt", std::string("x")),
                        "the directory does not exist");
  EXPECT_TRUE(list_dir(d.path()).empty());
}

TEST(AtomicFile, WriteOverADirectoryFails) {
  ScratchDir d;
  ASSERT_EQ(::mkdir((d / "sub").c_str(), 0755), 0);
  EXPECT_ERROR_CONTAINS(write_file_atomic(d / "sub", std::string("x")), "it is a directory");
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"sub"});
}

TEST(ReadFile, MissingFileNamesThePath) {
  ScratchDir d;
  EXPECT_ERROR_CONTAINS(read_file(d / "missing.npy"), "file not found: " + (d / "missing.npy"));
}

TEST(ReadFile, DirectoryIsRefused) {
  ScratchDir d;
  EXPECT_ERROR_CONTAINS(read_file(d.path()), "is a directory, expected a file");
}

TEST(ReadFile, UnreadableFileIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "permissions do not stop root from reading";
  ScratchDir d;
  write_file_atomic(d / "secret", std::string("x"));
  ASSERT_EQ(::chmod((d / "secret").c_str(), 0), 0);
  EXPECT_ERROR_CONTAINS(read_file(d / "secret"), "cannot read " + (d / "secret"));
}

TEST(TempSibling, UniqueHiddenNamesInTheSameDirectory) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string t = temp_sibling("/some/dir/out");
    EXPECT_EQ(t.rfind("/some/dir/.out.tmp-", 0), 0u) << t;
    EXPECT_TRUE(seen.insert(t).second) << t;
  }
  EXPECT_EQ(temp_sibling("/some/dir/out/").rfind("/some/dir/.out.tmp-", 0), 0u);
  EXPECT_EQ(temp_sibling("rel").rfind("./.rel.tmp-", 0), 0u);
}

TEST(AtomicDir, NothingVisibleBeforeCommit) {
  ScratchDir d;
  {
    AtomicDir out(d / "out");
    out.write("a.txt", std::string("A"));
    out.write("b.bin", bytes_of("BB"));
    EXPECT_FALSE(path_exists(d / "out"));
    out.commit();
    EXPECT_TRUE(out.committed());
  }
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"out"});
  EXPECT_EQ(list_dir(d / "out"), (std::vector<std::string>{"a.txt", "b.bin"}));
  EXPECT_EQ(read_text_file(d / "out/a.txt"), "A");
  EXPECT_EQ(read_text_file(d / "out/b.bin"), "BB");
}

TEST(AtomicDir, AbandonedDirLeavesNothing) {
  ScratchDir d;
  try {
    AtomicDir out(d / "out");
    out.write("a.txt", std::string("A"));
    throw std::runtime_error("failure while building the output");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(list_dir(d.path()).empty());
}

TEST(AtomicDir, ReplacesExistingDirectoryAsAWhole) {
  ScratchDir d;
  {
    AtomicDir first(d / "out");
    first.write("old_only.txt", std::string("old"));
    first.write("shared.txt", std::string("old"));
    first.commit();
  }
  {
    AtomicDir second(d / "out/");  // trailing slash means the same directory
    second.write("shared.txt", std::string("new"));
    // Until commit the old version is fully intact.
    EXPECT_EQ(read_text_file(d / "out/old_only.txt"), "old");
    second.commit();
  }
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"out"});
  EXPECT_EQ(list_dir(d / "out"), std::vector<std::string>{"shared.txt"});
  EXPECT_EQ(read_text_file(d / "out/shared.txt"), "new");
}

TEST(AtomicDir, FilesWrittenDirectlyUnderPathAreIncluded) {
  ScratchDir d;
  AtomicDir out(d / "out");
  ASSERT_EQ(::mkdir(out.file("nested").c_str(), 0755), 0);
  write_file_synced(out.file("nested/x.txt"), {});
  out.commit();
  EXPECT_TRUE(path_exists(d / "out/nested/x.txt"));
}

TEST(AtomicDir, BadTargetsAreClearErrors) {
  ScratchDir d;
  EXPECT_ERROR_CONTAINS(AtomicDir(d / "missing/out"), "parent directory");
  write_file_atomic(d / "file", std::string("x"));
  EXPECT_ERROR_CONTAINS(AtomicDir(d / "file"), "a file with that name exists");
  AtomicDir out(d / "out");
  EXPECT_ERROR_CONTAINS(out.write("a/b", std::string("x")), "invalid file name");
  out.write("a", std::string("x"));
  EXPECT_ERROR_CONTAINS(out.write("a", std::string("y")), "cannot write");  // exists
  out.commit();
  EXPECT_ERROR_CONTAINS(out.commit(), "already committed");
}

}  // namespace
}  // namespace mxtrain::io
