#!/bin/bash
# setup.sh - prepare everything run.sh needs.  Idempotent and cached; needs
# root and Debian's apt.
#
#  1. apt-get install the host packages: qemu, the rdma-core userland the
#     guest runs over 9p, the verbs/rdmacm headers for cgo, busybox-static
#     for the initramfs, and the tools to build siw.ko
#  2. apt-get download Debian 12's own kernel (the one linux-image-amd64
#     depends on, or RDMANET_VM_KVER) and unpack /boot and /lib/modules
#  3. build siw.ko out of tree: Debian's 6.1 kernel has "# CONFIG_RDMA_SIW
#     is not set".  Sources from linux-source-6.1 (only the siw directory is
#     kept), built against linux-headers-<kver> with the same gcc, so that
#     vermagic and modversions match; installed as updates/siw.ko + depmod
#  4. extract the uncompressed vmlinux (qemu boots it through PVH: about 5 s
#     faster per boot under TCG than the bzImage)
#  5. build the busybox initramfs: guest/init plus the modules to mount the
#     9p/overlay root and the whole RDMA stack (insmod from RAM is much
#     faster under TCG than one modprobe per module over 9p)
#
# Cache: $RDMANET_VM_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/rdmanet-vm)
# /<kver>/, about 470 MB per kernel version; <base>/current names the kernel
# version the last setup prepared (run.sh boots that one).  Concurrent setups
# are serialized with flock on <base>/.lock.
#
# Knobs: RDMANET_VM_CACHE, RDMANET_VM_KVER (e.g. 6.1.0-48-amd64; default:
# follow linux-image-amd64), RDMANET_VM_FORCE=1 (redo the kernel, siw and
# initramfs steps).  Progress goes to stderr; stdout stays empty.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

log() { echo "[setup] $*" >&2; }
die() {
	echo "[setup] ERROR: $*" >&2
	exit 1
}

[ "$(id -u)" = 0 ] || die "needs root (apt-get, depmod into the cache, qemu 9p passthrough)"
command -v apt-get >/dev/null 2>&1 || die "needs Debian's apt-get"

BASE=$(vm_cache_base)
ID=$(vm_setup_id "$HERE")
FORCE=${RDMANET_VM_FORCE:-0}
mkdir -p "$BASE"

# One setup at a time: run.sh may be started several times at once (go test
# -exec), and apt/dpkg must not run twice anyway.
exec 9>"$BASE/.lock"
if ! flock -n 9; then
	log "another setup is running; waiting for $BASE/.lock"
	flock -w 1800 9 || die "timed out waiting for $BASE/.lock"
fi

export DEBIAN_FRONTEND=noninteractive
APT_OPTS=(-o DPkg::Lock::Timeout=600 -o APT::Get::Assume-Yes=true -qq)
UPDATED=0
apt_update() {
	[ "$UPDATED" = 1 ] && return 0
	UPDATED=1
	log "apt-get update"
	apt-get "${APT_OPTS[@]}" update >&2 || log "apt-get update failed; going on with the old lists"
}
apt_install() {
	log "apt-get install $*"
	apt-get "${APT_OPTS[@]}" install --no-install-recommends "$@" >/dev/null ||
		{ apt_update && apt-get "${APT_OPTS[@]}" install --no-install-recommends "$@" >/dev/null; }
}
missing_pkgs() {
	# prints the packages of "$@" that are not installed
	local p
	for p in "$@"; do
		dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed || echo "$p"
	done
}

# --------------------------------------------------------------- 1 packages
HOST_PKGS=(qemu-system-x86 rdma-core ibverbs-providers ibverbs-utils
	rdmacm-utils perftest dapl2-utils libibverbs-dev librdmacm-dev
	busybox-static iproute2 cpio kmod xz-utils gcc make
	tcpdump tshark)
mapfile -t need < <(missing_pkgs "${HOST_PKGS[@]}")
if [ "${#need[@]}" -gt 0 ]; then
	apt_install "${need[@]}" || die "apt-get install ${need[*]} failed"
fi

