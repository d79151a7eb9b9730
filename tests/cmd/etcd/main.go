// Command etcd is the etcd server at the version this module requires (go.etcd.io/etcd/server/v3),
// with etcd's own command line. It is a Go tool of the tests module (`go tool etcd`); the root
// module's tests start it through etcdtest.Start, so the etcd server is a dependency of this module
// only, not of Meridian's.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
