package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/node"
)

// maxBrokersInProcess bounds --brokers: broker i listens on 127.0.0.i.
const maxBrokersInProcess = 16

// brokersOfOneCluster is `--brokers N`: N brokers of one cluster in this process, broker i on
// 127.0.0.i with the configured ports, its data in <data-dir>/broker-i, all sharing the cluster's
// store: --metadata-store when given, else one in this process (docs/cluster.md).
func brokersOfOneCluster(base node.Options, s config.Settings) ([]node.Options, error) {
	if s.Brokers < 1 || s.Brokers > maxBrokersInProcess {
		return nil, fmt.Errorf("--brokers %d: want 1 to %d", s.Brokers, maxBrokersInProcess)
	}
	if s.BrokerID != "" {
		return nil, errors.New("--broker-id cannot be combined with --brokers (broker i is broker-i)")
	}
	var all []node.Options
	var errs []error
	for i := 1; i <= s.Brokers; i++ {
		o := base
		o.BrokerID = fmt.Sprintf("broker-%d", i)
		o.DataDir = filepath.Join(s.DataDir, o.BrokerID)
		o.AdvertisedAddress = ""
		// The brokers of one process stop together: none has anyone to hand its bundles to.
		o.HandOverTimeout = -1
		for _, l := range []struct {
			flag string
			addr *string
		}{{"broker-addr", &o.BrokerAddr}, {"web-addr", &o.WebAddr}, {"broker-tls-addr", &o.BrokerTLSAddr}, {"web-tls-addr", &o.WebTLSAddr}} {
			if *l.addr == "" {
				continue
			}
			_, port, err := net.SplitHostPort(*l.addr)
			if err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", l.flag, err))
				continue
			}
			*l.addr = net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i), port)
		}
		o.Logger = o.Logger.With("broker", o.BrokerID)
		if err := o.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("broker %d: %w", i, err))
			continue
		}
		all = append(all, o)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return all, nil
}

// runBrokers runs the brokers of `--brokers N` until ctx ends or one fails.
func runBrokers(ctx context.Context, log *slog.Logger, configs []node.Options) error {
	if configs[0].MetadataStore == "" {
		shared := memstore.New()
		defer shared.Close()
		for i := range configs {
			configs[i].SharedMetadataStore = shared
		}
	}
	g := &nodeGroup{kind: "broker", name: func(o node.Options) string { return o.BrokerID }, configs: configs}
	if err := g.start(ctx); err != nil {
		return err
	}
	var urls []string
	for i, n := range g.nodes {
		fmt.Printf("broker %s: serviceUrl %s webServiceUrl %s\n", configs[i].BrokerID, n.ServiceURL(), n.WebURL())
		urls = append(urls, strings.TrimPrefix(n.ServiceURL(), "pulsar://"))
	}
	log.Info("meridian brokers ready", "cluster", configs[0].Cluster, "brokers", len(g.nodes),
		"serviceUrl", "pulsar://"+strings.Join(urls, ","))
	return g.run(ctx, log)
}
