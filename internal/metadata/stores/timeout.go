package stores

import "time"

// etcdOpenTimeout bounds connecting to etcd when the caller's context has no deadline.
const etcdOpenTimeout = 10 * time.Second
