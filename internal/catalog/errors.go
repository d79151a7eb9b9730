package catalog

import (
	"errors"
	"fmt"
)

// Error kinds. Every error the catalog returns for a refused operation is an *Error whose Kind is one
// of these (test with errors.Is); the admin API maps them to Pulsar's HTTP statuses
// (404, 409, 412, 403, 400) and uses Error.Msg, which follows Pulsar's wording, as the reason.
var (
	ErrNotFound      = errors.New("not found")           // 404
	ErrAlreadyExists = errors.New("already exists")      // 409
	ErrConflict      = errors.New("conflict")            // 409: not empty, concurrent modification
	ErrPrecondition  = errors.New("precondition failed") // 412: invalid value or reference
	ErrForbidden     = errors.New("forbidden")           // 403: cluster not allowed / unknown for replication
	ErrInvalid       = errors.New("invalid")             // 400: malformed input
)

// Error is a refused catalog operation.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the kind, so errors.Is(err, ErrNotFound) works.
func (e *Error) Unwrap() error { return e.Kind }

func refuse(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
