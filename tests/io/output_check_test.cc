// Tests for io/output_check.h: output paths refused before any work, and LineWriter's
// checked writes (a full device is an error naming the path).
#include "mxtrain/io/output_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "io/io_test_util.h"

namespace mxtrain::io {
namespace {

using testing::ScratchDir;
using testing::list_dir;

void touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(OutputCheck, FileUnderAFileIsRefusedWithFlagAndPath) {
  ScratchDir d;
  touch(d / "plain");
  EXPECT_ERROR_CONTAINS(check_output_file(d / "plain/metrics.jsonl", "--metrics-out"),
                        "--metrics-out " + (d / "plain/metrics.jsonl") + ": " + (d / "plain") +
                            " is a file, not a directory");
  EXPECT_ERROR_CONTAINS(check_output_file(d / "plain/sub/m.jsonl", "--metrics-out"),
                        ": directory " + (d / "plain/sub") + " is under a file, not a directory");
  EXPECT_ERROR_CONTAINS(check_output_file(d / "missing/m.jsonl", "--metrics-out"),
                        (d / "missing") + " does not exist");
  EXPECT_ERROR_CONTAINS(check_output_file(d.path(), "--decisions-out"),
                        "is a directory, expected a file path");
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"plain"});  // nothing left behind
}

TEST(OutputCheck, WritableFilesAndDevicesPass) {
  ScratchDir d;
  check_output_file(d / "new.jsonl", "--metrics-out");
  touch(d / "old.jsonl");
  check_output_file(d / "old.jsonl", "--metrics-out");
  check_output_file("/dev/null", "--metrics-out");
  check_output_file("", "--metrics-out");  // not given: nothing to check
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"old.jsonl"});
}

TEST(OutputCheck, DirectoryUnderAFileIsRefused) {
  ScratchDir d;
  touch(d / "f");
  EXPECT_ERROR_CONTAINS(check_output_dir(d / "f/ckpt/deeper", "--checkpoint-dir"),
                        "--checkpoint-dir " + (d / "f/ckpt/deeper") + ": " + (d / "f") +
                            " is a file, not a directory");
  EXPECT_ERROR_CONTAINS(check_output_dir(d / "f", "--checkpoint-dir"),
                        (d / "f") + " exists and is not a directory");
  check_output_dir(d / "new/a/b", "--checkpoint-dir");  // created later, like mkdir -p
  check_output_dir(d.path(), "--checkpoint-dir");
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"f"});  // the probe is removed
}

TEST(OutputCheck, ReadOnlyDirectoryIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  ScratchDir d;
  ASSERT_EQ(::mkdir((d / "ro").c_str(), 0555), 0);
  EXPECT_ERROR_CONTAINS(check_output_dir(d / "ro/ckpt", "--checkpoint-dir"),
                        "cannot create files in " + (d / "ro"));
  EXPECT_ERROR_CONTAINS(check_output_file(d / "ro/m.jsonl", "--metrics-out"),
                        "cannot create files in " + (d / "ro"));
  ::chmod((d / "ro").c_str(), 0755);
}

TEST(LineWriter, WritesAndAppends) {
  ScratchDir d;
  {
    LineWriter w(d / "a.txt", false);
    w.write("one\n");
    w.close();
  }
  {
    LineWriter w(d / "a.txt", true);
    w.write("two\n");
    w.close();
  }
  std::ifstream f(d / "a.txt");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "one\ntwo\n");
}

TEST(LineWriter, FullDeviceIsAnErrorNamingThePath) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  LineWriter w("/dev/full", false);
  EXPECT_ERROR_CONTAINS(w.write("{\"step\": 1}\n"), "cannot write /dev/full: No space left on device");
}

TEST(LineWriter, UnopenablePathIsNamed) {
  ScratchDir d;
  EXPECT_ERROR_CONTAINS(LineWriter(d / "no/such/file", false),
                        "cannot open " + (d / "no/such/file") + " for writing");
}

// Outputs are kept apart from inputs: the same file (by path, symbolic or hard link), an
// output inside an input directory, and an input inside a directory the command replaces.
TEST(OutputsApart, SameFileInsideAndReplacedAreRefusedByName) {
  ScratchDir d;
  touch(d / "cfg.yaml");
  ::mkdir((d / "data").c_str(), 0755);
  touch(d / "data/a.txt");
  ASSERT_EQ(::symlink((d / "cfg.yaml").c_str(), (d / "sym.yaml").c_str()), 0);
  ASSERT_EQ(::link((d / "cfg.yaml").c_str(), (d / "hard.yaml").c_str()), 0);
  const std::vector<NamedPath> in = {{"--config", d / "cfg.yaml"}, {"data.path", d / "data"}};
  for (const std::string& same : {d / "cfg.yaml", d / "sym.yaml", d / "hard.yaml",
                                  d / "data/../cfg.yaml"})
    EXPECT_ERROR_CONTAINS(check_outputs_apart({{"--metrics-out", same}}, in),
                          "--metrics-out " + same + ": is --config " + (d / "cfg.yaml") +
                              "; an output may not be written over an input");
  EXPECT_ERROR_CONTAINS(check_outputs_apart({{"--metrics-out", d / "data/m.jsonl"}}, in),
                        "lies inside data.path " + (d / "data") + ", a directory that is read");
  EXPECT_ERROR_CONTAINS(check_outputs_apart({{"--out", d.path(), true}}, in),
                        "--config " + (d / "cfg.yaml") + " lies inside it, and the command "
                        "replaces that directory");
  // Apart: another file, a sibling directory, a directory that is not replaced, inputs not
  // given or missing.
  check_outputs_apart({{"--metrics-out", d / "m.jsonl"}, {"--out", d / "out", true},
                       {"--checkpoint-dir", d.path()}, {"--profile-out", ""}},
                      {{"--config", d / "cfg.yaml"}, {"--init-from", ""},
                       {"model.tokenizer", d / "missing.model"}});
  check_outputs_apart({{"--out", d / "dataset", true}}, {{"data.path", d / "data"}});
}

}  // namespace
}  // namespace mxtrain::io
