module rdmanet-vm-selftest

go 1.21
