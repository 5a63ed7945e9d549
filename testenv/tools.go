//go:build tools

// Package tools pins the binaries the harness builds so `go mod tidy` keeps them.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
