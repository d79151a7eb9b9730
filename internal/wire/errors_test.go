package wire

import (
	"errors"
	"fmt"
	"testing"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func TestErrorTableCoversEveryCode(t *testing.T) {
	for num, name := range pulsarpb.ServerError_name {
		code := pulsarpb.ServerError(num)
		s := SentinelOf(code)
		if code != pulsarpb.ServerError_UnknownError && s == ErrUnknown {
			t.Errorf("code %s has no sentinel", name)
		}
		if got := ServerErrorOf(fmt.Errorf("wrapped: %w", s)); got != code {
			t.Errorf("ServerErrorOf(wrapped %v) = %s, want %s", s, got, code)
		}
		back := ErrorFromServer(code, "boom")
		if !errors.Is(back, s) {
			t.Errorf("ErrorFromServer(%s) does not match its sentinel", name)
		}
		if ServerErrorOf(fmt.Errorf("ctx: %w", back)) != code {
			t.Errorf("code %s lost through ErrorFromServer", name)
		}
	}
}

func TestServerErrorOfDefaults(t *testing.T) {
	if got := ServerErrorOf(errors.New("other")); got != pulsarpb.ServerError_UnknownError {
		t.Fatalf("unknown error mapped to %s", got)
	}
	if got := ServerErrorOf(nil); got != pulsarpb.ServerError_UnknownError {
		t.Fatalf("nil mapped to %s", got)
	}
	if got := ServerErrorOf(fmt.Errorf("x: %w", ErrTopicMigrated)); got != pulsarpb.ServerError_ServiceNotReady {
		t.Fatalf("ErrTopicMigrated mapped to %s", got)
	}
	if got := ServerErrorOf(ErrTooLarge); got != pulsarpb.ServerError_NotAllowedError {
		t.Fatalf("ErrTooLarge mapped to %s", got)
	}
	// A code unknown to this build still round-trips through *ServerError.
	e := ErrorFromServer(pulsarpb.ServerError(99), "future")
	if ServerErrorOf(e) != 99 || !errors.Is(e, ErrUnknown) {
		t.Fatalf("unknown code: %v", e)
	}
	if got := ErrorFromServer(pulsarpb.ServerError_TopicNotFound, "no such topic").Error(); got != "server error: TopicNotFound: no such topic" {
		t.Fatalf("text %q", got)
	}
}
