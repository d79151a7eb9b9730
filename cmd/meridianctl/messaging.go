package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// newClient opens a binary-protocol client on --service-url (quiet: warnings only, on stderr). The
// handshake is bounded by --timeout.
func (a *app) newClient() (*client.Client, error) {
	tlsCfg, creds, err := a.security.clientSecurity(a.serviceURL)
	if err != nil {
		return nil, err
	}
	c, err := client.New(client.Options{
		TLS:              tlsCfg,
		Auth:             creds,
		ServiceURL:       a.serviceURL,
		ClientVersion:    "meridianctl",
		OperationTimeout: a.timeout,
		Logger:           slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, usageErr("%v (set --service-url or MERIDIAN_SERVICE_URL)", err)
	}
	return c, nil
}

// partitions returns the topic names to open: the partitions of a partitioned topic, or the topic.
func partitions(ctx context.Context, c *client.Client, topic string) ([]string, error) {
	n, err := c.PartitionedMetadata(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %w", topic, err)
	}
	if n == 0 {
		return []string{topic}, nil
	}
	full := topic
	if !strings.Contains(full, "://") {
		if strings.Count(full, "/") == 0 {
			full = "public/default/" + full
		}
		full = "persistent://" + full
	}
	out := make([]string, n)
	for i := range out {
		out[i] = full + "-partition-" + strconv.Itoa(i)
	}
	return out, nil
}

// multiProducer publishes to every partition: by key hash when a key is set, else round robin.
type multiProducer struct {
	ps   []*client.Producer
	next int
}

func openProducers(ctx context.Context, c *client.Client, topic string, base client.ProducerOptions) (*multiProducer, error) {
	names, err := partitions(ctx, c, topic)
	if err != nil {
		return nil, err
	}
	mp := &multiProducer{}
	for _, n := range names {
		o := base
		o.Topic = n
		p, err := c.CreateProducer(ctx, o)
		if err != nil {
			mp.close(ctx)
			return nil, fmt.Errorf("creating a producer on %s: %w", n, err)
		}
		mp.ps = append(mp.ps, p)
	}
	return mp, nil
}

func (m *multiProducer) pick(key string) *client.Producer {
	if len(m.ps) == 1 {
		return m.ps[0]
	}
	if key != "" {
		h := fnv.New32a()
		h.Write([]byte(key))
		return m.ps[int(h.Sum32())%len(m.ps)]
	}
	p := m.ps[m.next%len(m.ps)]
	m.next++
	return p
}

func (m *multiProducer) close(ctx context.Context) {
	for _, p := range m.ps {
		_ = p.Close(ctx)
	}
}

func parseProps(list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErr("property %q: want key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

func produceCmd(a *app) *cobra.Command {
	var (
		messages, files, props []string
		key                    string
		count                  int
		stdin                  bool
	)
	cmd := &cobra.Command{Use: "produce TOPIC", Short: "Publish messages (like pulsar-client produce)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		properties, err := parseProps(props)
		if err != nil {
			return err
		}
		var payloads [][]byte
		for _, m := range messages {
			payloads = append(payloads, []byte(m))
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("reading %s: %w", f, err)
			}
			payloads = append(payloads, b)
		}
		if stdin {
			b, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return err
			}
			for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
				payloads = append(payloads, []byte(line))
			}
		}
		if len(payloads) == 0 {
			return usageErr("nothing to send: give -m MESSAGE, -f FILE or --stdin")
		}
		if err := checkTopicName(args[0]); err != nil {
			return err
		}
		ctx := cmd.Context()
		c, err := a.newClient()
		if err != nil {
			return err
		}
		defer c.Close()
		mp, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (*multiProducer, error) {
			return openProducers(ctx, c, args[0], client.ProducerOptions{MaxPending: 1000})
		})
		if err != nil {
			return a.serviceErr(args[0], err)
		}
		defer mp.close(context.WithoutCancel(ctx))
		sent := 0
		for i := 0; i < count; i++ {
			for _, pl := range payloads {
				id, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (client.MessageID, error) {
					return mp.pick(key).Send(ctx, client.ProducerMessage{Payload: pl, Key: key, Properties: properties})
				})
				if err != nil {
					return a.serviceErr(args[0], fmt.Errorf("sent %d messages, then: %w", sent, err))
				}
				sent++
				if a.output == "json" {
					_ = json.NewEncoder(a.out).Encode(map[string]any{"messageId": id.String(), "ledgerId": int64(id.LedgerID), "entryId": int64(id.EntryID), "partition": id.Partition})
				}
			}
		}
		return a.done("%d messages produced to %s", sent, args[0])
	}}
	f := cmd.Flags()
	f.StringArrayVarP(&messages, "messages", "m", nil, "message payload (repeatable)")
	f.StringArrayVarP(&files, "files", "f", nil, "file whose content is one message (repeatable)")
	f.BoolVar(&stdin, "stdin", false, "send each line of standard input as a message")
	f.StringVarP(&key, "key", "k", "", "message key")
	f.StringArrayVarP(&props, "properties", "p", nil, "message property key=value (repeatable)")
	f.IntVarP(&count, "num-produce", "n", 1, "send the messages this many times")
	return cmd
}

var subTypes = map[string]pulsarpb.CommandSubscribe_SubType{
	"exclusive": client.Exclusive, "shared": client.Shared, "failover": client.Failover, "key_shared": client.KeyShared,
}

