# Thin wrapper: the two commands of the README.  CMake does the real work,
# with the Ninja generator (scripts/install-deps installs ninja-build): on a
# terminal one status line, otherwise (CI, a log) only what the compiler says.
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all deps build test demo asan fuzz clean docs

all: build

deps:
	@scripts/install-deps

# configure DIR CMAKE_ARGS: configures DIR for Ninja, quietly; a directory an
# older checkout configured for Makefiles is re-configured once (its objects
# are rebuilt).
define configure
	@if [ -f $(1)/CMakeCache.txt ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$$' $(1)/CMakeCache.txt; then \
	  echo "make: $(1) was configured for another generator: re-configuring it for Ninja"; \
	  rm -rf $(1)/CMakeCache.txt $(1)/CMakeFiles; \
	fi
	@cmake -S . -B $(1) -G Ninja $(2) >/dev/null
endef

# compile DIR: Ninja's status line on a terminal, else --quiet (warnings and errors only)
define compile
	@if [ -t 1 ]; then cmake --build $(1) -j $(JOBS); else cmake --build $(1) -j $(JOBS) -- --quiet; fi
endef

build: deps
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=RelWithDebInfo)
	$(call compile,$(BUILD))

# Every test: unit, golden, e2e, fuzz (the committed seeds replayed), gpu (skipped without
# one); then the ASan+UBSan pass.  ctest prints one line per test (on a
# terminal, one line rewritten) and the output of the ones that fail.
test: build
	@cd $(BUILD) && ctest --output-on-failure --progress -j $(JOBS) -LE sanitize
	@$(MAKE) --no-print-directory asan

# Under ASan+UBSan: the unit and golden tests, and trainers of each kind
# (label sanitize: tests/sanitize/trainers.test.sh).
asan: deps
	$(call configure,build-asan,-DCMAKE_BUILD_TYPE=Debug -DSHARDC_SANITIZE=ON)
	$(call compile,build-asan)
	@cd build-asan && ctest --output-on-failure --progress -j $(JOBS) -L 'unit|golden|sanitize' -E 'golden/(html|emit)'

fuzz: deps
	@scripts/run-fuzz 60

docs: build
	@$(BUILD)/shardc docs spec-reference > docs/spec-reference.md

demo: build
	@scripts/demo

clean:
	rm -rf $(BUILD) build-asan build-fuzz
