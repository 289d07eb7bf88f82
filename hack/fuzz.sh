#!/usr/bin/env bash
# Runs every Go fuzz target in the module (each `func FuzzX` in a _test.go file under pkg/), one
# after the other, each for FUZZ_TIME: `make fuzz-short` (part of `make ci-checks`, a few
# seconds each) and `make fuzz` (longer). Targets are found, not listed, so a
# new one runs without touching this script. A failing input is written under the package's
# testdata/fuzz/FuzzX/: commit it with the fix, and it is a regression test of `make unit`.
#
# Each package's instrumented test binary is built once (go test -c -fuzz) and run once per
# target, as `go test -fuzz` would run it: linking is most of the cost on a small machine.
set -euo pipefail

: "${GO:=go}"
: "${FUZZ_TIME:=3s}"

module=$("$GO" list -m)
cache="$("$GO" env GOCACHE)/fuzz"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

targets=$(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' pkg |
  xargs grep -H -o -E '^func Fuzz[A-Za-z0-9_]*' | sed -E 's#^(.*)/[^/]*_test\.go:func #\1 #' | sort -u)
if [ -z "$targets" ]; then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi
n=0
start=$SECONDS
while read -r dir name; do
  test="$bin/${dir//\//_}.test"
  if [ ! -x "$test" ]; then
    "$GO" test -c -fuzz '^Fuzz' -o "$test" "./$dir"
  fi
  echo "fuzz: $name (./$dir) for $FUZZ_TIME"
  (cd "$dir" && "$test" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$FUZZ_TIME" \
    -test.fuzzcachedir "$cache/$module/$dir" -test.paniconexit0 2>&1) | grep -v '^fuzz: elapsed' || {
    echo "fuzz: $name failed; the failing input is under ./$dir/testdata/fuzz/$name/" >&2
    exit 1
  }
  n=$((n + 1))
done <<< "$targets"
echo "fuzz: $n targets passed in $((SECONDS - start))s"
