package main

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/internal/storage"
)

// errDamageFound: `meridian repair` without --accept-loss found something to repair.
var errDamageFound = errors.New("damage found: nothing was changed; rerun with --accept-loss to repair it, giving up what is listed")

// repairFlags are the flags of `meridian repair`.
type repairFlags struct {
	dataDir    string
	topic      string
	acceptLoss bool
}

func newRepairCommand() *cobra.Command {
	f := &repairFlags{}
	defaults := node.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Check a stopped broker's data dir for damage; with --accept-loss, repair it",
		Long: `Check a stopped broker's data dir for damage that stops the broker or a topic, and with
--accept-loss repair it, keeping everything that can still be read.

The broker refuses to start, or to load a topic, when a file it needs is damaged (a cursor log,
a segment damaged in the middle, the state or incarnations file, a FENCED marker written by
recovery), rather than silently resetting subscriptions or reusing ledger ids. Without
--accept-loss this command lists each problem and what repairing it gives up, and changes
nothing (exit status 1 when it found any). With --accept-loss it repairs them, replays the
journal, and checks that every repaired topic loads. The broker must be stopped: the command
takes the data dir's lock.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", defaults.DataDir, "the stopped broker's data dir")
	fl.StringVar(&f.topic, "topic", "", "check and repair only this topic's files (persistent://tenant/namespace/topic); the data dir's own files are always checked")
	fl.BoolVar(&f.acceptLoss, "accept-loss", false, "repair what is found, giving up what the report lists")
	return cmd
}

func (f *repairFlags) run(cmd *cobra.Command) error {
	var ledger string
	if f.topic != "" {
		t, err := naming.ParseTopic(f.topic)
		if err != nil {
			return fmt.Errorf("--topic: %w", err)
		}
		ledger = t.StorageName()
	}
	if _, err := os.Stat(f.dataDir); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	release, err := node.LockDataDir(f.dataDir)
	if err != nil {
		return err
	}
	defer func() { _ = release() }()
	report, err := storage.Repair(cmd.Context(), storage.RepairOptions{
		Dir:        node.StorageDir(f.dataDir),
		Ledger:     ledger,
		AcceptLoss: f.acceptLoss,
		Logger:     newLogger(),
	})
	if report != nil && (err == nil || len(report.Actions) > 0) { // not "nothing to repair" over an error
		report.Print(cmd.OutOrStdout())
	}
	if err != nil {
		return err
	}
	if !f.acceptLoss && len(report.Actions) > 0 {
		return errDamageFound
	}
	var failed []string
	for n, lerr := range report.Loaded {
		if lerr != nil {
			failed = append(failed, n)
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		return fmt.Errorf("repaired, but %d ledgers still do not load: %v", len(failed), failed)
	}
	return nil
}
