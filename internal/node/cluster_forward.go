package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/server"
)

// A topic service call on a topic another broker of the cluster serves (a partition of a
// partitioned topic, or a topic of a namespace, asked through this broker) goes to that broker's
// admin API, to the route that makes the same call there, with the caller's credentials. Its
// answer comes back as this broker's: an error answer as the sentinel its status and reason stand
// for, carrying the owner's reason.

// ownerCall is the calls on one topic another broker serves.
type ownerCall struct {
	member *clusterMember
	base   string // the owner's web base URL
	topic  naming.TopicName
	err    error // nobody serves the topic now: every call fails with err
}

// elsewhere reports whether another broker of the cluster serves topic; the calls on it then go
// there through the returned ownerCall. A name that does not parse stays here (the local path
// answers it).
func (s topicService) elsewhere(topic string) (ownerCall, bool) {
	if s.member == nil {
		return ownerCall{}, false
	}
	name, err := parseAdminTopic(topic)
	if err != nil {
		return ownerCall{}, false
	}
	base, remote, err := s.member.remoteTopic(name)
	if !remote {
		return ownerCall{}, false
	}
	return ownerCall{member: s.member, base: base, topic: name, err: err}, true
}

// send makes the request method on the topic's route with suffix ("/internalStats") on the owner;
// an answer other than 2xx is an error (ownerFailure).
func (c ownerCall) send(ctx context.Context, method, suffix string, in any) (ownerAnswer, error) {
	return c.sendUpTo(ctx, method, suffix, in, maxRemoteBody)
}

// sendUpTo is send for an answer of at most limit bytes.
func (c ownerCall) sendUpTo(ctx context.Context, method, suffix string, in any, limit int64) (ownerAnswer, error) {
	if c.err != nil {
		return ownerAnswer{}, c.err
	}
	a, err := c.member.exchange(ctx, method, c.base, "/admin/v2/"+c.topic.RESTPath()+suffix, nil, in, limit)
	if err != nil {
		return ownerAnswer{}, err
	}
	if a.status < 200 || a.status > 299 {
		return ownerAnswer{}, ownerFailure(c.base, a)
	}
	return a, nil
}

// do is send without an answer to read.
func (c ownerCall) do(ctx context.Context, method, suffix string, in any) error {
	_, err := c.send(ctx, method, suffix, in)
	return err
}

// forwarded is send decoding the owner's JSON answer as T.
func forwarded[T any](ctx context.Context, c ownerCall, method, suffix string, in any) (T, error) {
	var out T
	a, err := c.send(ctx, method, suffix, in)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(a.body, &out); err != nil {
		return out, fmt.Errorf("the owner at %s answered %s with %w", c.base, suffix, err)
	}
	return out, nil
}

// maxRemoteMessage bounds a message read from its owner: the largest a broker stores.
const maxRemoteMessage = MaxMaxMessageSize + server.FramePadding

// rawMessage is send for a route answering one message (peek, get by id): the payload and the
// X-Pulsar-* headers.
func (c ownerCall) rawMessage(ctx context.Context, suffix string) (adminapi.RawMessage, error) {
	a, err := c.sendUpTo(ctx, http.MethodGet, suffix, nil, maxRemoteMessage)
	if err != nil {
		return adminapi.RawMessage{}, err
	}
	m, err := adminapi.RawMessageFromHeaders(a.header, a.body)
	if err != nil {
		return adminapi.RawMessage{}, fmt.Errorf("the owner at %s answered %s with a bad message id: %w", c.base, suffix, err)
	}
	if len(m.Properties) == 0 {
		m.Properties = nil
	}
	m.Compression = a.header.Get(adminapi.HeaderCompression)
	m.UncompressedSize, _ = strconv.Atoi(a.header.Get(adminapi.HeaderUncompressed))
	return m, nil
}

// subscriptionPath is a subscription route's suffix ("/subscription/<sub>" + rest).
func subscriptionPath(sub, rest string) string {
	return "/subscription/" + url.PathEscape(sub) + rest
}

// ownerSentinels are the sentinels an error status of the owner stands for, told apart by the
// reason they begin (the owner writes them there); the last of each is the status's default.
var ownerSentinels = map[int][]error{
	http.StatusNotFound:           {admin.ErrSubscriptionNotFound, admin.ErrMessageNotFound, admin.ErrTopicNotFound},
	http.StatusConflict:           {admin.ErrSubscriptionExists, admin.ErrTopicExists},
	http.StatusPreconditionFailed: {admin.ErrSubscriptionBusy, admin.ErrTopicBusy, admin.ErrInvalidArgument},
	http.StatusNotImplemented:     {admin.ErrNotSupported},
	http.StatusServiceUnavailable: {admin.ErrNotReady},
}

// maxOwnerReason bounds the owner's reason carried in an error.
const maxOwnerReason = 1024

// ownerError is an owner's error answer: its reason as the owner gave it (so this broker answers
// the same), standing for sentinel.
type ownerError struct {
	sentinel error
	reason   string
}

func (e *ownerError) Error() string { return e.reason }
func (e *ownerError) Unwrap() error { return e.sentinel }

// ownerFailure is the error an owner's answer other than 2xx stands for.
func ownerFailure(base string, a ownerAnswer) error {
	reason := ownerReason(a.body)
	sentinels, known := ownerSentinels[a.status]
	if !known {
		return fmt.Errorf("the owner at %s answered %d: %s", base, a.status, reason)
	}
	sentinel := sentinels[len(sentinels)-1]
	for _, s := range sentinels {
		if strings.HasPrefix(reason, s.Error()) {
			sentinel = s
			break
		}
	}
	if reason == "" {
		reason = sentinel.Error()
	}
	return &ownerError{sentinel: sentinel, reason: reason}
}

// ownerReason is the reason of an error answer ({"reason": ...}, or its text), bounded.
func ownerReason(body []byte) string {
	var e struct {
		Reason string `json:"reason"`
	}
	reason := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Reason != "" {
		reason = e.Reason
	}
	if len(reason) > maxOwnerReason {
		reason = reason[:maxOwnerReason]
		for !utf8.ValidString(reason) {
			reason = reason[:len(reason)-1]
		}
	}
	return reason
}

// errPeekPosition is PeekMessage's answer to a position before the first.
func errPeekPosition(n int) error {
	return fmt.Errorf("%w: message position %d, want 1 or more", admin.ErrInvalidArgument, n)
}

// errNegativeSeconds is ExpireMessages' answer to a negative age, here and on the owner alike.
func errNegativeSeconds(seconds int64) error {
	return fmt.Errorf("%w: expire time %d s is negative", admin.ErrInvalidArgument, seconds)
}
