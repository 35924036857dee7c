# Thin wrapper: the two commands of the README.  CMake does the real work.
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all deps build test demo asan fuzz clean docs

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Every test: unit, golden, e2e, fuzz (four short runs), gpu (skipped without
# one); then the ASan+UBSan pass.
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE sanitize
	@$(MAKE) --no-print-directory asan

# Under ASan+UBSan: the unit and golden tests, and trainers of each kind
# (label sanitize: tests/sanitize/trainers.test.sh).
asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSHARDC_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ctest --output-on-failure -j $(JOBS) -L 'unit|golden|sanitize' -E 'golden/(html|emit)'

fuzz: deps
	@scripts/run-fuzz 60

docs: build
	@$(BUILD)/shardc docs spec-reference > docs/spec-reference.md

demo: build
	@scripts/demo

clean:
	rm -rf $(BUILD) build-asan build-fuzz
