# mlx5kit — the habits of the project as make targets.
#
#   make pingpong   the main job: RC ping-pong on the first mlx5 device, or on
#                   the software HCA when there is none; with MLX5KIT_EMULATE=1
#                   MLX5KIT_PROVIDER=mlx5, through rdma-core on the emulated device
#   make test       everything a change must pass (installs what is missing)
#   make bench      the benchmark suite (set MLX5KIT_CPUS to pin, e.g. 2,4)
#   make bench-floor     Go post+poll beside the C floor and cgo per operation
#   make bench-histogram ping-pong latency histograms, text and SVG, in docs/img
#   make bench-preempt   ping-pong with asynchronous preemption on and off
#   make instructions    instructions per post of each kind, counted with callgrind
#   make lint       gofmt, go vet, staticcheck with every check, go.mod tidy
#   make api-surface     exported identifiers and fields per public package
#   make fuzz       every fuzz target for FUZZTIME each
#   make soak       the reliability soak: 1,000,000 work requests with faults
#   make cross      GOARCH=arm64 build and vet
#   make test-arm64 pure-Go and assembly tests for arm64 under qemu-user
#   make hwtest     the end-to-end scenarios on a real mlx5 device (never the
#                   emulated one: MLX5KIT_EMULATE is forced off)

SHELL       := /bin/bash
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin
GO          ?= go
FUZZTIME    ?= 10s
BENCHTIME   ?= 1s
MLX5KIT_CPUS ?=
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT   := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
BENCHCOUNT  ?= 5
PREEMPT_OUT ?= $(or $(TMPDIR),/tmp)/mlx5kit-asyncpreemptoff

TASKSET := $(if $(MLX5KIT_CPUS),taskset -c $(MLX5KIT_CPUS),)

.PHONY: deps pingpong test bench bench-floor bench-histogram bench-preempt instructions lint api-surface fuzz soak cross test-arm64 hwtest

deps:
	@./scripts/deps.sh

pingpong: deps
	$(GO) run ./cmd/mlx5kit-pingpong -iters 100000

test: deps
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -race -short ./...
	CGO_ENABLED=0 $(GO) vet ./...
	CGO_ENABLED=0 $(GO) test -count=1 -short ./...
	$(GO) vet -tags mlx5kit_lfence ./...
	$(GO) test -count=1 -short -tags mlx5kit_lfence ./blueflame ./monocq ./bench ./rc ./sim
	CGO_CFLAGS="$$($(GO) env CGO_CFLAGS) -DMK_EMU_MAX_FDS=4096" $(GO) test -count=1 -run 'UnderLimit' ./cgo/emulate

bench: deps
	$(TASKSET) $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

bench-floor: deps
	$(TASKSET) $(GO) test -run '^$$' -bench 'PostPoll' -count $(BENCHCOUNT) ./bench

bench-histogram: deps
	mkdir -p docs/img
	MLX5KIT_HIST_DIR=$(CURDIR)/docs/img $(TASKSET) $(GO) test -run '^$$' \
		-bench 'Pingpong/(rc-write-imm|rc-read)/8B$$' -benchtime 200000x ./bench

bench-preempt: deps
	$(GO) test -c -o bench/bench.test ./bench
	for off in 0 1; do \
		GODEBUG=asyncpreemptoff=$$off $(TASKSET) ./bench/bench.test -test.run '^$$' \
			-test.bench 'Pingpong/rc-write-imm/8B$$' -test.count $(BENCHCOUNT) > $(PREEMPT_OUT)-$$off.txt; \
	done
	rm -f bench/bench.test
	$(GO) run $(BENCHSTAT) preempt=$(PREEMPT_OUT)-0.txt no-preempt=$(PREEMPT_OUT)-1.txt

instructions: deps
	GO=$(GO) ./scripts/instructions.sh

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) -checks all ./...
	@$(GO) mod tidy -diff >/dev/null || { echo "go mod tidy would change go.mod or go.sum:"; $(GO) mod tidy -diff; exit 1; }

api-surface:
	$(GO) run ./internal/apisurface

fuzz: deps
	GO=$(GO) ./scripts/fuzz.sh $(FUZZTIME)

soak: deps
	MLX5KIT_SOAK=full $(GO) test -count=1 -run '^TestSoak$$' -v ./reliability/

cross:
	GOARCH=arm64 $(GO) build ./...
	GOARCH=arm64 $(GO) vet ./...
	GOARCH=arm64 CGO_ENABLED=0 $(GO) test -c -o /dev/null ./blueflame/

# Every package: CGO_ENABLED=0 leaves the hardware provider its stub, and
# the rest (software HCA, transports, soak) runs under emulation in -short.
ARM64_PKGS ?= ./...

test-arm64:
	@./scripts/deps.sh qemu-user-static
	@set -e; dir=$$(mktemp -d); trap 'rm -rf $$dir' EXIT; \
	for pkg in $$(GOARCH=arm64 CGO_ENABLED=0 $(GO) list $(ARM64_PKGS)); do \
		bin=$$dir/$$(echo $$pkg | tr / _).test; \
		GOARCH=arm64 CGO_ENABLED=0 $(GO) test -c -o $$bin $$pkg; \
		[ -f $$bin ] || continue; \
		echo "arm64 (qemu-user) $$pkg"; \
		(cd $$($(GO) list -f '{{.Dir}}' $$pkg) && MLX5KIT_EMULATED=1 qemu-aarch64-static $$bin -test.short -test.count=1); \
	done

hwtest: deps
	MLX5KIT_EMULATE=0 MLX5KIT_REQUIRE_DEVICE=1 MLX5KIT_PROVIDER=mlx5 $(GO) test -count=1 -run 'Hardware|Integration' ./...
