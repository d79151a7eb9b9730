package server

import (
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// This file holds the parts of GET_TOPICS_OF_NAMESPACE that regex consumers of the Java and C++
// clients use (pulsar-client-go sends neither): the topics_pattern filter and the topics_hash
// shortcut, both as Pulsar computes them (TopicList.filterTopics, TopicList.calculateHash), and the
// listing of non-persistent topics for the NON_PERSISTENT and ALL modes.

// maxTopicsPatternLength bounds the regular expressions a client may send (Pulsar:
// subscriptionPatternMaxLength, default 50; we are more generous since RE2 cannot blow up).
const maxTopicsPatternLength = 1024

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// topicsHash is Pulsar's hash of a topic list: CRC32C over the UTF-8 names in sorted order,
// rendered as Guava's HashCode.toString (the 4 bytes little-endian, lower-case hex).
func topicsHash(names []string) string {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	h := crc32.New(castagnoli)
	for _, n := range sorted {
		_, _ = h.Write([]byte(n))
	}
	sum := h.Sum32()
	return hex.EncodeToString([]byte{byte(sum), byte(sum >> 8), byte(sum >> 16), byte(sum >> 24)})
}

// stripDomain removes "persistent://" or "non-persistent://" from a name or pattern.
func stripDomain(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		return s[i+3:]
	}
	return s
}

// filterTopics keeps the names whose partitioned-topic name (partition suffix removed), without
// the domain, matches pattern entirely (Java's Matcher.matches), as Pulsar filters for regex
// consumers. The pattern is compiled as RE2, which accepts the patterns clients send in practice.
func filterTopics(names []string, pattern string) ([]string, error) {
	if len(pattern) > maxTopicsPatternLength {
		return nil, fmt.Errorf("topics pattern of %d characters exceeds %d", len(pattern), maxTopicsPatternLength)
	}
	re, err := regexp.Compile(`^(?:` + stripDomain(pattern) + `)$`)
	if err != nil {
		return nil, fmt.Errorf("topics pattern %q: %w", pattern, err)
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		base := n
		if t, err := naming.ParseTopic(n); err == nil {
			base = t.Base().String()
		}
		if re.MatchString(stripDomain(base)) {
			out = append(out, n)
		}
	}
	return out, nil
}

// topicsOfNamespaceResponse builds the answer to cmd from the namespace's topic names: filtered by
// topics_pattern when the client sent one (filtered = true), and empty with changed = false when
// the client's topics_hash equals the hash of the (filtered) list.
func topicsOfNamespaceResponse(cmd *pulsarpb.CommandGetTopicsOfNamespace, names []string) (*pulsarpb.CommandGetTopicsOfNamespaceResponse, error) {
	resp := &pulsarpb.CommandGetTopicsOfNamespaceResponse{
		RequestId: proto.Uint64(cmd.GetRequestId()),
		Filtered:  proto.Bool(false),
		Changed:   proto.Bool(true),
	}
	if p := cmd.GetTopicsPattern(); p != "" {
		filtered, err := filterTopics(names, p)
		if err != nil {
			return nil, err
		}
		names = filtered
		resp.Filtered = proto.Bool(true)
	}
	hash := topicsHash(names)
	resp.TopicsHash = proto.String(hash)
	if cmd.TopicsHash != nil && cmd.GetTopicsHash() == hash {
		resp.Changed = proto.Bool(false)
		return resp, nil
	}
	resp.Topics = names
	return resp, nil
}

// nonPersistentTopics lists the namespace's non-persistent topics: those loaded on this broker
// (they exist only in memory), partitions individually, sorted.
func (c *conn) nonPersistentTopics(ns naming.NamespaceName) []string {
	var out []string
	for _, t := range c.s.opts.Broker.LoadedTopics() {
		n := t.Name()
		if !n.IsPersistent() && n.NamespaceName() == ns {
			out = append(out, n.String())
		}
	}
	slices.Sort(out)
	return out
}
