#!/usr/bin/env bash
# Prints the pkg-config file of libhexrpc (hexrpc.pc) for a library directory and an include
# directory, so `pkg-config --cflags --libs hexrpc` gives the compile and link flags:
#   bash bindings/c/gen-pc.sh LIBDIR INCLUDEDIR > DIR/hexrpc.pc
# The .deb's (android/packaging/build.sh): LIBDIR /usr/lib/hexrpc, INCLUDEDIR /usr/include. A
# desk build: LIBDIR "$PWD/target/release" (from `cargo build --release -p hexrpc-ffi --lib`),
# INCLUDEDIR "$PWD/bindings/c/include". libhexrpc has no SONAME and lives in a private directory,
# so the link flags carry the run path. The version is the workspace's. No URL field (optional in
# pkg-config): the project has no public home page to name.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash bindings/c/gen-pc.sh LIBDIR INCLUDEDIR" >&2; exit 2; }
libdir="$1"
includedir="$2"
case "$libdir$includedir" in
  *[[:space:]\$\#\\]*) echo "gen-pc.sh: directories with spaces, \$, # or \\ cannot be written into a .pc file" >&2; exit 2 ;;
esac
case "$libdir" in /*) ;; *) echo "gen-pc.sh: LIBDIR must be absolute: $libdir" >&2; exit 2 ;; esac
case "$includedir" in /*) ;; *) echo "gen-pc.sh: INCLUDEDIR must be absolute: $includedir" >&2; exit 2 ;; esac
root="$(cd "$(dirname "$0")/../.." && pwd)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)"
[ -n "$version" ] || { echo "gen-pc.sh: cannot read the workspace version" >&2; exit 1; }
cat <<PC
libdir=$libdir
includedir=$includedir

Name: hexrpc
Description: Kernels on the Hexagon compute DSP through FastRPC (the hexrpc C ABI)
Version: $version
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lhexrpc
Libs.private: -lpthread -ldl -lm
Cflags: -I\${includedir}
PC