# ----------------------------------------------------------- kernel version
resolve_kver() {
	if [ -n "${RDMANET_VM_KVER:-}" ]; then
		KVER=$RDMANET_VM_KVER
		KPKG=linux-image-$KVER
		return 0
	fi
	local dep
	dep=$(apt-cache depends linux-image-amd64 2>/dev/null |
		awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
	[ -n "$dep" ] || return 1
	KVER=${dep#linux-image-}
	KVER=${KVER%-unsigned}
	KPKG=linux-image-$KVER
}
ready() { [ "$FORCE" != 1 ] && [ -e "$BASE/$KVER/ready-$ID" ] && [ -s "$BASE/$KVER/initramfs.cpio.gz" ]; }
publish() {
	printf '%s\n' "$KVER" >"$BASE/current.tmp"
	mv -f "$BASE/current.tmp" "$BASE/current"
}

KVER='' KPKG=''
resolve_kver || { apt_update; resolve_kver; } || die "cannot tell which kernel linux-image-amd64 depends on"
if ready; then
	publish
	log "ready: kernel $KVER, cache $BASE/$KVER"
	exit 0
fi
# Not built yet for this kernel: refresh the lists first, unless pinned, so
# that we build for the kernel the archive has now, not a stale one.
if [ -z "${RDMANET_VM_KVER:-}" ]; then
	apt_update
	resolve_kver || die "cannot tell which kernel linux-image-amd64 depends on"
	if ready; then
		publish
		log "ready: kernel $KVER, cache $BASE/$KVER"
		exit 0
	fi
fi

DIR=$BASE/$KVER
mkdir -p "$DIR"
cd "$DIR"
TMP=$(mktemp -d "$DIR/.tmp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# download PKG: apt-get download into $TMP (refreshing the lists once if the
# archive has moved on); prints the .deb's path
download() {
	local deb
	(cd "$TMP" && apt-get -qq download "$1" >/dev/null 2>&1) ||
		{ apt_update && (cd "$TMP" && apt-get -qq download "$1" >&2); } ||
		die "apt-get download $1 failed"
	deb=$(find "$TMP" -maxdepth 1 -name "${1}_*.deb" -print -quit)
	[ -n "$deb" ] || die "no .deb for $1 after apt-get download"
	printf '%s\n' "$deb"
}
stamp() { [ "$FORCE" != 1 ] && [ -e "$DIR/.stamp-$1" ]; }
done_() { touch "$DIR/.stamp-$1"; }
log "preparing kernel $KVER in $DIR"

# ------------------------------------------------------------ 2 kernel image
KDEBVER=
if ! stamp kernel; then
	log "apt-get download $KPKG"
	deb=$(download "$KPKG")
	dpkg-deb -f "$deb" Version >"$DIR/kernel-version"
	rm -rf "$DIR/kernel"
	mkdir -p "$TMP/kernel"
	log "unpacking $(basename "$deb") (boot/ and lib/modules/ only)"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$TMP/kernel" ./boot "./lib/modules/$KVER"
	mv "$TMP/kernel" "$DIR/kernel"
	rm -f "$deb"
	rm -f "$DIR"/.stamp-siw "$DIR/vmlinux"
	done_ kernel
fi
KDEBVER=$(cat "$DIR/kernel-version")
MODDIR=$DIR/kernel/lib/modules/$KVER
VMLINUZ=$DIR/kernel/boot/vmlinuz-$KVER
[ -s "$VMLINUZ" ] || die "$VMLINUZ missing"
for m in drivers/infiniband/sw/rxe/rdma_rxe.ko drivers/infiniband/core/ib_uverbs.ko \
	drivers/infiniband/core/rdma_ucm.ko fs/9p/9p.ko net/9p/9pnet_virtio.ko; do
	[ -e "$MODDIR/kernel/$m" ] || die "module $m missing from $KPKG"
done

# ------------------------------------------------------------------- 3 siw
if ! stamp siw; then
	if find "$MODDIR/kernel" -name 'siw.ko*' | grep -q .; then
		log "the kernel ships siw.ko"
	else
		SRCVER=$(echo "$KVER" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/') # 6.1
		HDRS=linux-headers-$KVER
		if [ -n "$(missing_pkgs "$HDRS")" ]; then
			apt_install "$HDRS" || die "apt-get install $HDRS failed"
		fi
		log "apt-get download linux-source-$SRCVER (only the siw sources are kept)"
		src=$(download "linux-source-$SRCVER")
		srcver=$(dpkg-deb -f "$src" Version)
		[ "$srcver" = "$KDEBVER" ] ||
			log "warning: linux-source-$SRCVER is $srcver, the kernel is $KDEBVER (siw.ko is built against the kernel's headers anyway)"
		dpkg-deb --fsys-tarfile "$src" |
			tar -x -O "./usr/src/linux-source-$SRCVER.tar.xz" |
			tar -xJ -C "$TMP" --wildcards "linux-source-$SRCVER/drivers/infiniband/sw/siw/*"
		rm -f "$src"
		rm -rf "$DIR/siw-build"
		mv "$TMP/linux-source-$SRCVER/drivers/infiniband/sw/siw" "$DIR/siw-build"
		log "building siw.ko against /usr/src/$HDRS"
		make -s -C "/usr/src/$HDRS" M="$DIR/siw-build" CONFIG_RDMA_SIW=m modules \
			-j"$(nproc)" >"$DIR/siw-build/build.log" 2>&1 ||
			{
				cat "$DIR/siw-build/build.log" >&2
				die "siw.ko build failed"
			}
		mkdir -p "$MODDIR/updates"
		cp "$DIR/siw-build/siw.ko" "$MODDIR/updates/siw.ko"
		# keep the module and the build log, not the objects and sources
		find "$DIR/siw-build" -type f ! -name siw.ko ! -name build.log -delete
	fi
	depmod -b "$DIR/kernel" "$KVER"
	done_ siw
fi
[ -e "$MODDIR/modules.dep" ] || depmod -b "$DIR/kernel" "$KVER"

# -------------------------------------------------------------- 4 vmlinux
# The uncompressed ELF vmlinux (CONFIG_PVH=y): qemu enters it directly,
# without SeaBIOS' real-mode setup and the in-guest xz decompression.
VMLINUX=$DIR/vmlinux
if [ ! -s "$VMLINUX" ] && grep -q '^CONFIG_PVH=y' "$DIR/kernel/boot/config-$KVER"; then
	off=$(grep -abo $'\xfd7zXZ\x00' "$VMLINUZ" | head -n 1 | cut -d: -f1 || true)
	if [ -n "$off" ]; then
		log "extracting vmlinux (PVH boot)"
		# (tail gets SIGPIPE when xz stops at the end of the stream)
		{ tail -c +$((off + 1)) "$VMLINUZ" | xz -dc --single-stream >"$TMP/vmlinux"; } 2>/dev/null || true
		if [ "$(head -c 4 "$TMP/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ]; then
			mv "$TMP/vmlinux" "$VMLINUX"
		else
			log "vmlinux extraction failed; run.sh boots the bzImage"
		fi
	fi
fi

# ------------------------------------------------------------ 5 initramfs
log "building the initramfs"
R=$TMP/initramfs
mkdir -p "$R"/{bin,dev,proc,sys,lower,upper,newroot,lib/modules}
cp /bin/busybox "$R/bin/busybox"
ln -s busybox "$R/bin/sh"
: >"$R/modules.list"
for m in virtio_pci 9pnet_virtio 9p overlay ib_uverbs rdma_ucm rdma_rxe siw dummy; do
	modprobe -d "$DIR/kernel" -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r ko; do
	b=$(basename "$ko")
	cp "$ko" "$R/lib/modules/$b"
	echo "$b" >>"$R/modules.list"
done
grep -qx siw.ko "$R/modules.list" || die "siw.ko did not make it into the initramfs"
install -m 0755 "$HERE/guest/init" "$R/init"
(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -1) >"$TMP/initramfs.cpio.gz"
mv -f "$TMP/initramfs.cpio.gz" "$DIR/initramfs.cpio.gz"

rm -f "$DIR"/ready-*
touch "$DIR/ready-$ID"
publish
log "ready: kernel $KVER ($KDEBVER), cache $DIR ($(du -sh "$DIR" | cut -f1))"
