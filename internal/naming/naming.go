// Package naming parses, validates and formats Pulsar's names: clusters, tenants, namespaces and
// topics (including partitions), following Pulsar's rules so that every name a Pulsar client or tool
// sends means the same thing here.
//
// Accepted topic forms:
//
//	my-topic                              -> persistent://public/default/my-topic
//	tenant/namespace/my-topic             -> persistent://tenant/namespace/my-topic
//	persistent://tenant/namespace/my-topic
//	non-persistent://tenant/namespace/my-topic
//
// A local name ending in "-partition-<N>" names partition N of a partitioned topic.
// Pulsar's pre-2.0 names with a cluster segment (tenant/cluster/namespace/topic) are refused.
package naming

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Domain is a topic's persistence domain.
type Domain string

const (
	Persistent    Domain = "persistent"
	NonPersistent Domain = "non-persistent"
)

// PartitionSuffix separates a partitioned topic's name from the partition index.
const PartitionSuffix = "-partition-"

// Defaults used for short topic names, as Pulsar does.
const (
	DefaultTenant    = "public"
	DefaultNamespace = "default"
)

// ErrInvalidName is wrapped by every parse and validation error of this package.
var ErrInvalidName = errors.New("invalid name")

// maxNameLength bounds every segment so that hostile names cannot blow up keys or file names.
const maxNameLength = 512

// MaxTopicNameBytes bounds a whole topic name ("domain://tenant/namespace/local", partition suffix
// included).
const MaxTopicNameBytes = 1024

// NamespaceName is "tenant/namespace".
type NamespaceName struct {
	Tenant    string
	Namespace string
}

// ParseNamespace parses "tenant/namespace".
func ParseNamespace(s string) (NamespaceName, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 2 {
		return NamespaceName{}, fmt.Errorf("%w: namespace %q: want tenant/namespace", ErrInvalidName, s)
	}
	ns := NamespaceName{Tenant: parts[0], Namespace: parts[1]}
	if err := ns.Validate(); err != nil {
		return NamespaceName{}, err
	}
	return ns, nil
}

// Validate checks both segments.
func (n NamespaceName) Validate() error {
	if err := ValidateTenant(n.Tenant); err != nil {
		return err
	}
	if err := validateEntity("namespace", n.Namespace); err != nil {
		return err
	}
	return nil
}

// String returns "tenant/namespace".
func (n NamespaceName) String() string { return n.Tenant + "/" + n.Namespace }

// TopicName is a fully qualified topic or partition name.
type TopicName struct {
	Domain    Domain
	Tenant    string
	Namespace string
	// Local is the name within the namespace, including any "-partition-N" suffix.
	Local string
	// PartitionIndex is N for "…-partition-N", or -1 when the name is not a partition.
	PartitionIndex int
}

// ParseTopic parses any of the accepted topic forms (see the package doc).
func ParseTopic(s string) (TopicName, error) {
	if s == "" {
		return TopicName{}, fmt.Errorf("%w: empty topic name", ErrInvalidName)
	}
	if len(s) > 4*maxNameLength {
		return TopicName{}, fmt.Errorf("%w: topic name longer than %d bytes", ErrInvalidName, 4*maxNameLength)
	}
	domain := Persistent
	rest := s
	if i := strings.Index(s, "://"); i >= 0 {
		switch Domain(s[:i]) {
		case Persistent, NonPersistent:
			domain = Domain(s[:i])
		default:
			return TopicName{}, fmt.Errorf("%w: topic %q: unknown domain %q", ErrInvalidName, s, s[:i])
		}
		rest = s[i+3:]
		if strings.Count(rest, "/") != 2 {
			return TopicName{}, fmt.Errorf("%w: topic %q: want %s://tenant/namespace/topic", ErrInvalidName, s, domain)
		}
	} else {
		switch strings.Count(s, "/") {
		case 0:
			rest = DefaultTenant + "/" + DefaultNamespace + "/" + s
		case 2:
		default:
			return TopicName{}, fmt.Errorf("%w: topic %q: want topic, tenant/namespace/topic or domain://tenant/namespace/topic", ErrInvalidName, s)
		}
	}
	parts := strings.SplitN(rest, "/", 3)
	t := TopicName{Domain: domain, Tenant: parts[0], Namespace: parts[1], Local: parts[2], PartitionIndex: -1}
	if err := t.NamespaceName().Validate(); err != nil {
		return TopicName{}, fmt.Errorf("topic %q: %w", s, err)
	}
	if err := validateLocal(t.Local); err != nil {
		return TopicName{}, fmt.Errorf("topic %q: %w", s, err)
	}
	if n := len(t.Domain) + len("://") + len(t.Tenant) + 1 + len(t.Namespace) + 1 + len(t.Local); n > MaxTopicNameBytes {
		return TopicName{}, fmt.Errorf("%w: topic name of %d bytes exceeds the limit of %d bytes", ErrInvalidName, n, MaxTopicNameBytes)
	}
	t.PartitionIndex = partitionIndexOf(t.Local)
	return t, nil
}

