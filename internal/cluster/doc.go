// Package cluster lets several brokers serve one cluster: namespace bundles (bundles.go), the
// broker registry on the cluster-local metadata store (registry.go), bundle ownership records with
// compare-and-swap and epochs (ownership.go), the lookup decision (decide.go) and cluster-unique
// ledger id blocks (ledgerids.go). The decision logic is pure; Coordinator (coordinator.go) is the
// edge that reads and writes the store and keeps the views the decisions take. docs/cluster.md
// describes the model for users; docs/design.md places it in the architecture.
package cluster
