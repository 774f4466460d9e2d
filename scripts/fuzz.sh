#!/usr/bin/env bash
# Runs every fuzz target of the module briefly (FUZZTIME executions each,
# default 20000x: a few seconds a target): the parsers of outside input (SSE
# streams, chunks, /tokenize replies, trace files, the configuration) must
# survive whatever the fuzzer makes. A crasher is written to the package's
# testdata/fuzz/ and fails the run; commit it with the fix, and plain
# `go test` replays it for ever.
#
# A count, not a duration: with a duration, Go 1.26's fuzzing coordinator
# can fail a target with a bare "context deadline exceeded" when the time
# runs out on a loaded machine (go.dev/issue/75804, fixed in Go 1.27).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20000x}
n=0
# The packages with fuzz targets, found in their test files: `go test -list`
# on every package would build every package's tests once more (minutes).
for dir in $(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^\./\(deploy\|tools\|\.tools\)/' | xargs -n1 dirname | sort -u); do
	pkg=$($GO list "$dir")
	for target in $(grep -h '^func Fuzz' "$dir"/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/' | sort); do
		start=$SECONDS
		echo "fuzz: $pkg $target ($FUZZTIME)"
		$GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/sloprober-fuzz.$$ 2>&1 || {
			cat /tmp/sloprober-fuzz.$$
			rm -f /tmp/sloprober-fuzz.$$
			exit 1
		}
		echo "fuzz: $target ok in $((SECONDS - start)) s"
		n=$((n + 1))
	done
done
rm -f /tmp/sloprober-fuzz.$$
echo "fuzz: $n targets passed"
