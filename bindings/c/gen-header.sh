#!/usr/bin/env bash
# Regenerates bindings/c/include/hexrpc.h from the crate (needs cbindgen:
# `cargo install cbindgen --locked`). With --check, fails if the checked-in header differs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/include/hexrpc.h"
if [ "${1:-}" = "--check" ]; then
  tmp="$(mktemp)"
  trap 'rm -f "$tmp"' EXIT
  cbindgen --quiet --config "$here/cbindgen.toml" --crate hexrpc-ffi --output "$tmp" "$here"
  if ! diff -u "$out" "$tmp"; then
    echo "bindings/c/include/hexrpc.h is out of date: run bash bindings/c/gen-header.sh" >&2
    exit 1
  fi
  echo "hexrpc.h is up to date"
else
  cbindgen --quiet --config "$here/cbindgen.toml" --crate hexrpc-ffi --output "$out" "$here"
  echo "wrote $out"
fi
