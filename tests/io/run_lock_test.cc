// Tests for run locks (io/run_lock.h) and the removal of leftover temporaries
// (io/atomic_file.h, remove_temporaries): a held lock refuses a second taker with the holder's
// PID, a lock file whose process is gone is taken over and said so, letting go removes the
// file; only temp_sibling() names of other processes are removed.
#include "mxtrain/io/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"

namespace mxtrain::io {
namespace {
using testing::list_dir;
using testing::ScratchDir;

TEST(RunLock, SecondTakerIsRefusedWithTheHoldersPid) {
  ScratchDir d;
  std::string note = "unchanged";
  RunLock first = RunLock::acquire(d / ".lock", "--checkpoint-dir ck", &note);
  EXPECT_TRUE(first.held());
  EXPECT_EQ(note, "");  // a fresh file: nothing taken over
  // flock belongs to the open file, so a second open in this process conflicts as another
  // process's would.
  const std::string pid = std::to_string(::getpid());
  EXPECT_ERROR_CONTAINS(RunLock::acquire(d / ".lock", "--checkpoint-dir ck"),
                        "--checkpoint-dir ck is in use by another mxtrain run (PID " + pid +
                            " on host ");
  EXPECT_ERROR_CONTAINS(RunLock::acquire(d / ".lock", "--checkpoint-dir ck"),
                        "lock file " + (d / ".lock") + "): wait for it to end");
  EXPECT_TRUE(std::filesystem::exists(d / ".lock"));
}

TEST(RunLock, LettingGoRemovesTheFileAndFreesTheLock) {
  ScratchDir d;
  {
    RunLock a = RunLock::acquire(d / "m.jsonl.lock", "--metrics-out m.jsonl");
    RunLock moved = std::move(a);
    EXPECT_FALSE(a.held());
    EXPECT_TRUE(moved.held());
  }
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{});
  std::string note = "unchanged";
  RunLock again = RunLock::acquire(d / "m.jsonl.lock", "--metrics-out m.jsonl", &note);
  EXPECT_TRUE(again.held());
  EXPECT_EQ(note, "");
}

TEST(RunLock, StaleLockFileIsTakenOverAndSaidSo) {
  ScratchDir d;
  // What a killed run leaves: the file with its owner, no flock (the kernel dropped it).
  write_file_atomic(d / ".lock", std::string("4242 otherhost\n"));
  std::string note;
  RunLock lock = RunLock::acquire(d / ".lock", "--checkpoint-dir ck", &note);
  EXPECT_EQ(note, "took over the lock of --checkpoint-dir ck from a run that ended without "
                  "releasing it (PID 4242 on host otherhost)");
  // The file now names this process.
  const std::string text = read_text_file(d / ".lock");
  EXPECT_EQ(text.rfind(std::to_string(::getpid()) + " ", 0), 0u) << text;
}

TEST(RunLock, LockHeldThroughAnotherDescriptorIsRespected) {
  ScratchDir d;
  write_file_atomic(d / ".lock", std::string("77 h\n"));
  const int fd = ::open((d / ".lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_ERROR_CONTAINS(RunLock::acquire(d / ".lock", "--metrics-out m"),
                        "--metrics-out m is in use by another mxtrain run (PID 77 on host h;");
  ::close(fd);
  EXPECT_TRUE(RunLock::acquire(d / ".lock", "--metrics-out m").held());
}

TEST(RunLock, MissingDirectoryIsAClearError) {
  ScratchDir d;
  EXPECT_ERROR_CONTAINS(RunLock::acquire(d / "nope/.lock", "--checkpoint-dir x"),
                        "--checkpoint-dir x: cannot create the lock file " + (d / "nope/.lock"));
}

TEST(RemoveTemporaries, RemovesOtherProcessesTempNamesOnly) {
  ScratchDir d;
  const std::string me = std::to_string(::getpid());
  for (const std::string& dir : std::vector<std::string>{".step_40.tmp-1234-0", ".step_8.old-99-3", "step_40",
                                ".step_9.tmp-" + me + "-0", ".step_1.tmp-12x-0"})
    ASSERT_EQ(::mkdir((d / dir).c_str(), 0755), 0) << dir;
  write_file_atomic(d / ".step_40.tmp-1234-0/model.safetensors", std::string("partial"));
  for (const std::string& f : std::vector<std::string>{".latest.tmp-555-2", ".x.probe-7-0", "latest", ".lock",
                              ".latest.tmp-555", "m.jsonl"})
    write_file_atomic(d / f, std::string("x"));
  std::vector<std::string> removed = remove_temporaries(d.path());
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{".latest.tmp-555-2", ".step_40.tmp-1234-0",
                                               ".step_8.old-99-3", ".x.probe-7-0"}));
  EXPECT_EQ(list_dir(d.path()),
            (std::vector<std::string>{".latest.tmp-555", ".lock", ".step_1.tmp-12x-0",
                                      ".step_9.tmp-" + me + "-0", "latest", "m.jsonl",
                                      "step_40"}));
}

TEST(RemoveTemporaries, OnlyThoseOfTheGivenBase) {
  ScratchDir d;
  for (const std::string& f : std::vector<std::string>{".m.jsonl.tmp-31-0", ".other.jsonl.tmp-31-0", "m.jsonl"})
    write_file_atomic(d / f, std::string("x"));
  EXPECT_EQ(remove_temporaries(d.path(), "m.jsonl"), std::vector<std::string>{".m.jsonl.tmp-31-0"});
  EXPECT_EQ(list_dir(d.path()), (std::vector<std::string>{".other.jsonl.tmp-31-0", "m.jsonl"}));
}

TEST(ReadFile, NonRegularInputsAreNamedForWhatTheyAre) {
  ScratchDir d;
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0644), 0);
  EXPECT_ERROR_CONTAINS(read_file(d / "fifo"),
                        (d / "fifo") + " is not a regular file but a FIFO (named pipe)");
  EXPECT_ERROR_CONTAINS(read_file("/dev/null"),
                        "/dev/null is not a regular file but a character device");
  EXPECT_ERROR_CONTAINS(read_file(d.path()), d.path() + " is a directory, expected a file");
}

}  // namespace
}  // namespace mxtrain::io
