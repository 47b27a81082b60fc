#!/usr/bin/env bash
# tests/repo/doc_citations.sh — the sources cite only documents that are in the repository.
#
# 1. No file cites a specification outside the repository by section number ("SP" "EC §N";
#    the pattern is built from two pieces so that this script does not match itself).
# 2. Every single-line citation of a doc section, `docs/NAME.md, "Heading"` or
#    `docs/adaptive.md §N`, names a heading that exists in that file (a heading that starts
#    with the cited text).
# Usage: doc_citations.sh /path/to/source-tree   (run by CTest as `repo_doc_citations`)
set -u
SRC=$(realpath "${1:?usage: doc_citations.sh /path/to/source-tree}") || exit 1
cd "$SRC" || exit 1
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
DIRS=(include src tests docs scripts tools bench configs CMakeLists.txt README.md)

piece=SP
if hits=$(grep -rn -- "${piece}EC §" "${DIRS[@]}" 2>/dev/null); then
  fail "citations of a specification that is not in the repository:"
  echo "$hits"
fi

# docs/NAME.md, "Heading"
while IFS= read -r hit; do
  loc=${hit%%:docs/*}
  cite=${hit#"$loc":}
  doc=${cite%%,*}
  heading=${cite#*\"}
  heading=${heading%\"}
  if [ ! -f "$doc" ]; then
    fail "$loc: cites $doc, which does not exist"
  elif ! grep -qxF -- "$heading" <(grep -E '^#+ ' "$doc" | sed -E 's/^#+ ([0-9]+\. )?//' |
                                   cut -c1-${#heading}); then
    fail "$loc: cites $doc, \"$heading\": no such heading"
  fi
done < <(grep -rnoE 'docs/[a-z_]+\.md, "[^"]+"' "${DIRS[@]}" 2>/dev/null)

# docs/adaptive.md §N
while IFS= read -r hit; do
  loc=${hit%%:docs/*}
  n=${hit##*§}
  grep -qE "^## $n\. " docs/adaptive.md || fail "$loc: cites docs/adaptive.md §$n: no such section"
done < <(grep -rnoE 'docs/adaptive\.md §[0-9]+' "${DIRS[@]}" 2>/dev/null)

if [ "$FAILS" -ne 0 ]; then
  echo "$FAILS failure(s)"
  exit 1
fi
echo "doc citations: ok"
