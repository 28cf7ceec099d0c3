#!/usr/bin/env bash
# Compares the two-process round trip of builds of package sim: for each
# pair of CPUs, runs BenchmarkSharedRoundTrip (an RC write with immediate
# between this process and a child, then the cache-line bounce between
# the same two processes) of every build in turn, N times, and prints
# each run and then, per build, the median round trip, the median bounce,
# the median of the runs' round trip in bounces and how many runs are
# within 4 bounces (the target of docs/benchmarks.md). Builds run
# interleaved, so that a machine whose speed drifts moves all of them.
#
# A build is a git revision (built in a temporary worktree) or the word
# "work" (the working tree). The test binaries are static
# (CGO_ENABLED=0): they can be copied to, and run on, a machine without
# Go (BINDIR keeps them; RUN_ONLY=1 runs those already in BINDIR).
#
# Usage: scripts/roundtrip.sh [-n runs] [-p "2,3 2,10"] build...
#   e.g. scripts/roundtrip.sh -n 6 -p "2,3 4,5" main work
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
runs=6
pairs=""
while getopts "n:p:" o; do
	case $o in
	n) runs=$OPTARG ;;
	p) pairs=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [[ $# -eq 0 ]]; then
	echo "usage: scripts/roundtrip.sh [-n runs] [-p \"cpu,cpu ...\"] build..." >&2
	exit 2
fi
if [[ -z $pairs ]]; then
	# The first two CPUs this process may run on.
	pairs=$(python3 -c 'import os; c=sorted(os.sched_getaffinity(0)); print(f"{c[0]},{c[1]}" if len(c) > 1 else "")')
	if [[ -z $pairs ]]; then
		echo "roundtrip.sh: two CPUs are needed" >&2
		exit 1
	fi
fi
bindir=${BINDIR:-$(mktemp -d)}
mkdir -p "$bindir"
name() { echo "${1//[^A-Za-z0-9._-]/_}"; }

if [[ ${RUN_ONLY:-0} != 1 ]]; then
	for b in "$@"; do
		out="$bindir/$(name "$b").test"
		if [[ $b == work ]]; then
			(cd sim && CGO_ENABLED=0 $go test -c -o "$out" .)
			continue
		fi
		wt=$(mktemp -d)
		git worktree add -q --detach "$wt" "$b"
		(cd "$wt/sim" && CGO_ENABLED=0 $go test -c -o "$out" .) || {
			git worktree remove --force "$wt"
			exit 1
		}
		git worktree remove --force "$wt"
	done
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT
cd sim
printf '%-8s %-12s %10s %10s %8s %10s\n' cpus build p50-ns bounce-ns bounces p99-ns
for p in $pairs; do
	for ((i = 0; i < runs; i++)); do
		for b in "$@"; do
			line=$(taskset -c "$p" "$bindir/$(name "$b").test" -test.run '^$' \
				-test.bench 'SharedRoundTrip$' -test.benchtime 20000x 2>&1 | grep '^BenchmarkShared' || true)
			if [[ -z $line ]]; then
				echo "roundtrip.sh: build $b on CPUs $p reported nothing" >&2
				exit 1
			fi
			echo "$line" | awk -v p="$p" -v b="$b" '{
				for (i = 1; i < NF; i++) {
					if ($(i+1) == "p50-ns") x = $i
					if ($(i+1) == "bounce-p50-ns") bo = $i
					if ($(i+1) == "p99-ns") q = $i
				}
				printf "%-8s %-12s %10.0f %10.0f %8.2f %10.0f\n", p, b, x, bo, x / bo, q
			}' | tee -a "$results"
		done
	done
done
echo
python3 - "$results" "$@" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for b in sys.argv[2:]:
    r = [row for row in rows if row[1] == b]
    rt = [float(x[2]) for x in r]
    bo = [float(x[3]) for x in r]
    q = [float(x[4]) for x in r]
    print(f"{b}: {len(r)} runs, round trip p50 median {statistics.median(rt):.0f} ns "
          f"({min(rt):.0f}-{max(rt):.0f}), bounce median {statistics.median(bo):.0f} ns, "
          f"{statistics.median(q):.2f} bounces at the median, {sum(x <= 4 for x in q)} runs within 4")
EOF
