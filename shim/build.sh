#!/bin/sh
# Build the native shim (cnichain-shim.c): one static executable, libc only, no shell needed to run.
# musl-gcc when present (a ~30 kB binary), else gcc -static.  Usage: shim/build.sh [OUTPUT]
# The result is written under a temporary name and renamed, so a reader never sees half a binary.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/cnichain-shim}"
if command -v musl-gcc >/dev/null 2>&1; then cc=musl-gcc; else cc=gcc; fi
"$cc" -std=c11 -Os -static -s -Wall -Wextra -Werror -o "$out.tmp" "$here/cnichain-shim.c"
mv -f "$out.tmp" "$out"
