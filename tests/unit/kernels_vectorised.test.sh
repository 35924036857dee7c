#!/bin/sh
# kernels_vectorised.test.sh SHARDC BUILD_DIR — the exp-bound loops of the CPU
# kernels are vectorised in every clone the library is built with.
# KC_MULTIVERSION compiles them for x86-64 (SSE2), x86-64-v3 (AVX2) and
# x86-64-v4 (AVX-512); a loop GCC leaves scalar in one clone (as the AVX2
# exp once was: "control flow in loop") runs several times slower on the
# machines that pick it, yet computes the same values, so no numeric test
# sees it.  This reads the clones' machine code: each must evaluate the exp
# polynomial (six multiply-adds) with packed instructions of its width —
# mulps/addps on xmm, vfmadd*ps on ymm, on zmm.  The norms' row sums (16
# double lanes, norm.c) likewise: packed double adds or multiply-adds of the
# clone's width, more than the lanes' final total alone has (it adds a tail
# into the 16 lanes: 2 on zmm, 4 on ymm, 8 on xmm per sum), where a sum in
# index order is a chain of scalar adds (vaddsd).  Skipped (77) off x86-64,
# without objdump, or in a sanitizer build.
set -eu
lib=${2:-build}/kernels/cpu/libshardk_cpu.a
[ "$(uname -m)" = x86_64 ] || { echo "skipped: not x86-64"; exit 77; }
command -v objdump > /dev/null || { echo "skipped: no objdump"; exit 77; }
[ -f "$lib" ] || { echo "no $lib"; exit 1; }
# a sanitizer build instruments every access, and GCC then vectorises nothing
if nm "$lib" 2>/dev/null | grep -q '__asan_report\|__ubsan_handle'; then
    echo "skipped: a sanitizer build (instrumented loops are not vectorised)"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
# one line per instruction: FUNCTION<TAB>instruction
objdump -d --no-show-raw-insn "$lib" |
    awk '/^[0-9a-f]+ <.*>:$/ { f = substr($2, 2, length($2) - 3); next } NF { print f "\t" $0 }' > "$tmp/asm"
fail=0
# packed FN CLONE PATTERN LEAST WHAT WHY: FN's CLONE must hold at least LEAST
# instructions matching PATTERN (WHAT, counted); WHY ends the failure's line
packed() {
    if ! grep -q "^$1\.$2	" "$tmp/asm"; then
        echo "FAIL: $1 has no $2 clone in $lib"
        fail=1
        return
    fi
    n=$(grep "^$1\.$2	" "$tmp/asm" | grep -c -E "$3" || true)
    if [ "$n" -lt "$4" ]; then
        echo "FAIL: $1.$2: $n $5 (/$3/), $6"
        fail=1
    else
        echo "ok: $1.$2: $n $5"
    fi
}
for fn in kc_vexp kc_gelu_fwd_block kc_gelu_bwd_block kc_gelu_scale_block kc_swiglu_fwd_row; do
    packed "$fn" default '(mul|add)ps[[:space:]].*%xmm' 6 "packed multiply-adds" "the exp alone needs 6: not vectorised"
    packed "$fn" arch_x86_64_v3 'vfn?m(add|sub)[0-9]+ps[[:space:]].*%ymm' 6 "packed multiply-adds" "the exp alone needs 6: not vectorised"
    packed "$fn" arch_x86_64_v4 'vfn?m(add|sub)[0-9]+ps[[:space:]].*%zmm' 6 "packed multiply-adds" "the exp alone needs 6: not vectorised"
done
# the lanes' final total adds a tail into 16 lanes: 8 xmm, 4 ymm, 2 zmm adds a sum
for fn in kc_norm_sum kc_norm_sqdev kc_norm_ln_dsums kc_norm_rms_dsum; do
    sums=1
    [ "$fn" = kc_norm_ln_dsums ] && sums=2
    why="needs more than the lanes' total alone: the lanes are not vectorised"
    packed "$fn" default 'addpd[[:space:]].*%xmm' $((sums * 8 + 1)) "packed double adds" "$why"
    packed "$fn" arch_x86_64_v3 '(vaddpd|vfn?m(add|sub)[0-9]+pd)[[:space:]].*%ymm' $((sums * 4 + 1)) "packed double adds" "$why"
    packed "$fn" arch_x86_64_v4 '(vaddpd|vfn?m(add|sub)[0-9]+pd)[[:space:]].*%zmm' $((sums * 2 + 1)) "packed double adds" "$why"
done
exit $fail
