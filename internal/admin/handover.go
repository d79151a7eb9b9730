package admin

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// The bundle hand-over endpoint: the owner of a namespace bundle streams each topic's ledger to the
// broker taking the bundle over (docs/cluster.md, "Moving a bundle"). It is a broker-to-broker
// route, not Pulsar's: superusers only (the brokers call it with their brokerClient* credentials),
// and its body is streamed, so it has no body bound of its own (the stream format bounds every
// piece it holds in memory).
const handOverPattern = "POST /internal/v1/bundle-handover"

// Errors an Ownership's AcceptHandOver returns, mapped to statuses here.
var (
	// ErrHandOverRefused: this broker is not the bundle's hand-over target (409).
	ErrHandOverRefused = errors.New("bundle hand-over refused")
	// ErrHandOverMalformed: the stream breaks its format (400).
	ErrHandOverMalformed = errors.New("malformed bundle hand-over stream")
)

// handOverIdle bounds how long a hand-over stream may send nothing.
const handOverIdle = time.Minute

// progressDeadline moves the connection's read deadline forward whenever a read returns data.
type progressDeadline struct {
	r      io.Reader
	extend func()
}

func (p progressDeadline) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.extend()
	}
	return n, err
}

func (h *Handler) handOverRoutes() {
	h.patterns = append(h.patterns, handOverPattern)
	h.mux.Handle(handOverPattern, h.guard(handOverPattern, h.wrapBounded(h.acceptHandOver, -1)))
}

func (h *Handler) acceptHandOver(w http.ResponseWriter, r *http.Request) error {
	if h.cfg.Ownership == nil {
		return fail(http.StatusPreconditionFailed, "this broker is not part of a cluster of several brokers")
	}
	// A stream lasts as long as its data needs: instead of the listener's bound on a whole request,
	// the sender must make progress every handOverIdle.
	rc := http.NewResponseController(w)
	body := progressDeadline{r: r.Body, extend: func() { _ = rc.SetReadDeadline(time.Now().Add(handOverIdle)) }}
	body.extend()
	entries, err := h.cfg.Ownership.AcceptHandOver(r.Context(), body)
	switch {
	case errors.Is(err, ErrHandOverRefused):
		return fail(http.StatusConflict, "%v", err)
	case errors.Is(err, ErrHandOverMalformed):
		return fail(http.StatusBadRequest, "%v", err)
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		Entries int64 `json:"entries"`
	}{entries})
	return nil
}
