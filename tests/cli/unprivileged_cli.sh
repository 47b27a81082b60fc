#!/usr/bin/env bash
# tests/cli/unprivileged_cli.sh — the checks that permissions decide run where CI runs. As
# root (CI is root) a read-only file or directory stops nothing, so those tests skip; this
# script runs them as the unprivileged user `nobody` (setpriv, util-linux) from copies of the
# binaries and scripts in a directory that user can read, or as the current user when that is
# not root. It fails unless each really ran and passed: the two GoogleTest cases report
# "PASSED 2 tests" with none skipped, and the reliability CLI script runs its read-only case.
# Usage: unprivileged_cli.sh TEST_IO MXTRAIN SOURCE_DIR   (CTest `cli_unprivileged`)
set -u
source "$(dirname "$0")/lib.sh"
TEST_IO=$(realpath "${1:?usage: unprivileged_cli.sh TEST_IO MXTRAIN SOURCE_DIR}") || exit 1
MXTRAIN=$(realpath "${2:?usage}") || exit 1
SRC=$(realpath "${3:?usage}") || exit 1
workdir unprivileged
mkdir -p bin src/tests src/tools tmp
cp "$TEST_IO" "$MXTRAIN" bin/
cp -r "$SRC/tests/cli" src/tests/
cp "$SRC/tools/plot_losses.py" src/tools/
if [ "$(id -u)" -eq 0 ]; then
  chown -R nobody:nogroup "$WORK"
  chmod 755 "$WORK"
  AS=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
  who=nobody
else
  AS=()
  who=$(id -un)
fi
export TMPDIR=$WORK/tmp HOME=$WORK/tmp

filter=ReadFile.UnreadableFileIsRefused:OutputCheck.ReadOnlyDirectoryIsRefused
"${AS[@]}" bin/test_io --gtest_filter=$filter > gtest.txt 2>&1 || fail "test_io as $who: $(tail -n 20 gtest.txt)"
grep -q "\[  PASSED  \] 2 tests\." gtest.txt || fail "test_io as $who did not pass 2 tests: $(tail -n 20 gtest.txt)"
grep -q "SKIPPED" gtest.txt && fail "test_io as $who skipped: $(grep SKIPPED gtest.txt)"

"${AS[@]}" bash src/tests/cli/reliability_cli.sh bin/mxtrain src > cli.txt 2>&1 ||
  fail "reliability_cli.sh as $who: $(tail -n 20 cli.txt)"
grep -qx "ran: read-only checkpoint dir" cli.txt || fail "the read-only case did not run as $who"

finish "unprivileged checks (as $who)"
