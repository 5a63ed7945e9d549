// Command etcd is the upstream etcd server, built here because Debian's etcd is
// older than what kube-apiserver 1.36 accepts.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
