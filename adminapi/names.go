package adminapi

import (
	"fmt"
	"net/url"
	"strings"
)

// TopicRESTPath turns a topic name in any of Pulsar's forms ("t", "tenant/ns/t",
// "persistent://tenant/ns/t", "non-persistent://tenant/ns/t") into the admin path segment
// "persistent/tenant/ns/t", with the local name path-escaped. It checks the shape only; the server
// validates the characters.
func TopicRESTPath(topic string) (string, error) {
	domain := "persistent"
	rest := topic
	if i := strings.Index(topic, "://"); i >= 0 {
		domain = topic[:i]
		if domain != "persistent" && domain != "non-persistent" {
			return "", fmt.Errorf("topic %q: unknown domain %q (want persistent or non-persistent)", topic, domain)
		}
		rest = topic[i+3:]
	} else if !strings.Contains(topic, "/") {
		rest = "public/default/" + topic
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" || strings.Contains(parts[2], "/") {
		return "", fmt.Errorf("topic %q: want [persistent://]tenant/namespace/topic", topic)
	}
	return domain + "/" + url.PathEscape(parts[0]) + "/" + url.PathEscape(parts[1]) + "/" + url.PathEscape(parts[2]), nil
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
		return "", fmt.Errorf("namespace %q: want tenant/namespace", ns)
	}
	return url.PathEscape(parts[0]) + "/" + url.PathEscape(parts[1]), nil
}
