#!/usr/bin/env bash
# Counts the instructions one post runs, for every case of wqebuilder's
# BenchmarkPost (the full post: WQE, doorbell record, BlueFlame copy) and
# for rc's receive posts. valgrind's callgrind counts only inside the
# function that posts (the benchmark's function literal, or the receive
# rig's postOne), callees included, at two iteration counts; the difference
# over the difference of the counts is one post, setup excluded. Unlike a
# timing it does not move with the machine's load, so it shows what a
# change to the post path costs or saves. The BlueFlame copy runs in the
# store8 mode (eight 8-byte stores per 64 bytes), which valgrind runs on
# every x86-64 CPU.
#
# Usage: scripts/instructions.sh [regexp]   (cases whose name matches;
# about 25 s a case, 70 s for the receive posts, which start the software HCA)
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
filter=${1:-.}
command -v valgrind >/dev/null 2>&1 || ./scripts/deps.sh valgrind
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# count binary dir function benchmark n1 n2: instructions per iteration,
# from runs of n1 and n2 iterations.
count() {
	local bin=$1 pkgdir=$2 fn=$3 bench=$4 n1=$5 n2=$6 n total=()
	# cpu.rdtscp=off: the runtime reads the time stamp counter with RDTSCP
	# where the CPU has it, an instruction valgrind 3.19 cannot run.
	for n in "$n1" "$n2"; do
		total+=("$(cd "$pkgdir" && GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off MLX5KIT_BLUEFLAME=store8 \
			valgrind --tool=callgrind --callgrind-out-file="$dir/out" "--toggle-collect=$fn" \
			"$bin" -test.run '^$' -test.bench "$bench" -test.benchtime "${n}x" 2>&1 |
			sed -n 's/.*Collected : \([0-9]*\).*/\1/p')")
	done
	if [[ -z ${total[0]} || -z ${total[1]} || ${total[0]} -eq 0 ]]; then
		echo "instructions.sh: valgrind counted nothing in $fn ($bench)" >&2
		exit 1
	fi
	echo $(((total[1] - total[0]) / (n2 - n1)))
}

$go test -c -o "$dir/wqebuilder.test" ./wqebuilder
$go test -c -o "$dir/rc.test" ./rc
printf '%-28s %s\n' case instructions
for name in $(sed -n 's/^\t{"\([A-Z0-9_]*\)", func.*/\1/p' wqebuilder/bench_test.go); do
	[[ $name =~ $filter ]] || continue
	# An assignment, not an argument of printf: a failed count stops the
	# script (set -e).
	n=$(count "$dir/wqebuilder.test" wqebuilder \
		'github.com/mlx5kit/mlx5kit/wqebuilder_test.init.func*' "^BenchmarkPost\$/^$name\$" 1000 3000)
	printf '%-28s %s\n' "Post/$name" "$n"
done
for name in PostRecv PostRecvSRQ; do
	[[ $name =~ $filter ]] || continue
	n=$(count "$dir/rc.test" rc \
		'github.com/mlx5kit/mlx5kit/rc_test.(*recvRig).postOne' "^Benchmark$name\$" 100 300)
	printf '%-28s %s\n' "rc $name" "$n"
done
