package node

import (
	"runtime"
	"testing"
)

func TestSpareDiskWaitProc(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	restore := SpareDiskWaitProc(func(string) string { return "" })
	if got := runtime.GOMAXPROCS(0); got != before+1 {
		t.Errorf("GOMAXPROCS %d, want %d", got, before+1)
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("restored to %d, want %d", got, before)
	}
	SpareDiskWaitProc(func(k string) string {
		if k == "GOMAXPROCS" {
			return "7"
		}
		return ""
	})()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("with GOMAXPROCS set: %d, want %d (unchanged)", got, before)
	}
}
