package admin

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/naming"
)

// PositionTranslator is optionally implemented by a TopicService: TranslateFrom maps a position of
// another cluster to this one through the topic's inbound replication index
// (docs/replication-design.md, "Position translation"). found is false when no mapping answers.
type PositionTranslator interface {
	TranslateFrom(ctx context.Context, topic, cluster string, origin adminapi.MessageID, atOrBefore bool) (local, mapped adminapi.MessageID, exact, found bool, err error)
}

func (h *Handler) translateRoutes(base string) {
	h.handle("GET "+base+"/translatePosition", readEndpoint(h.topicInExistingNamespace, h.topicTranslatePosition))
}

// topicTranslatePosition answers GET .../translatePosition?cluster=A&messageId=L:E[&atOrBefore=true]
// [&publishTime=ms]: the position on this cluster of A's message L:E, through the inbound index;
// when the index has nothing and publishTime is given, the first message here published at or after
// it (approximate). Without messageId, publishTime alone answers by time.
func (h *Handler) topicTranslatePosition(r *http.Request, t naming.TopicName) (adminapi.PositionTranslation, error) {
	var none adminapi.PositionTranslation
	q := r.URL.Query()
	cluster := q.Get("cluster")
	idText, timeText := q.Get("messageId"), q.Get("publishTime")
	if cluster == "" && idText != "" {
		return none, fail(http.StatusBadRequest, "cluster is required with messageId: the cluster the message id belongs to")
	}
	if idText == "" && timeText == "" {
		return none, fail(http.StatusBadRequest, "give messageId (with cluster) or publishTime")
	}
	var publishTime int64
	var err error
	if timeText != "" {
		if publishTime, err = strconv.ParseInt(timeText, 10, 64); err != nil || publishTime < 0 {
			return none, fail(http.StatusBadRequest, "Invalid publishTime %q (milliseconds since the epoch)", timeText)
		}
	}
	svc, err := h.topics()
	if err != nil {
		return none, err
	}
	if idText != "" {
		origin, err := parseLedgerEntry(idText)
		if err != nil {
			return none, err
		}
		tr, can := svc.(PositionTranslator)
		if !can {
			return none, fail(http.StatusNotImplemented, "Position translation is not supported by this broker")
		}
		local, mapped, exact, found, err := tr.TranslateFrom(r.Context(), t.String(), cluster, origin, queryBool(r, "atOrBefore"))
		if err != nil {
			return none, err
		}
		if found {
			method := "index"
			if !exact {
				method = "index-at-or-before"
			}
			return adminapi.PositionTranslation{MessageID: local, Method: method, Exact: exact, OriginMessageID: &mapped}, nil
		}
		if timeText == "" {
			return none, fail(http.StatusNotFound, "No position of cluster %s at or before %s arrived here (or its mapping is no longer kept); give publishTime for an approximate answer", cluster, idText)
		}
	}
	id, err := svc.MessageIDByTimestamp(r.Context(), t.String(), publishTime)
	return adminapi.PositionTranslation{MessageID: id, Method: "publish-time"}, err
}

// parseLedgerEntry reads "ledger:entry" (entry -1: before the ledger's first entry, as mark-delete positions say).
func parseLedgerEntry(s string) (adminapi.MessageID, error) {
	l, e, found := strings.Cut(s, ":")
	ledger, err1 := strconv.ParseInt(l, 10, 64)
	entry, err2 := strconv.ParseInt(e, 10, 64)
	if !found || err1 != nil || err2 != nil || ledger < 0 || entry < -1 {
		return adminapi.MessageID{}, fail(http.StatusBadRequest, "Invalid messageId %q: want ledger:entry", s)
	}
	return adminapi.MessageID{LedgerID: ledger, EntryID: entry, PartitionIndex: -1}, nil
}
