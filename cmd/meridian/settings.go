package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/console"
	"github.com/meridian-mq/meridian/internal/node"
)

// standaloneFlags are the flags of `meridian standalone`: one per setting of internal/config that
// has a flag, kept as the text given (config.Apply parses and checks it, naming the flag), plus
// --config.
type standaloneFlags struct {
	configFile string
	flags      []*settingFlag

	// Set by nodeOptions: the process's logger, the settings the nodes run with, and whether a
	// source gave --data-dir (data-dir).
	logger       *slog.Logger
	resolved     config.Settings
	dataDirGiven bool
}

// settingFlag is one setting's flag. It remembers the text given so that the configuration file
// and the environment can be applied first and the flag last.
type settingFlag struct {
	name    string
	def     string
	text    string
	changed bool
	list    bool
	typ     string
}

func (f *settingFlag) String() string {
	if f.changed {
		return f.text
	}
	return f.def
}

// Set keeps the text; a list flag given twice (--clusters a --clusters b) collects both.
func (f *settingFlag) Set(v string) error {
	if f.list && f.changed && v != "" {
		f.text += "," + v
	} else {
		f.text = v
	}
	f.changed = true
	return nil
}

func (f *settingFlag) Type() string { return f.typ }

// defaultSettings are the built-in defaults every source applies on top of: the node's.
func defaultSettings() config.Settings {
	d := node.DefaultOptions()
	return config.Settings{
		Cluster:                   d.Cluster,
		DataDir:                   d.DataDir,
		BrokerAddr:                d.BrokerAddr,
		WebAddr:                   d.WebAddr,
		ReplicationStartAt:        string(d.ReplicationStartAt),
		MaxMessageSize:            d.MaxMessageSize,
		MaxPendingPublishRequests: d.MaxPendingPublishRequests,
		MaxPendingPublishBytes:    int(d.MaxPendingPublishBytes),
		MaxOutboundBytes:          d.MaxOutboundBytes,
		Fsync:                     string(d.Fsync),
		FsyncPipeline:             d.FsyncPipeline,
		DirectWriteBytes:          d.DirectWriteBytes,
		BypassCacheBytes:          d.BypassCacheBytes,
		ReplicationMemoryBytes:    int(d.ReplicationMemoryBytes),
		EntryCacheMB:              int(d.EntryCacheBytes >> 20),
		Dedup:                     d.Dedup,
		TopicLevelMetrics:         !d.HideTopicLevelMetrics,
		ReplicationStallTimeout:   node.DefaultReplicationStallTimeout,
		ConsoleHistoryBytes:       console.DefaultHistoryBytes,
		AutoTopicCreation:         d.AutoTopicCreation,
		LogFormat:                 logFormatText,
		KeepAliveInterval:         node.DefaultKeepAliveInterval,
		ShutdownTimeout:           node.DefaultShutdownTimeout,
		LoadBalancer:              true,
		LoadShedding:              true,
		LoadSheddingInterval:      node.DefaultLoadSheddingInterval,
		HandOverTimeout:           node.DefaultHandOverTimeout,
		Brokers:                   1,
		TLS:                       config.DefaultTLS(),
		Auth:                      config.DefaultAuth(),
		BrokerClient:              config.DefaultBrokerClient(),
	}
}

// register adds --config and a flag for every setting that has one, with its default in the help.
func (f *standaloneFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.configFile, "config", "", "configuration file in Apache Pulsar's format (broker.conf, standalone.conf); env "+config.EnvName("config"))
	defaults := defaultSettings()
	for _, k := range config.Keys() {
		if k.Flag == "" {
			continue
		}
		sf := &settingFlag{name: k.Flag, def: k.Get(&defaults), list: k.List, typ: "string"}
		switch {
		case k.Bool:
			sf.typ = "bool"
		case k.List:
			sf.typ = "strings"
		default:
			if _, err := strconv.Atoi(sf.def); err == nil {
				sf.typ = "int"
			}
		}
		flag := fl.VarPF(sf, k.Flag, "", k.Usage)
		if k.Bool {
			flag.NoOptDefVal = "true"
		}
		f.flags = append(f.flags, sf)
	}
}

// settings applies the defaults, the configuration file, the environment and the flags given, in
// that order, builds the process's logger (f.logger) and logs once what was ignored. Values
// Meridian cannot honour are errors. given names the settings some source set.
func (f *standaloneFlags) settings(environ []string, logTo io.Writer) (s config.Settings, given map[string]bool, err error) {
	s = defaultSettings()
	f.logger, _ = newLoggerTo(logTo, logFormatText) // until the settings say otherwise
	src := config.Sources{Environ: environ}
	file := f.configFile
	if file == "" {
		file = lookupEnv(environ, config.EnvName("config"))
	}
	if file != "" {
		entries, err := readConfigFile(file)
		if err != nil {
			return s, nil, err
		}
		src.FileName, src.File = file, entries
	}
	for _, sf := range f.flags {
		if sf.changed {
			src.Flags = append(src.Flags, config.FlagValue{Name: sf.name, Value: sf.text})
		}
	}
	rep, err := s.Apply(src)
	if l, lerr := newLoggerTo(logTo, s.LogFormat); lerr == nil {
		f.logger = l
	}
	log := f.logger
	if len(rep.Ignored) > 0 {
		log.Info("configuration keys Meridian does not use; ignored", "count", len(rep.Ignored), "keys", strings.Join(rep.Ignored, ","))
	}
	if len(rep.Unknown) > 0 {
		log.Warn("configuration keys that are neither Meridian's nor Pulsar keys it knows to ignore (misspelt?)", "keys", strings.Join(rep.Unknown, ","))
	}
	for _, w := range rep.Warnings {
		log.Warn("configuration", "warning", w)
	}
	if err != nil {
		return s, nil, err
	}
	if err := s.RefuseUnimplemented(); err != nil {
		return s, nil, err
	}
	if file != "" {
		log.Info("configuration file read", "file", file)
	}
	return s, rep.Given, nil
}

func readConfigFile(name string) ([]config.Entry, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	defer fh.Close()
	entries, err := config.Parse(fh)
	if err != nil {
		var pe *config.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("--config %s: %w", name, err)
		}
		return nil, err
	}
	return entries, nil
}

func lookupEnv(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}
