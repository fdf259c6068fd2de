#!/bin/bash
# Stage 2: PID 1 after switch_root, the host's bash on the 9p+overlay root.
# run.sh copies this file onto the control share (/run/vmctl) for each run.
#
# Creates one dummy netdev per RDMA device with a documentation-range
# address (rdma_cm cannot use rxe/siw on lo), adds rxe0 and siw0, mounts the
# host's cwd read-write at the same path, runs the command with its output on
# /dev/ttyS1 (run.sh's stdout), writes its exit status to /run/vmctl/rc and
# resets the VM (qemu runs with -no-reboot, so it exits).
# Not set -e: PID 1 must always reach finish().
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CTL=/run/vmctl
# shellcheck source=/dev/null
. "$CTL/env"

note() { echo "vm: $*" >/dev/console; }
finish() {
	cat /proc/uptime >"$CTL/uptime_end"
	echo "${1:-255}" >"$CTL/rc"
	sync
	# busybox-static's reboot -f is a plain reboot(2); sysrq the fallback.
	# (A kernel panic resets too: panic=-1.)
	/bin/busybox reboot -f 2>/dev/null
	echo b >/proc/sysrq-trigger
	sleep 10
}
trap 'finish 255' EXIT

mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t mqueue mqueue /dev/mqueue 2>/dev/null || true
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
[ -e /dev/stdin ] || ln -s /proc/self/fd/0 /dev/stdin
[ -e /dev/stdout ] || ln -s /proc/self/fd/1 /dev/stdout
[ -e /dev/stderr ] || ln -s /proc/self/fd/2 /dev/stderr
hostname rdmavm
# the command's output channel: second serial port, raw (no \n -> \r\n)
stty -F /dev/ttyS1 raw -echo 115200 2>/dev/null || true

# kernel modules: the cached Debian tree (+ siw.ko) at the usual place
mkdir -p "/lib/modules/$VM_KVER" 2>/dev/null || true
mount --bind "$VM_MODDIR" "/lib/modules/$VM_KVER"

ip link set lo up

rdma_setup() {
	# stage 1 has insmod'ed all of these already; this is a cheap check
	modprobe -a ib_uverbs rdma_ucm rdma_rxe dummy || return 1
	modprobe siw || note "siw.ko not loadable"
	# One dummy netdev per device.  rxe short-circuits traffic to its own
	# address and siw's TCP runs over lo, so nothing is sent anywhere (and
	# the guest has no NIC anyway).  On lo, rdma_cm cannot resolve to either
	# device; with both on one netdev rdma_cm binds the address to rxe.
	add_dev rxe0 rxe "$VM_RXE_IF" "$VM_RXE_ADDR"
	add_dev siw0 siw "$VM_SIW_IF" "$VM_SIW_ADDR"
}
# add_dev NAME TYPE NETDEV ADDR
add_dev() {
	if ! { ip link add "$3" type dummy &&
		ip link set "$3" mtu "$VM_MTU" up &&
		ip addr add "$4/24" dev "$3" &&
		rdma link add "$1" type "$2" netdev "$3"; }; then
		note "$1 setup failed"
	fi
}
if [ "$VM_RDMA" = 1 ]; then
	rdma_setup || note "RDMA setup failed"
fi

# the host's cwd, read-write, at the same path
if [ -n "$VM_CWD" ] && [ "$VM_CWD" != / ]; then
	mkdir -p "$VM_CWD" 2>/dev/null || true
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=mmap hostcwd "$VM_CWD" ||
		note "cannot mount hostcwd at $VM_CWD"
fi

# the command's environment: the host's (hostenv) plus the RDMA variables
# shellcheck source=/dev/null
. "$CTL/hostenv"
export RDMA_RXE_ADDR=$VM_RXE_ADDR RDMA_SIW_ADDR=$VM_SIW_ADDR
export RDMA_RXE_IF=$VM_RXE_IF RDMA_SIW_IF=$VM_SIW_IF
export IN_RDMA_VM=1
ulimit -l unlimited
ulimit -n 65536 2>/dev/null || true
cd "$VM_CWD" 2>/dev/null || cd /

cat /proc/uptime >"$CTL/uptime_ready"
: >"$CTL/t_ready"
bash "$CTL/cmd.sh" </dev/null >/dev/ttyS1 2>&1
rc=$?
trap - EXIT
finish "$rc"
