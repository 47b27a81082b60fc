# tests/cli/lib.sh — the pieces the CLI test scripts share, read by each of them with
# `source "$(dirname "$0")/lib.sh"`: the FAILS counter and fail(), which records a failed check
# and lets the script go on to the next; expect_error, which checks the `mxtrain` error
# contract (exit code 1, one stderr line `error: ...`, nothing on stdout); finish, the summary
# line and exit status that end a script; workdir, a temporary directory removed on exit; and
# write_corpus, the small text the training runs read.

FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

# expect_error [--at-start] [--within SECONDS] DESCRIPTION FRAGMENT CMD...
# Runs CMD (killed after 60 s) in the current directory, its stdout in out.txt and its stderr
# in err.txt, and checks: exit code 1, exactly one stderr line, starting with `error: ` and
# holding FRAGMENT, and nothing on stdout. Command-line usage errors (an unknown option, a
# bad value) follow the same contract.
#   --at-start        the message is FRAGMENT followed by anything: the line starts with
#                     `error: FRAGMENT` (the file, key or flag named first).
#   --within SECONDS  CMD also ends within SECONDS.
expect_error() {
  local at_start=0 within=''
  while :; do
    case $1 in
      --at-start) at_start=1; shift ;;
      --within) within=$2; shift 2 ;;
      *) break ;;
    esac
  done
  local what=$1 frag=$2
  shift 2
  local t0=$SECONDS
  timeout 60 "$@" > out.txt 2> err.txt
  local rc=$? took=$((SECONDS - t0))
  [ "$rc" -eq 1 ] || fail "$what: exit $rc, expected 1 ($(head -c 300 err.txt))"
  [ "$(wc -l < err.txt)" -eq 1 ] || fail "$what: expected one stderr line, got: $(head -c 600 err.txt)"
  { grep -q '^error: ' err.txt && grep -qF -- "$frag" err.txt; } ||
    fail "$what: not an \`error:\` line with \`$frag\`: $(head -c 400 err.txt)"
  if [ "$at_start" -eq 1 ] && [[ $(head -n 1 err.txt) != "error: $frag"* ]]; then
    fail "$what: the message does not start with \`$frag\`: $(head -c 400 err.txt)"
  fi
  [ -s out.txt ] && fail "$what: wrote to stdout: $(head -c 200 out.txt)"
  [ -z "$within" ] || [ "$took" -le "$within" ] || fail "$what: took ${took}s (limit ${within}s)"
  return 0
}

# finish NAME: ends the script — exit status 1 after "N check(s) failed" when a check failed,
# else "NAME: all checks passed" and exit status 0.
finish() {
  if [ "$FAILS" -ne 0 ]; then
    echo "$FAILS check(s) failed"
    exit 1
  fi
  echo "$1: all checks passed"
  exit 0
}

# workdir NAME: a new empty directory $WORK under $TMPDIR (or /tmp), removed when the script
# exits, made the current directory.
workdir() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/mxt_cli_$1_XXXXXX") || exit 1
  trap 'rm -rf "$WORK"' EXIT
  cd "$WORK" || exit 1
}

# write_corpus FILE: 9 KB of one repeated sentence, enough text for a few training steps of a
# tiny model.
write_corpus() {
  printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 200) > "$1"
}
