#!/usr/bin/env bash
# Builds everything a firmware image needs into one folder (default: out/ at the repo root):
#   hexrpc-aarch64-musl   static binary (AGNOS and adb shell on Android)
#   hexrpc-aarch64-gnu    glibc binary (AGNOS, glibc 2.34+)
#   hexrpc_<ver>_arm64.deb  /usr/bin/hexrpc + sandboxed boot health-check unit (AGNOS),
#                           /usr/lib/libhexrpc.so + /usr/include/hexrpc.h (the C ABI)
#   hexrpc-overlay.ext4   ext4 overlay image with the same files (mke2fs -d, no root needed)
#   MANIFEST              sha256 and size of each file
# Usage: bash android/packaging/build.sh [OUT_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(mkdir -p "${1:-$root/out}" && cd "${1:-$root/out}" && pwd)"
cd "$root"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
[ -n "$version" ] || { echo "build.sh: cannot read the workspace version" >&2; exit 1; }

echo "==> hexrpc $version: release binaries"
cargo build --locked --release -p hexrpc-android --target aarch64-unknown-linux-musl
cargo build --locked --release -p hexrpc-android --target aarch64-unknown-linux-gnu
install -m 0755 target/aarch64-unknown-linux-musl/release/hexrpc "$out/hexrpc-aarch64-musl"
install -m 0755 target/aarch64-unknown-linux-gnu/release/hexrpc "$out/hexrpc-aarch64-gnu"

echo "==> libhexrpc (the C ABI, bindings/c) for aarch64-unknown-linux-gnu, without the bench"
cargo build --locked --release -p hexrpc-ffi --no-default-features --lib --target aarch64-unknown-linux-gnu

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
tree="$stage/root"
install -D -m 0755 "$out/hexrpc-aarch64-musl" "$tree/usr/bin/hexrpc"
install -D -m 0644 "$here/agnos/hexrpc-probe.service" "$tree/usr/lib/systemd/system/hexrpc-probe.service"
install -D -m 0644 "$here/agnos/sysusers.conf" "$tree/usr/lib/sysusers.d/hexrpc.conf"
install -D -m 0644 "$here/agnos/tmpfiles.conf" "$tree/usr/lib/tmpfiles.d/hexrpc.conf"
install -D -m 0644 target/aarch64-unknown-linux-gnu/release/libhexrpc.so "$tree/usr/lib/libhexrpc.so"
install -D -m 0644 bindings/c/include/hexrpc.h "$tree/usr/include/hexrpc.h"

echo "==> Debian package"
deb="$stage/deb"
cp -a "$tree" "$deb"
mkdir -p "$deb/DEBIAN"
size_kb="$(du -sk "$tree" | cut -f1)"
sed -e "s/@VERSION@/$version/" -e "s/@SIZE_KB@/$size_kb/" "$here/agnos/control" > "$deb/DEBIAN/control"
install -m 0755 "$here/agnos/postinst" "$here/agnos/prerm" "$deb/DEBIAN/"
dpkg-deb --build --root-owner-group "$deb" "$out/hexrpc_${version}_arm64.deb" >/dev/null

echo "==> ext4 overlay image"
rm -f "$out/hexrpc-overlay.ext4"
mke2fs -q -t ext4 -d "$tree" -L hexrpc "$out/hexrpc-overlay.ext4" 8M

echo "==> MANIFEST"
(cd "$out" && for f in hexrpc-aarch64-musl hexrpc-aarch64-gnu "hexrpc_${version}_arm64.deb" hexrpc-overlay.ext4; do
    printf '%s  %s  %s\n' "$(sha256sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"
done) > "$out/MANIFEST"
cat "$out/MANIFEST"
echo "==> done: $out"
