#!/bin/bash
# run.sh - run a command inside a throw-away QEMU guest that boots Debian
# 12's own kernel with soft-RoCE (rxe0) and soft-iWARP (siw0) devices up,
# and runs the HOST's userland: the host's / is shared read-only over 9p
# with a tmpfs overlay on top (writes are lost at exit), the current
# directory read-write at the same path.  The guest has no network device.
#
#   run.sh 'shell command string'     # one argument: run with bash
#   run.sh prog arg1 'arg 2' ...      # several: exactly that argv
#   run.sh -- prog                    # argv form even with one word
#   go test -p 1 -exec /abs/path/test/vm/run.sh -tags verbs ./pkg
#
# In the guest the command runs as root, with the host's environment,
# `ulimit -l unlimited`, in the same cwd, and with
#   RDMA_RXE_ADDR=192.0.2.1    RDMA_RXE_IF=rxe_if0   (rxe0)
#   RDMA_SIW_ADDR=198.51.100.1 RDMA_SIW_IF=siw_if0   (siw0)
#   IN_RDMA_VM=1
# Its stdout and stderr arrive on stdout.  Exit status: the command's; 124
# on timeout (qemu is killed); 255 if the VM died before reporting a status
# (the console tail goes to stderr).
#
# Knobs: RDMANET_VM_TIMEOUT=900 (s)  RDMANET_VM_SMP=2  RDMANET_VM_MEM=2G
#   RDMANET_VM_ACCEL=auto|kvm|tcg  RDMANET_VM_MTU=1500  RDMANET_VM_RDMA=0
#   (no devices)  RDMANET_VM_LOG=file (keep the console log)
#   RDMANET_VM_VERBOSE=1 (console log to stderr)  RDMANET_VM_TIMING=1
#   RDMANET_VM_APPEND="kernel args"  RDMANET_VM_CACHE, RDMANET_VM_KVER (see
#   setup.sh).  Needs root.  Runs setup.sh first when the cache is not ready.
set -euo pipefail

# One compound command: bash parses it whole before running it, so editing
# this file while a VM is up cannot derail the running instance.
{
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

if [ $# -eq 0 ]; then
	echo "usage: $0 'command string' | $0 prog args... | $0 -- prog [args...]" >&2
	exit 2
fi
if [ "$(id -u)" != 0 ]; then
	echo "run.sh: needs root (qemu 9p passthrough of /)" >&2
	exit 255
fi

# ------------------------------------------------------------------ cache
BASE=$(vm_cache_base)
ID=$(vm_setup_id "$HERE")
kver() { printf '%s\n' "${RDMANET_VM_KVER:-$(cat "$BASE/current" 2>/dev/null || true)}"; }
need_setup() {
	local k
	k=$(kver)
	[ -n "$k" ] && [ -e "$BASE/$k/ready-$ID" ] && vm_host_ready && return 1
	return 0
}
if need_setup; then
	"$HERE/setup.sh" >&2 || {
		echo "run.sh: setup failed" >&2
		exit 255
	}
fi
KVER=$(kver)
DIR=$BASE/$KVER
KERNEL=$DIR/kernel/boot/vmlinuz-$KVER
[ -s "$DIR/vmlinux" ] && KERNEL=$DIR/vmlinux
INITRD=$DIR/initramfs.cpio.gz
MODDIR=$DIR/kernel/lib/modules/$KVER
TIMEOUT=${RDMANET_VM_TIMEOUT:-900}

# ------------------------------------------------------------ accelerator
# KVM only with hardware KVM (kvm_intel/kvm_amd).  A /dev/kvm from kvm_pvm
# (nested virtualisation without VT-x) runs only PVM-enlightened kernels;
# Debian's crawls and then fails there, so that case uses TCG.
ACCEL=${RDMANET_VM_ACCEL:-auto}
if [ "$ACCEL" = auto ]; then
	ACCEL=tcg
	if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
		ACCEL=kvm
	fi
fi
case $ACCEL in
kvm) ACCEL_OPTS=(-enable-kvm -cpu host -machine 'pc,accel=kvm') ;;
tcg) ACCEL_OPTS=(-accel 'tcg,thread=multi,tb-size=256' -cpu max -machine pc) ;;
*)
	echo "run.sh: RDMANET_VM_ACCEL must be auto, kvm or tcg" >&2
	exit 2
	;;
