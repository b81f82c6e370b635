#!/bin/sh
# The native shim under AddressSanitizer + UndefinedBehaviorSanitizer (clang-14, libclang-rt-14-dev),
# for tests/unit/test_shim_fuzz.py and for long fuzz runs by hand (docs/testing.md):
#   shim/fuzz/build.sh OUTDIR            OUTDIR/shim-fuzzer (libFuzzer + harness.c) and
#                                        OUTDIR/cnichain-shim-asan (the real program, sanitized)
#   shim/fuzz/build.sh OUTDIR coverage   OUTDIR/shim-fuzzer-cov: the harness with clang's source-based
#                                        coverage, to replay a corpus and read cnichain-shim.c's lines
# Every sanitizer finding aborts (-fno-sanitize-recover=all), so a run's exit status is its verdict.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: shim/fuzz/build.sh OUTDIR [coverage]}"
mkdir -p "$out"
cc="${CC:-clang-14}"
flags="-std=c11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror"
san="-fsanitize=address,undefined -fno-sanitize-recover=all"
build() {  # OUTPUT, then compiler arguments: written under a temporary name, then renamed
  dest="$1"
  shift
  "$cc" $flags "$@" -o "$dest.tmp"
  mv -f "$dest.tmp" "$dest"
}
if [ "${2:-}" = coverage ]; then
  build "$out/shim-fuzzer-cov" -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping -DCNICHAIN_FUZZ \
    "$here/harness.c" -lpthread
  exit 0
fi
build "$out/shim-fuzzer" $san -fsanitize=fuzzer -DCNICHAIN_FUZZ "$here/harness.c" -lpthread
build "$out/cnichain-shim-asan" $san "$here/../cnichain-shim.c"
