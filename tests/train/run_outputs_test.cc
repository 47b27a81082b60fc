// Tests for a run's outputs (train/run_outputs.h): on resume the metrics file keeps exactly
// the rows up to the checkpoint's step (a torn last line dropped, other lines kept as they
// are); lock_outputs locks the checkpoint directory and the metrics file, removes what an
// interrupted run left, and skips devices.
#include "train/run_outputs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"

namespace mxtrain {
namespace {
using io::testing::list_dir;
using io::testing::ScratchDir;

TEST(TrimMetrics, KeepsRowsUpToTheCheckpointsStep) {
  ScratchDir d;
  const std::string rows =
      "{\"step\":1,\"loss\":5.5}\n"
      "{\"step\":2,\"loss\":5.1}\n"
      "{\"step\":2,\"val_loss\":5.2}\n"
      "{\"steps\":2,\"summary\":true}\n"   // a run stopped at 2: its summary stays
      "not json, kept as it is\n"
      "{\"step\":3,\"loss\":4.9}\n"
      "{\"step\":3,\"skipped\":true}\n"
      "{\"step\":4,\"val_loss\":4.7}\n"
      "{\"steps\":4,\"summary\":true}\n"
      "{\"step\":5,\"lo";                     // cut short by kill -9
  io::write_file_atomic(d / "m.jsonl", rows);
  EXPECT_EQ(trim_metrics(d / "m.jsonl", 2), 5);
  EXPECT_EQ(io::read_text_file(d / "m.jsonl"),
            "{\"step\":1,\"loss\":5.5}\n"
            "{\"step\":2,\"loss\":5.1}\n"
            "{\"step\":2,\"val_loss\":5.2}\n"
            "{\"steps\":2,\"summary\":true}\n"
            "not json, kept as it is\n");
  // Nothing after the step: the file is not rewritten.
  struct stat before {}, after {};
  ASSERT_EQ(::stat((d / "m.jsonl").c_str(), &before), 0);
  EXPECT_EQ(trim_metrics(d / "m.jsonl", 2), 0);
  ASSERT_EQ(::stat((d / "m.jsonl").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"m.jsonl"});  // no temp file left
}

TEST(TrimMetrics, MissingFileOrDeviceDropsNothing) {
  ScratchDir d;
  EXPECT_EQ(trim_metrics(d / "none.jsonl", 3), 0);
  EXPECT_EQ(trim_metrics("/dev/null", 3), 0);
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{});
}

TEST(LockOutputs, LocksBothAndRemovesLeftovers) {
  ScratchDir d;
  const std::string ck = d / "runs/ck", metrics = d / "m.jsonl";
  std::filesystem::create_directories(ck + "/.step_7.tmp-4321-0");
  io::write_file_atomic(ck + "/.latest.tmp-4321-1", std::string("step_7\n"));
  io::write_file_atomic(d / ".m.jsonl.tmp-4321-0", std::string("{}\n"));
  {
    OutputLocks locks = lock_outputs(ck, metrics);
    EXPECT_TRUE(locks.checkpoint.held());
    EXPECT_TRUE(locks.metrics.held());
    EXPECT_EQ(list_dir(ck), std::vector<std::string>{".lock"});
    EXPECT_EQ(list_dir(d.path()), (std::vector<std::string>{"m.jsonl.lock", "runs"}));
    EXPECT_ANY_THROW(lock_outputs(ck, ""));
    EXPECT_ANY_THROW(lock_outputs("", metrics));
  }
  EXPECT_EQ(list_dir(ck), std::vector<std::string>{});
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"runs"});
}

TEST(LockOutputs, DevicesAndEmptyPathsTakeNoLock) {
  OutputLocks locks = lock_outputs("", "/dev/null");
  EXPECT_FALSE(locks.checkpoint.held());
  EXPECT_FALSE(locks.metrics.held());
}

}  // namespace
}  // namespace mxtrain
