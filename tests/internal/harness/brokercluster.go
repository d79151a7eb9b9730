package harness

import (
	"fmt"
	"testing"
)

// BrokerCluster is one Meridian cluster of several broker processes sharing an etcd as their
// cluster-local store (docs/cluster.md): broker i listens on 127.0.0.i.
type BrokerCluster struct {
	Etcd    *Etcd
	Brokers []*Process
	base    Options
}

// StartBrokerCluster starts an embedded etcd and n `meridian standalone --metadata-store` processes
// (broker i is "b<i>" on 127.0.0.i, free ports), each ready before the next starts. base sets the
// options every broker shares (its addresses, data dir and ExtraArgs are filled per broker; the
// given ExtraArgs are kept).
func StartBrokerCluster(t testing.TB, n int, base Options) *BrokerCluster {
	t.Helper()
	etcd := StartEtcd(t)
	c := &BrokerCluster{Etcd: etcd}
	for i := 1; i <= n; i++ {
		o := base
		o.BrokerAddr = fmt.Sprintf("127.0.0.%d:%d", i, FreePort(t))
		o.WebAddr = fmt.Sprintf("127.0.0.%d:%d", i, FreePort(t))
		o.ExtraArgs = append(clusterArgs(etcd, i), base.ExtraArgs...)
		c.Brokers = append(c.Brokers, StartStandalone(t, o))
	}
	c.base = base
	return c
}

// clusterArgs are broker i's arguments. Bundles stay put unless a test moves them: no load
// shedding, and no hand-over when a broker stops (the cleanup stops every broker); a test turns
// either on in its ExtraArgs, which come after these.
func clusterArgs(etcd *Etcd, i int) []string {
	return []string{"--metadata-store", etcd.ConfigStoreURL("cluster"), "--broker-id", fmt.Sprintf("b%d", i),
		"--load-shedding=false", "--handover-timeout=0"}
}

// Add starts one more broker of the cluster (the next 127.0.0.i) with the cluster's options and
// extra arguments after them.
func (c *BrokerCluster) Add(t testing.TB, extra ...string) *Process {
	t.Helper()
	i := len(c.Brokers) + 1
	o := c.base
	o.BrokerAddr = fmt.Sprintf("127.0.0.%d:%d", i, FreePort(t))
	o.WebAddr = fmt.Sprintf("127.0.0.%d:%d", i, FreePort(t))
	o.ExtraArgs = append(append(clusterArgs(c.Etcd, i), c.base.ExtraArgs...), extra...)
	p := StartStandalone(t, o)
	c.Brokers = append(c.Brokers, p)
	return p
}

// ServiceURL is a multi-host service URL naming every broker.
func (c *BrokerCluster) ServiceURL() string {
	u := "pulsar://"
	for i, b := range c.Brokers {
		if i > 0 {
			u += ","
		}
		u += b.opts.BrokerAddr
	}
	return u
}
