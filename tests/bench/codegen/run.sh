#!/usr/bin/env bash
# The build benchmark: for every spec in specs/, the size of the C that
# `shardc build` writes (lines, bytes), the time to generate it (`--emit-c`
# alone: load, plan, verify, write), and the time to compile and link it
# (`shardc build -o` less the generation).  A reference measured in the same
# run: mpicc compiling and linking an empty trainer-sized program against the
# same libraries, the fixed cost every build pays.
# Usage: tests/bench/codegen/run.sh [SHARDC]      (default: build/shardc)
#        RUNS=N: the best of N runs of each (default 1)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
shardc=$(cd "$(dirname "${1:-$root/build/shardc}")" && pwd)/$(basename "${1:-$root/build/shardc}")
runs=${RUNS:-1}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$root"

# best_ms CMD...: the fastest of $runs runs of CMD, in ms (CMD must succeed)
best_ms() {
  local best= t0 t1 ms
  for _ in $(seq "$runs"); do
    t0=$(date +%s%N)
    "$@" > "$T/out" 2>&1 || { echo "FAILED: $*" >&2; cat "$T/out" >&2; exit 1; }
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
  done
  echo "$best"
}

# the reference: mpicc on a trivial program with the trainer's link line
printf 'int main(void) { return 0; }\n' > "$T/ref.c"
ref=$(best_ms mpicc -std=gnu11 -O1 "$T/ref.c" -o "$T/ref" -lopenblas -luring -fopenmp -lcjson -lm)
echo "reference: mpicc compiling and linking an empty program: $ref ms"
printf '%-22s %10s %12s %10s %14s %10s\n' spec "C lines" "C bytes" "gen ms" "cc+link ms" "cc/ref"
for spec in specs/*.tspec; do
  name=$(basename "$spec" .tspec)
  gen=$(best_ms "$shardc" build "$spec" --emit-c "$T/$name.c")
  all=$(best_ms "$shardc" build "$spec" -o "$T/$name")
  cc=$((all - gen))
  printf '%-22s %10d %12d %10d %14d %10.1f\n' "$name" "$(wc -l < "$T/$name.c")" "$(wc -c < "$T/$name.c")" \
    "$gen" "$cc" "$(awk -v a="$cc" -v b="$ref" 'BEGIN { print (b > 0 ? a / b : 0) }')"
  rm -f "$T/$name" "$T/$name.c"
done
