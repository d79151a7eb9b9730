package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/meridian-mq/meridian/internal/node"
)

// nodeGroup is several nodes one process runs (`--clusters`, `--brokers`): started in order,
// stopped in reverse, and all stopped when one fails. kind and name label each node in errors
// ("cluster a", "broker broker-2").
type nodeGroup struct {
	kind    string
	name    func(node.Options) string
	configs []node.Options
	nodes   []*node.Node
}

// start starts every node in order; on a failure it stops the ones started.
func (g *nodeGroup) start(ctx context.Context) error {
	for _, o := range g.configs {
		n, err := node.Start(ctx, o)
		if err != nil {
			_ = g.closeAll(fmt.Sprintf("%s %s failed to start", g.kind, g.name(o)))
			return fmt.Errorf("%s %s: %w", g.kind, g.name(o), err)
		}
		g.nodes = append(g.nodes, n)
	}
	return nil
}

// closeAll stops the started nodes in reverse order, each logging why on its own logger.
func (g *nodeGroup) closeAll(reason any) error {
	var errs []error
	for i := len(g.nodes) - 1; i >= 0; i-- {
		g.configs[i].Logger.Info("shutting down", "reason", reason)
		errs = append(errs, g.nodes[i].Close())
	}
	return errors.Join(errs...)
}

// run waits until ctx ends (then stops every node) or a node fails (then stops the others); log is
// the process's logger, which says why the whole group stops.
func (g *nodeGroup) run(ctx context.Context, log *slog.Logger) error {
	failed := make(chan error, len(g.nodes))
	for i, n := range g.nodes {
		go func() {
			if err := <-n.Done(); err != nil {
				failed <- fmt.Errorf("%s %s: %w", g.kind, g.name(g.configs[i]), err)
			}
		}()
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down", "reason", context.Cause(ctx))
		return g.closeAll(context.Cause(ctx))
	case err := <-failed:
		log.Error(fmt.Sprintf("a %s failed; stopping all", g.kind), "err", err)
		return errors.Join(err, g.closeAll(err))
	}
}