// fanIn subscribes to every partition and delivers their messages on one channel.
type fanIn struct {
	consumers []*client.Consumer
	msgs      chan received
	wg        sync.WaitGroup
	cancel    context.CancelFunc
}

type received struct {
	c   *client.Consumer
	m   *client.Message
	err error
}

// openConsumers subscribes; each setup step (lookup, each SUBSCRIBE) is bounded by stepTimeout, while
// the consumers receive until ctx ends.
func openConsumers(ctx context.Context, stepTimeout time.Duration, c *client.Client, topic, sub, typ, position string, queue int) (*fanIn, error) {
	st, ok := subTypes[strings.ToLower(typ)]
	if !ok {
		return nil, usageErr("--subscription-type %q: want Exclusive, Shared, Failover or Key_Shared", typ)
	}
	var pos pulsarpb.CommandSubscribe_InitialPosition
	switch strings.ToLower(position) {
	case "latest":
		pos = client.PositionLatest
	case "earliest":
		pos = client.PositionEarliest
	default:
		return nil, usageErr("--subscription-position %q: want latest or earliest", position)
	}
	names, err := withStepTimeout(ctx, stepTimeout, func(ctx context.Context) ([]string, error) { return partitions(ctx, c, topic) })
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	f := &fanIn{msgs: make(chan received, queue), cancel: cancel}
	for _, n := range names {
		cs, err := withStepTimeout(ctx, stepTimeout, func(ctx context.Context) (*client.Consumer, error) {
			return c.Subscribe(ctx, client.ConsumerOptions{Topic: n, Subscription: sub, Type: st, InitialPosition: pos, ReceiverQueueSize: queue})
		})
		if err != nil {
			f.close(ctx)
			return nil, fmt.Errorf("subscribing to %s: %w", n, err)
		}
		f.consumers = append(f.consumers, cs)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				m, err := cs.Receive(rctx)
				select {
				case f.msgs <- received{cs, m, err}:
				case <-rctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	return f, nil
}

func (f *fanIn) close(ctx context.Context) {
	f.cancel()
	f.wg.Wait()
	for _, c := range f.consumers {
		_ = c.Close(ctx)
	}
}

func consumeCmd(a *app) *cobra.Command {
	var (
		sub, typ, position string
		count              int
		hideContent        bool
	)
	cmd := &cobra.Command{Use: "consume TOPIC", Short: "Receive and acknowledge messages (like pulsar-client consume)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		if sub == "" {
			return usageErr("--subscription-name (-s) is required")
		}
		if err := checkTopicName(args[0]); err != nil {
			return err
		}
		ctx := cmd.Context()
		c, err := a.newClient()
		if err != nil {
			return err
		}
		defer c.Close()
		f, err := openConsumers(ctx, a.timeout, c, args[0], sub, typ, position, 1000)
		if err != nil {
			return a.serviceErr(args[0], err)
		}
		defer f.close(context.WithoutCancel(ctx))
		got := 0
		for count <= 0 || got < count {
			var r received
			select {
			case r = <-f.msgs:
			case <-ctx.Done():
				return a.done("%d messages received", got)
			}
			if r.err != nil {
				if ctx.Err() != nil {
					return a.done("%d messages received", got)
				}
				return a.serviceErr(args[0], fmt.Errorf("after %d messages: %w", got, r.err))
			}
			got++
			printMessage(a, r.m, hideContent)
			if _, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.c.Ack(ctx, r.m.ID) }); err != nil {
				return a.serviceErr(args[0], fmt.Errorf("acknowledging %s: %w", r.m.ID, err))
			}
		}
		return a.done("%d messages received", got)
	}}
	f := cmd.Flags()
	f.StringVarP(&sub, "subscription-name", "s", "", "subscription name")
	f.StringVarP(&typ, "subscription-type", "t", "Exclusive", "Exclusive, Shared, Failover or Key_Shared")
	f.StringVarP(&position, "subscription-position", "p", "latest", "where a new subscription starts: latest or earliest")
	f.IntVarP(&count, "num-messages", "n", 1, "messages to receive (0 = until interrupted)")
	f.BoolVar(&hideContent, "hide-content", false, "do not print payloads")
	return cmd
}

func printMessage(a *app, m *client.Message, hide bool) {
	if a.output == "json" {
		rec := map[string]any{
			"messageId": m.ID.String(), "topic": m.Topic, "key": m.Key, "properties": m.Properties,
			"publishTime": m.PublishTime.UTC().Format(time.RFC3339Nano), "producerName": m.ProducerName,
			"sequenceId": m.SequenceID, "replicatedFrom": m.ReplicatedFrom, "redeliveryCount": m.RedeliveryCount,
		}
		if !hide {
			rec["payload"] = string(m.Payload)
		}
		_ = json.NewEncoder(a.out).Encode(rec)
		return
	}
	fmt.Fprintf(a.out, "----- got message -----\nid: %s  topic: %s\n", m.ID, m.Topic)
	if m.Key != "" {
		fmt.Fprintf(a.out, "key: %s\n", m.Key)
	}
	if len(m.Properties) > 0 {
		fmt.Fprintf(a.out, "properties: %v\n", m.Properties)
	}
	if m.ReplicatedFrom != "" {
		fmt.Fprintf(a.out, "replicated from: %s\n", m.ReplicatedFrom)
	}
	if !hide {
		fmt.Fprintf(a.out, "content: %s\n", m.Payload)
	}
}
