# shellcheck shell=bash
# lib.sh - definitions shared by run.sh, setup.sh and suite.sh (sourced, not
# run).  Everything the harness needs lives in this directory or in the
# cache; nothing here depends on the checkout's location.

# vm_cache_base: the directory that holds one subdirectory per guest kernel
# version.  Outside the checkout on purpose (CI clones afresh every run).
vm_cache_base() {
	local home=${HOME:-}
	[ -n "$home" ] || home=$(getent passwd "$(id -u)" | cut -d: -f6)
	printf '%s\n' "${RDMANET_VM_CACHE:-${XDG_CACHE_HOME:-${home:-/root}/.cache}/rdmanet-vm}"
}

# vm_setup_id HERE: a short hash of the files whose content ends up in the
# cache (setup.sh builds it, guest/init is inside the initramfs).  A cache
# built by another version of them is rebuilt (only the parts that depend
# on them; the kernel download and siw.ko are kept).
vm_setup_id() {
	cat "$1/setup.sh" "$1/guest/init" | sha256sum | cut -c1-12
}

# vm_host_ready: the host commands the guest needs (it runs the host's
# userland over 9p) are present.
vm_host_ready() {
	local c
	for c in qemu-system-x86_64 rdma ip ss rping ibv_devices modprobe timeout flock; do
		command -v "$c" >/dev/null 2>&1 || return 1
	done
}
