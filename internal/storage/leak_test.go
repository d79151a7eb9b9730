package storage

import (
	"testing"

	"go.uber.org/goleak"
)

func runWithLeakCheck(m *testing.M) { goleak.VerifyTestMain(m) }
