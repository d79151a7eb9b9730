package cluster

import "strings"

// Keys in the cluster-local metadata store (docs/metadata.md, "Cluster-local keys").
const (
	brokersPrefix = "/local/brokers/"   // one ephemeral key per live broker: BrokerInfo
	bundlesPrefix = "/local/bundles/"   // one record per assigned bundle: Ownership
	ledgerIDsKey  = "/local/ledger-ids" // the next unallocated ledger id block
)

func brokerKey(id string) string    { return brokersPrefix + id }
func bundleKey(b Bundle) string     { return bundlesPrefix + b.Namespace + "/" + b.Range.String() }
func brokerIDOfKey(k string) string { return strings.TrimPrefix(k, brokersPrefix) }

// bundleOfKey parses a bundle record key back into its bundle.
func bundleOfKey(k string) (Bundle, bool) {
	rest, ok := strings.CutPrefix(k, bundlesPrefix)
	if !ok {
		return Bundle{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return Bundle{}, false
	}
	r, err := ParseRange(rest[i+1:])
	if err != nil {
		return Bundle{}, false
	}
	return Bundle{Namespace: rest[:i], Range: r}, true
}
