package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
)

// Log formats of --log-format: text (key=value, for people) or json (one object per line, for log
// collectors).
const (
	logFormatText = "text"
	logFormatJSON = "json"
)

// newLogger is the text logger on stderr (MERIDIAN_LOG_LEVEL=debug for debug lines).
func newLogger() *slog.Logger {
	l, _ := newLoggerTo(os.Stderr, logFormatText)
	return l
}

// newLoggerTo builds the process's logger in the given format.
func newLoggerTo(w io.Writer, format string) (*slog.Logger, error) {
	level := slog.LevelInfo
	if os.Getenv("MERIDIAN_LOG_LEVEL") == "debug" {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case logFormatText, "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case logFormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want %s or %s", format, logFormatText, logFormatJSON)
	}
}
