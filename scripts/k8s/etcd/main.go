// etcd, built from the go.etcd.io/etcd/server/v3 Go module (see scripts/cluster build).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
