#!/usr/bin/env bash
# Builds everything a firmware image needs into one folder (default: out/ at the repo root):
#   hexrpc-aarch64-musl        static binary (AGNOS and adb shell on Android)
#   hexrpc-aarch64-gnu         glibc binary (AGNOS, glibc 2.34+)
#                              (both without the `bench` feature: no simulator in a device binary)
#   libhexrpc_selftest.so      the device test library (Hexagon, `hexrpc build-lib` from
#                              android/devicelib/hexrpc_selftest.c) that `selftest --device` runs
#   hexrpc_<ver>_arm64.deb     /usr/bin/hexrpc, the device test library, the boot health-check
#                              unit (enabled offline by postinst), sysusers/tmpfiles entries,
#                              copyright and changelog (AGNOS; see docs/agnos.md),
#                              /usr/lib/hexrpc/libhexrpc.so (stripped; private directory: no
#                              SONAME, so not a public shared library) + /usr/include/hexrpc.h
#                              + hexrpc.pc (pkg-config, bindings/c/gen-pc.sh), the manual page
#                              hexrpc.1 (`hexrpc help --man`: made from the help texts)
#   hexrpc.1                   that manual page (roff)
#   MANIFEST                   sha256 and size of each file
# Reproducible: every timestamp is SOURCE_DATE_EPOCH (default: the last commit's time), files are
# owned by root in the archive (dpkg-deb --root-owner-group, no fakeroot needed), modes and order
# are fixed; two runs give byte-identical files (.ci/check-packaging compares them).
# Needs: cargo with the aarch64 musl/gnu targets, clang-19 and ld.lld-19 (build-lib), dpkg-deb.
# Usage: bash android/packaging/build.sh [OUT_DIR]
set -euo pipefail
umask 022
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(mkdir -p "${1:-$root/out}" && cd "${1:-$root/out}" && pwd)"
cd "$root"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
[ -n "$version" ] || { echo "build.sh: cannot read the workspace version" >&2; exit 1; }
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH="$(git -C "$root" log -1 --format=%ct 2>/dev/null || stat -c %Y "$root/Cargo.toml")"
fi
export SOURCE_DATE_EPOCH
export LC_ALL=C TZ=UTC

# The shipped CLI uses the `device` profile (Cargo.toml: `release` at opt-level "z", for size,
# dependencies included); the C library and the host tool below use `release` (opt-level 3).
echo "==> hexrpc $version: device binaries without the bench (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
cargo build --locked --profile device -p hexrpc-android --no-default-features --target aarch64-unknown-linux-musl
cargo build --locked --profile device -p hexrpc-android --no-default-features --target aarch64-unknown-linux-gnu
install -m 0755 target/aarch64-unknown-linux-musl/device/hexrpc "$out/hexrpc-aarch64-musl"
install -m 0755 target/aarch64-unknown-linux-gnu/device/hexrpc "$out/hexrpc-aarch64-gnu"

echo "==> libhexrpc (the C ABI, bindings/c) for aarch64-unknown-linux-gnu, without the bench"
cargo build --locked --release -p hexrpc-ffi --no-default-features --lib --target aarch64-unknown-linux-gnu

echo "==> device test library (hexrpc build-lib, host build of the tool; with the bench, not shipped)"
cargo build --locked --release -p hexrpc-android
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
# The build directory's path is not embedded (no debug info), so a fixed one keeps it simple.
target/release/hexrpc -q build-lib android/devicelib/hexrpc_selftest.c --kernel hexrpc_selftest \
    --signature buf,buf,u32,u32,u32 -o "$stage/libhexrpc_selftest.so" >/dev/null
install -m 0644 "$stage/libhexrpc_selftest.so" "$out/libhexrpc_selftest.so"

echo "==> manual page (hexrpc help --man: the help texts as roff; no date in it)"
target/release/hexrpc help --man > "$stage/hexrpc.1"
install -m 0644 "$stage/hexrpc.1" "$out/hexrpc.1"

echo "==> Debian package"
deb="$stage/deb"
install -D -m 0755 "$out/hexrpc-aarch64-musl" "$deb/usr/bin/hexrpc"
install -D -m 0644 "$out/libhexrpc_selftest.so" "$deb/usr/lib/hexrpc/libhexrpc_selftest.so"
install -D -m 0644 target/aarch64-unknown-linux-gnu/release/libhexrpc.so "$deb/usr/lib/hexrpc/libhexrpc.so"
aarch64-linux-gnu-strip --strip-unneeded --remove-section=.comment "$deb/usr/lib/hexrpc/libhexrpc.so"
install -D -m 0644 bindings/c/include/hexrpc.h "$deb/usr/include/hexrpc.h"
# pkg-config's directory for arm64 (multiarch), where a native or cross pkg-config looks.
bash bindings/c/gen-pc.sh /usr/lib/hexrpc /usr/include > "$stage/hexrpc.pc"
install -D -m 0644 "$stage/hexrpc.pc" "$deb/usr/lib/aarch64-linux-gnu/pkgconfig/hexrpc.pc"
install -d -m 0755 "$deb/usr/share/man/man1"
gzip -9n < "$out/hexrpc.1" > "$deb/usr/share/man/man1/hexrpc.1.gz"
chmod 0644 "$deb/usr/share/man/man1/hexrpc.1.gz"
install -D -m 0644 "$here/agnos/hexrpc-probe.service" "$deb/usr/lib/systemd/system/hexrpc-probe.service"
install -D -m 0644 "$here/agnos/sysusers.conf" "$deb/usr/lib/sysusers.d/hexrpc.conf"
install -D -m 0644 "$here/agnos/tmpfiles.conf" "$deb/usr/lib/tmpfiles.d/hexrpc.conf"
install -D -m 0644 "$here/agnos/copyright" "$deb/usr/share/doc/hexrpc/copyright"
install -D -m 0644 "$here/agnos/lintian-overrides" "$deb/usr/share/lintian/overrides/hexrpc"
gzip -9n < "$here/agnos/changelog" > "$deb/usr/share/doc/hexrpc/changelog.gz"
chmod 0644 "$deb/usr/share/doc/hexrpc/changelog.gz"
mkdir -p "$deb/DEBIAN"
size_kb="$(du -sk --apparent-size "$deb" | cut -f1)"
sed -e "s/@VERSION@/$version/" -e "s/@SIZE_KB@/$size_kb/" "$here/agnos/control" > "$deb/DEBIAN/control"
install -m 0755 "$here/agnos/postinst" "$here/agnos/prerm" "$here/agnos/postrm" "$deb/DEBIAN/"
(cd "$deb" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$deb/DEBIAN/md5sums"
chmod 0644 "$deb/DEBIAN/control" "$deb/DEBIAN/md5sums"
find "$deb" -type d -exec chmod 0755 {} +
find "$deb" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
dpkg-deb --build --root-owner-group -Zxz "$deb" "$out/hexrpc_${version}_arm64.deb" >/dev/null

echo "==> MANIFEST"
(cd "$out" && for f in hexrpc-aarch64-musl hexrpc-aarch64-gnu libhexrpc_selftest.so hexrpc.1 "hexrpc_${version}_arm64.deb"; do
    printf '%s  %s  %s\n' "$(sha256sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"
done) > "$out/MANIFEST"
cat "$out/MANIFEST"
echo "==> done: $out"
