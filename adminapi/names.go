package adminapi

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
)

// ErrInvalidName is wrapped by every error about the shape or the characters of a name given to
// this package, so callers can tell a mistyped name from a failed request.
var ErrInvalidName = errors.New("invalid name")

// TopicRESTPath turns a topic name in any of Pulsar's forms ("t", "tenant/ns/t",
// "persistent://tenant/ns/t", "non-persistent://tenant/ns/t") into the admin path segment
// "persistent/tenant/ns/t", with the local name path-escaped. It checks the shape and the
// characters the broker accepts (CheckEntityName for tenant and namespace; no white space or
// control characters in the local name).
func TopicRESTPath(topic string) (string, error) {
	domain := "persistent"
	rest := topic
	if i := strings.Index(topic, "://"); i >= 0 {
		domain = topic[:i]
		if domain != "persistent" && domain != "non-persistent" {
			return "", fmt.Errorf("%w: topic %q: unknown domain %q (want persistent or non-persistent)", ErrInvalidName, topic, domain)
		}
		rest = topic[i+3:]
	} else if !strings.Contains(topic, "/") {
		rest = "public/default/" + topic
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" || strings.Contains(parts[2], "/") {
		return "", fmt.Errorf("%w: topic %q: want [persistent://]tenant/namespace/topic", ErrInvalidName, topic)
	}
	if err := checkEntity("tenant", parts[0]); err != nil {
		return "", fmt.Errorf("topic %q: %w", topic, err)
	}
	if err := checkEntity("namespace", parts[1]); err != nil {
		return "", fmt.Errorf("topic %q: %w", topic, err)
	}
	for _, r := range parts[2] {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return "", fmt.Errorf("%w: topic %q: the topic name contains %q (no white space or control characters)", ErrInvalidName, topic, r)
		}
	}
	return domain + "/" + url.PathEscape(parts[0]) + "/" + url.PathEscape(parts[1]) + "/" + url.PathEscape(parts[2]), nil
}

// CheckEntityName applies Pulsar's rule for tenant, namespace and cluster names: non-empty, made
// of letters, digits and - _ = : . only.
func CheckEntityName(kind, name string) error { return checkEntity(kind, name) }

func checkEntity(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s name", ErrInvalidName, kind)
	}
	for _, r := range name {
		if !(r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || strings.ContainsRune("-=:.", r)) {
			return fmt.Errorf("%w: %s name %q contains %q (allowed: letters, digits and - _ = : .)", ErrInvalidName, kind, name, r)
		}
	}
	return nil
}

// FullTopicName returns the fully qualified form of topic ("persistent://tenant/ns/t").
func FullTopicName(topic string) (string, error) {
	p, err := TopicRESTPath(topic)
	if err != nil {
		return "", err
	}
	parts := strings.SplitN(p, "/", 2)
	u, err := url.PathUnescape(parts[1])
	if err != nil {
		return "", err
	}
	return parts[0] + "://" + u, nil
}

// NamespacePath checks "tenant/namespace" and returns it path-escaped.
func NamespacePath(ns string) (string, error) {
	parts := strings.Split(ns, "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", fmt.Errorf("%w: namespace %q: want tenant/namespace", ErrInvalidName, ns)
	}
	if err := checkEntity("tenant", parts[0]); err != nil {
		return "", fmt.Errorf("namespace %q: %w", ns, err)
	}
	if err := checkEntity("namespace", parts[1]); err != nil {
		return "", fmt.Errorf("namespace %q: %w", ns, err)
	}
	return url.PathEscape(parts[0]) + "/" + url.PathEscape(parts[1]), nil
}
