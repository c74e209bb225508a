#!/usr/bin/env bash
# `make test` of two revisions, back to back on this machine, each in a fresh clone.
#
#   bash scripts/suite_timing.sh OLD_REV [NEW_REV]      # NEW_REV: HEAD unless given
#
# Each clone first runs `make book` (not timed: both suites test a built book), then the two
# `make test` runs follow one another with nothing else started in between. Prints the tests each
# suite ran, pytest's own time and the wall time of `make test`. Logs stay in the printed folder.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "사용법: bash scripts/suite_timing.sh 예전_리비전 [새_리비전]   (새 리비전을 빼면 HEAD)" >&2
  exit 2
fi
repo=$(git rev-parse --show-toplevel)
revs=()
for rev in "$1" "${2:-HEAD}"; do
  if ! sha=$(git -C "$repo" rev-parse --verify -q "$rev^{commit}"); then
    echo "리비전 '$rev'를 찾을 수 없습니다: git log --oneline으로 있는 커밋을 고르세요." >&2
    exit 2
  fi
  revs+=("$sha")
done

work=$(mktemp -d "${TMPDIR:-/tmp}/suite-timing-XXXXXX")
echo "작업 폴더: $work"
for sha in "${revs[@]}"; do
  dir="$work/${sha:0:7}"
  git clone -q "$repo" "$dir"
  git -C "$dir" checkout -q --detach "$sha"
  echo "$(date -u +%H:%M:%S) make book: ${sha:0:7}"
  (cd "$dir" && make book >"$dir.book.log" 2>&1) || { echo "make book 실패: $dir.book.log" >&2; exit 1; }
done

rows=()
for sha in "${revs[@]}"; do
  dir="$work/${sha:0:7}"
  echo "$(date -u +%H:%M:%S) make test: ${sha:0:7}"
  start=$SECONDS
  set +e
  (cd "$dir" && make test >"$dir.test.log" 2>&1)
  rc=$?
  set -e
  wall=$((SECONDS - start))
  # pytest's closing line, e.g. "===== 1871 passed in 878.12s (0:14:38) ====="
  closing=$(grep -E "^=+ .*(passed|failed).* in [0-9.]+s" "$dir.test.log" | tail -n 1 | tr -d '=' | sed 's/^ *//; s/ *$//')
  rows+=("${sha:0:7}|exit $rc|${closing:-no pytest summary}|$wall s")
done

echo
echo "| 리비전 | 종료 | pytest | make test (벽시계) |"
echo "|---|---|---|---|"
for row in "${rows[@]}"; do
  echo "| ${row//|/ | } |"
done