// NewTopic builds a persistent topic name in a namespace and validates it.
func NewTopic(domain Domain, ns NamespaceName, local string) (TopicName, error) {
	return ParseTopic(string(domain) + "://" + ns.String() + "/" + local)
}

// partitionIndexOf returns N for "name-partition-N" with a canonical decimal N, else -1.
func partitionIndexOf(local string) int {
	i := strings.LastIndex(local, PartitionSuffix)
	if i <= 0 {
		return -1
	}
	digits := local[i+len(PartitionSuffix):]
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || strconv.Itoa(n) != digits {
		return -1
	}
	return n
}

// String returns the full name, e.g. "persistent://public/default/t-partition-0".
func (t TopicName) String() string {
	return string(t.Domain) + "://" + t.Tenant + "/" + t.Namespace + "/" + t.Local
}

// NamespaceName returns the topic's namespace.
func (t TopicName) NamespaceName() NamespaceName {
	return NamespaceName{Tenant: t.Tenant, Namespace: t.Namespace}
}

// IsPersistent reports whether the topic is stored.
func (t TopicName) IsPersistent() bool { return t.Domain == Persistent }

// IsPartition reports whether the name is one partition of a partitioned topic.
func (t TopicName) IsPartition() bool { return t.PartitionIndex >= 0 }

// Base returns the partitioned topic a partition belongs to, or t itself when it is not a partition.
func (t TopicName) Base() TopicName {
	if !t.IsPartition() {
		return t
	}
	b := t
	b.Local = t.Local[:strings.LastIndex(t.Local, PartitionSuffix)]
	b.PartitionIndex = -1
	return b
}

// Partition returns partition i of t (t must not itself be a partition).
func (t TopicName) Partition(i int) TopicName {
	p := t.Base()
	p.Local = p.Local + PartitionSuffix + strconv.Itoa(i)
	p.PartitionIndex = i
	return p
}

// StorageName is the name of the topic's ledger: "tenant/namespace/domain/local".
// Storage treats it as opaque; it is stable across releases because data is keyed by it.
func (t TopicName) StorageName() string {
	return t.Tenant + "/" + t.Namespace + "/" + string(t.Domain) + "/" + t.Local
}

// RESTPath is the topic's path segment in the admin API: "domain/tenant/namespace/local".
func (t TopicName) RESTPath() string {
	return string(t.Domain) + "/" + t.Tenant + "/" + t.Namespace + "/" + t.Local
}

// ValidateTenant checks a tenant name.
func ValidateTenant(s string) error { return validateEntity("tenant", s) }

// ValidateCluster checks a cluster name.
func ValidateCluster(s string) error { return validateEntity("cluster", s) }

// validateEntity applies Pulsar's rule for tenants, namespaces and clusters: non-empty, made of
// letters, digits and - _ = : .
func validateEntity(kind, s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty %s name", ErrInvalidName, kind)
	}
	if len(s) > maxNameLength {
		return fmt.Errorf("%w: %s name longer than %d bytes", ErrInvalidName, kind, maxNameLength)
	}
	for _, r := range s {
		if !isWordRune(r) && !strings.ContainsRune("-=:.", r) {
			return fmt.Errorf("%w: %s name %q contains %q", ErrInvalidName, kind, s, r)
		}
	}
	return nil
}

// validateLocal checks a topic's local name: non-empty, no '/', no white space or control
// characters (a name with a space is a typing mistake more often than a name).
func validateLocal(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty topic local name", ErrInvalidName)
	}
	if len(s) > maxNameLength {
		return fmt.Errorf("%w: topic local name longer than %d bytes", ErrInvalidName, maxNameLength)
	}
	for _, r := range s {
		if r == '/' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%w: topic local name %q contains %q", ErrInvalidName, s, r)
		}
	}
	return nil
}

func isWordRune(r rune) bool {
	return r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}
