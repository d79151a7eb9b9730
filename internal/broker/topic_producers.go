package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// A topic's producers: attaching them (access modes, exclusive waiters), closing and removing them.

// producerWaiter is a queued WaitForExclusive producer.
type producerWaiter struct {
	opts  ProducerOptions
	name  string
	ready chan *producerState // receives the producer once granted
}

// addProducer implements Topic.AddProducer.
func (t *topicState) addProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	if err := t.checkBacklogQuota(opts.Name); err != nil {
		return nil, err
	}
	if err := t.ensureDedupCursor(ctx); err != nil {
		return nil, fmt.Errorf("topic %s: %w: %w", t.name, ErrPersistence, err)
	}
	t.mu.Lock()
	if err := t.openLocked(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	if t.terminated {
		t.mu.Unlock()
		return nil, fmt.Errorf("topic %s: %w", t.name, ErrTopicTerminated)
	}
	name := opts.Name
	if name == "" {
		name = t.b.nextProducerName()
	}
	isRepl := strings.HasPrefix(name, t.b.cfg.ReplicatorPrefix+".")
	var evicted []*producerState
	if old := t.producers[name]; old != nil {
		if opts.Epoch <= old.opts.Epoch {
			t.mu.Unlock()
			return nil, fmt.Errorf("producer %q is already connected to %s: %w", name, t.name, ErrProducerBusy)
		}
		// A reconnection (higher epoch) while the broker has not noticed the old connection's end.
		delete(t.producers, name)
		evicted = append(evicted, old)
	}
	if max := t.policies.MaxProducers; max > 0 && len(t.producers) >= max && !isRepl {
		t.mu.Unlock()
		t.closeProducers(evicted)
		return nil, fmt.Errorf("topic %s reached its limit of %d producers: %w", t.name, max, ErrProducerBusy)
	}
	if opts.TopicEpoch != nil && *opts.TopicEpoch < t.topicEpoch && opts.AccessMode != mtypes.AccessShared {
		t.mu.Unlock()
		t.closeProducers(evicted)
		return nil, fmt.Errorf("topic epoch %d is older than %d: %w", *opts.TopicEpoch, t.topicEpoch, ErrProducerFenced)
	}
	exclusive := false
	switch opts.AccessMode {
	case mtypes.AccessShared:
		if t.exclusive && len(t.producers) > 0 {
			t.mu.Unlock()
			t.closeProducers(evicted)
			return nil, fmt.Errorf("topic %s has an exclusive producer: %w", t.name, ErrProducerBusy)
		}
	case mtypes.AccessExclusive:
		if len(t.producers) > 0 || len(t.waiting) > 0 {
			t.mu.Unlock()
			t.closeProducers(evicted)
			// Pulsar answers ProducerFenced here (the client's TestExclusiveProducer checks it).
			return nil, fmt.Errorf("topic %s already has producers; exclusive access refused: %w", t.name, ErrProducerFenced)
		}
		exclusive = true
	case mtypes.AccessExclusiveWithFencing:
		for n, p := range t.producers {
			delete(t.producers, n)
			evicted = append(evicted, p)
		}
		exclusive = true
	case mtypes.AccessWaitForExclusive:
		if len(t.producers) > 0 || len(t.waiting) > 0 {
			w := &producerWaiter{opts: opts, name: name, ready: make(chan *producerState, 1)}
			t.waiting = append(t.waiting, w)
			t.mu.Unlock()
			t.closeProducers(evicted)
			if opts.OnQueued != nil {
				opts.OnQueued()
			}
			return t.awaitExclusive(ctx, w)
		}
		exclusive = true
	default:
		t.mu.Unlock()
		t.closeProducers(evicted)
		return nil, fmt.Errorf("access mode %d: %w", opts.AccessMode, ErrInvalidRequest)
	}
	p := t.attachProducerLocked(opts, name, exclusive)
	t.mu.Unlock()
	t.closeProducers(evicted)
	return t.granted(ctx, p)
}

// attachProducerLocked registers a granted producer; the caller holds t.mu.
func (t *topicState) attachProducerLocked(opts ProducerOptions, name string, exclusive bool) *producerState {
	p := &producerState{
		topic:          t,
		id:             opts.ProducerID,
		name:           name,
		opts:           opts,
		isReplicator:   strings.HasPrefix(name, t.b.cfg.ReplicatorPrefix+"."),
		connectedSince: t.b.clock.Now(),
		limiter:        opts.Limiter,
	}
	if p.limiter == nil {
		p.limiter = t.b.publishLimiter
	}
	if exclusive {
		t.topicEpoch++
		if opts.TopicEpoch != nil && *opts.TopicEpoch > t.topicEpoch {
			t.topicEpoch = *opts.TopicEpoch
		}
		p.topicEpoch, p.hasTopicEpoch = t.topicEpoch, true
	}
	t.exclusive = exclusive
	t.dedupMu.Lock()
	if t.dedup != nil {
		p.lastSequenceID = t.dedup.lastSequenceID(name)
	} else {
		p.lastSequenceID = -1
	}
	t.dedupMu.Unlock()
	p.public = &Producer{p: p}
	if t.producers == nil {
		t.producers = make(map[string]*producerState)
	}
	t.producers[name] = p
	return p
}

// awaitExclusive waits until a queued WaitForExclusive producer is granted the topic.
func (t *topicState) awaitExclusive(ctx context.Context, w *producerWaiter) (*Producer, error) {
	select {
	case p := <-w.ready:
		if p == nil {
			return nil, fmt.Errorf("topic %s closed while waiting for exclusive access: %w", t.name, ErrTopicFenced)
		}
		return t.granted(ctx, p)
	case <-ctx.Done():
		t.mu.Lock()
		if i := slices.Index(t.waiting, w); i >= 0 {
			t.waiting = slices.Delete(t.waiting, i, i+1)
			t.mu.Unlock()
			return nil, ctx.Err()
		}
		t.mu.Unlock()
		// Granted concurrently: give it back.
		if p := <-w.ready; p != nil {
			_ = p.close(context.Background())
		}
		return nil, ctx.Err()
	}
}

// grantWaiterLocked hands the topic to the first queued WaitForExclusive producer if it is free.
func (t *topicState) grantWaiterLocked() {
	if len(t.producers) > 0 || len(t.waiting) == 0 || t.state != topicOpen {
		return
	}
	w := t.waiting[0]
	t.waiting = t.waiting[1:]
	w.ready <- t.attachProducerLocked(w.opts, w.name, true)
}

// closeProducers closes evicted producers (broker-initiated: their OnClosed is called).
func (t *topicState) closeProducers(ps []*producerState) {
	for _, p := range ps {
		if !p.closed.Swap(true) && p.opts.OnClosed != nil {
			p.opts.OnClosed(t.reassigned())
		}
	}
}

// removeProducer detaches a closed producer.
func (t *topicState) removeProducer(p *producerState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.producers[p.name] == p {
		delete(t.producers, p.name)
	}
	if len(t.producers) == 0 {
		t.exclusive = false
		t.grantWaiterLocked()
	}
}
