#!/usr/bin/env bash
# Installs what building and testing mlx5kit needs on Debian/Ubuntu and is a
# no-op when everything is present: the rdma-core headers and libraries
# (libibverbs-dev) for the cgo provider and its layout tests, the providers
# (ibverbs-providers: libmlx5), ibv_devinfo and the ibv_*_pingpong programs
# (ibverbs-utils) and perftest's ib_* programs (perftest), which the
# emulated kernel's tests run unmodified, and the Go modules. Run as root or
# with sudo available.
set -euo pipefail

need_pkgs=()
[ -f /usr/include/infiniband/mlx5dv.h ] || need_pkgs+=(libibverbs-dev)
command -v gcc >/dev/null 2>&1 || need_pkgs+=(gcc)
compgen -G '/usr/lib*/libmlx5.so.1' >/dev/null || compgen -G '/usr/lib/*/libmlx5.so.1' >/dev/null ||
	need_pkgs+=(ibverbs-providers)
command -v ibv_devinfo >/dev/null 2>&1 || need_pkgs+=(ibverbs-utils)
command -v ib_write_lat >/dev/null 2>&1 || need_pkgs+=(perftest)
for extra in "$@"; do
	dpkg -s "$extra" >/dev/null 2>&1 || need_pkgs+=("$extra")
done

if [ ${#need_pkgs[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "deps: installing ${need_pkgs[*]}" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# The Go version is the one go.mod's go directive names.
go_want=$(awk '$1 == "go" { print $2; exit }' "$(dirname "$0")/../go.mod")
if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		echo "deps: add /usr/local/go/bin to PATH" >&2
	else
		echo "deps: Go ${go_want} or newer is required (go.mod; https://go.dev/doc/install)" >&2
	fi
	exit 1
fi
go_have=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$go_want" "$go_have" | sort -V | head -n1)" != "$go_want" ]; then
	echo "deps: Go ${go_want} or newer is required (go.mod), found ${go_have}" >&2
	exit 1
fi
go mod download
