//go:build !linux

package main

// reexecForPollingSysmon does nothing off Linux: the figures behind it were measured on Linux only
// (sysmon.go).
func reexecForPollingSysmon([]string) {}
