#!/usr/bin/env bash
# Runs every native fuzz target of the module (func Fuzz* in a _test.go
# file) for FUZZTIME each (default 10s), one after the other, and fails if
# any finds a failing input. Usage: scripts/fuzz.sh [FUZZTIME]
#
# Go 1.26's fuzzing coordinator can end a duration-bounded run with a bare
# "context deadline exceeded" although nothing failed (golang.org/issue/75804,
# fixed in Go 1.27): a run that says only that and wrote no failing input to
# testdata/fuzz is reported and not counted as a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-${FUZZTIME:-10s}}
go=${GO:-go}
module=$($go list -m)
failed=()
start=$SECONDS
while IFS= read -r file; do
	dir=$(dirname "$file")
	pkg="$module/${dir#./}"
	[ "$dir" = "." ] && pkg=$module
	for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
		corpus="$dir/testdata/fuzz/$target"
		before=$(ls "$corpus" 2>/dev/null || true)
		log=$(mktemp)
		echo "fuzz $pkg $target ($fuzztime)"
		if $go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1; then
			tail -n 1 "$log"
		elif [ "$(ls "$corpus" 2>/dev/null || true)" = "$before" ] &&
			grep -q 'context deadline exceeded' "$log" &&
			! grep -q -e 'Failing input' -e '--- FAIL: Fuzz[A-Za-z0-9_]*/' "$log"; then
			echo "  stopped by the coordinator's deadline race (golang.org/issue/75804); no failing input"
		else
			cat "$log"
			failed+=("$pkg $target")
		fi
		rm -f "$log"
	done
done < <(grep -rl --include='*_test.go' --exclude-dir=testdata '^func Fuzz' . | sort)
echo "fuzz: $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz: FAILED %s\n' "${failed[@]}"
	exit 1
fi