esac

# ------------------------------------------------------------ control dir
T0=$(date +%s.%N)
CTL=$(mktemp -d "${TMPDIR:-/tmp}/rdmanet-vm.XXXXXX")
QPID='' PPOLL=''
# shellcheck disable=SC2317 # (called by the EXIT trap)
cleanup() {
	if [ -n "$PPOLL" ]; then kill "$PPOLL" 2>/dev/null || true; fi
	if [ -n "$QPID" ]; then
		# the timeout(1) process: it forwards the signal to qemu
		kill "$QPID" 2>/dev/null || true
		wait "$QPID" 2>/dev/null || true
	fi
	if [ -n "${RDMANET_VM_LOG:-}" ] && [ -e "$CTL/console.log" ]; then
		cp "$CTL/console.log" "$RDMANET_VM_LOG" || true
	fi
	rm -rf "$CTL"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

CWD=$(pwd -P)
if [ "$1" = -- ]; then
	shift
	[ $# -gt 0 ] || {
		echo "run.sh: nothing to run after --" >&2
		exit 2
	}
	{
		printf 'exec'
		printf ' %q' "$@"
		printf '\n'
	} >"$CTL/cmd.sh"
elif [ $# -eq 1 ]; then
	printf '%s\n' "$1" >"$CTL/cmd.sh"
else
	{
		printf 'exec'
		printf ' %q' "$@"
		printf '\n'
	} >"$CTL/cmd.sh"
fi

# the host environment, minus what must not cross over
while IFS= read -r -d '' kv; do
	k=${kv%%=*}
	v=${kv#*=}
	[[ $k =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
	case $k in
	PWD | OLDPWD | SHLVL | _ | HOSTNAME | TERM | TERMCAP | COLUMNS | LINES | SSH_* | DISPLAY | \
		XDG_RUNTIME_DIR | DBUS_* | TMUX* | BASH_FUNC_* | IN_RDMA_VM | RDMA_RXE_* | RDMA_SIW_*) continue ;;
	esac
	printf 'export %s=%q\n' "$k" "$v"
done < <(env -0) >"$CTL/hostenv"
printf 'export TERM=dumb\n' >>"$CTL/hostenv"

{
	printf 'VM_CWD=%q\n' "$CWD"
	printf 'VM_KVER=%q\n' "$KVER"
	printf 'VM_MODDIR=%q\n' "$MODDIR"
	printf 'VM_RDMA=%q\n' "${RDMANET_VM_RDMA:-1}"
	printf 'VM_MTU=%q\n' "${RDMANET_VM_MTU:-1500}"
	# documentation ranges (RFC 5737), on guest-only dummy netdevs
	printf 'VM_RXE_IF=rxe_if0\nVM_RXE_ADDR=192.0.2.1\n'
	printf 'VM_SIW_IF=siw_if0\nVM_SIW_ADDR=198.51.100.1\n'
} >"$CTL/env"
cp "$HERE/guest/stage2.sh" "$CTL/stage2.sh"

VIRTFS_CWD=()
if [ "$CWD" != / ]; then
	# (qemu option syntax: a comma inside a value is written ",,")
	VIRTFS_CWD=(-virtfs "local,path=${CWD//,/,,},mount_tag=hostcwd,security_model=passthrough,multidevs=remap")
fi

# ------------------------------------------------------------------- boot
# -nodefaults and no -netdev: the guest has no NIC; RDMA traffic stays in
# the guest kernel.  timeout(1) is the watchdog (124); it forwards TERM to
# qemu and KILLs it 10 s later.
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 \
	"${ACCEL_OPTS[@]}" \
	-smp "${RDMANET_VM_SMP:-2}" -m "${RDMANET_VM_MEM:-2G}" \
	-nodefaults -no-user-config -display none -no-reboot \
	-kernel "$KERNEL" -initrd "$INITRD" \
	-append "console=ttyS0 quiet loglevel=4 panic=-1 oops=panic mitigations=off tsc=reliable ${RDMANET_VM_APPEND:-}" \
	-serial "file:$CTL/console.log" \
	-chardev stdio,id=out,signal=off -serial chardev:out \
	-virtfs "local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap" \
	-virtfs "local,path=$CTL,mount_tag=vmctl,security_model=passthrough" \
	"${VIRTFS_CWD[@]}" \
	</dev/null &
QPID=$!
if [ "${RDMANET_VM_TIMING:-0}" = 1 ]; then
	# host-side clock for "guest ready" (the guest's clock comes from the
	# RTC, 1 s granularity under TCG): poll for the marker file
	(
		while [ ! -e "$CTL/t_ready" ] && kill -0 "$QPID" 2>/dev/null; do sleep 0.05; done
		date +%s.%N >"$CTL/host_t_ready"
	) </dev/null >/dev/null 2>&1 &
	PPOLL=$!
fi
qrc=0
wait "$QPID" || qrc=$?
QPID=
T1=$(date +%s.%N)
if [ -n "$PPOLL" ]; then
	kill "$PPOLL" 2>/dev/null || true
	wait "$PPOLL" 2>/dev/null || true
	PPOLL=
fi

# ----------------------------------------------------------------- result
if [ -e "$CTL/rc" ]; then
	rc=$(cat "$CTL/rc")
elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
	echo "run.sh: timeout after ${TIMEOUT}s, qemu killed" >&2
	rc=124
else
	rc=255
	# A kernel report (oops=panic makes any oops end the guest) is shown
	# from its first line: the tail alone holds only the end of its call
	# trace, not what failed where.
	oops=$(grep -n -m1 -E 'BUG:|Oops|general protection fault|kernel BUG at|Kernel panic|WARNING: CPU' "$CTL/console.log" 2>/dev/null | cut -d: -f1 || true)
	if [ -n "$oops" ]; then
		echo "run.sh: the guest's kernel failed; its report (console lines $oops-$((oops + 59))):" >&2
		sed -n "${oops},$((oops + 59))p" "$CTL/console.log" >&2 || true
	fi
	echo "run.sh: the guest did not report an exit status (qemu exit $qrc); console log tail:" >&2
	tail -n 40 "$CTL/console.log" >&2 || true
fi
if [ -e "$CTL/stage1-error" ]; then cat "$CTL/stage1-error" >&2; fi
if [ "${RDMANET_VM_VERBOSE:-0}" = 1 ]; then
	echo "----- guest console -----" >&2
	cat "$CTL/console.log" >&2 || true
fi
if [ "${RDMANET_VM_TIMING:-0}" = 1 ]; then
	ready=$(cat "$CTL/host_t_ready" 2>/dev/null || echo "$T0")
	up=$(cut -d' ' -f1 "$CTL/uptime_ready" 2>/dev/null || echo 0)
	upend=$(cut -d' ' -f1 "$CTL/uptime_end" 2>/dev/null || echo 0)
	awk -v t0="$T0" -v r="$ready" -v t1="$T1" -v up="$up" -v upend="$upend" -v accel="$ACCEL" 'BEGIN {
		cmd = (upend > 0 && up > 0) ? sprintf("%.2fs", upend - up) : "n/a"
		printf "run.sh timing: qemu start -> guest ready %.2fs (kernel uptime %.2fs), command %s, total %.2fs (accel %s)\n",
			r - t0, up, cmd, t1 - t0, accel }' >&2
fi
[[ $rc =~ ^[0-9]+$ ]] || rc=255
exit "$rc"
}
