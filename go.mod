module github.com/rdmanet/rdmanet

go 1.26.0

require (
	github.com/libp2p/go-reuseport v0.4.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
