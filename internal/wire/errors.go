package wire

import (
	"errors"
	"fmt"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Sentinel errors, one per pulsarpb.ServerError code. Code that fails for a reason a client must
// see wraps the matching sentinel (fmt.Errorf("...: %w", wire.ErrTopicNotFound)); the server turns
// it into the code with ServerErrorOf. Errors received from a broker (client side) are built with
// ErrorFromServer and match the same sentinels with errors.Is.
var (
	ErrUnknown                               = errors.New("unknown error")
	ErrMetadata                              = errors.New("metadata error")
	ErrPersistence                           = errors.New("persistence error")
	ErrAuthentication                        = errors.New("authentication error")
	ErrAuthorization                         = errors.New("authorization error")
	ErrConsumerBusy                          = errors.New("consumer busy")
	ErrServiceNotReady                       = errors.New("service not ready")
	ErrProducerBlockedQuotaExceeded          = errors.New("producer blocked: backlog quota exceeded")
	ErrProducerBlockedQuotaExceededException = errors.New("producer blocked: backlog quota exceeded (exception)")
	ErrChecksum                              = errors.New("checksum mismatch")
	ErrUnsupportedVersion                    = errors.New("unsupported protocol version")
	ErrTopicNotFound                         = errors.New("topic not found")
	ErrSubscriptionNotFound                  = errors.New("subscription not found")
	ErrConsumerNotFound                      = errors.New("consumer not found")
	ErrTooManyRequests                       = errors.New("too many requests")
	ErrTopicTerminated                       = errors.New("topic terminated")
	ErrProducerBusy                          = errors.New("producer busy")
	ErrInvalidTopicName                      = errors.New("invalid topic name")
	ErrIncompatibleSchema                    = errors.New("incompatible schema")
	ErrConsumerAssign                        = errors.New("consumer assign error")
	ErrTransactionCoordinatorNotFound        = errors.New("transaction coordinator not found")
	ErrInvalidTxnStatus                      = errors.New("invalid transaction status")
	ErrNotAllowed                            = errors.New("not allowed")
	ErrTransactionConflict                   = errors.New("transaction conflict")
	ErrTransactionNotFound                   = errors.New("transaction not found")
	ErrProducerFenced                        = errors.New("producer fenced")
)

// Errors without a code of their own. They map to the code a Pulsar client reacts to correctly.
var (
	// ErrTopicMigrated: the topic moved to another cluster. The protocol signals this with the
	// TOPIC_MIGRATED command, not a code; where only a code fits, ServiceNotReady makes the client
	// look the topic up again.
	ErrTopicMigrated = errors.New("topic migrated")
	// ErrTooLarge: a message above the negotiated maximum. Pulsar answers NotAllowedError.
	ErrTooLarge = errors.New("message too large")
)

// errorTable is the one mapping between codes and sentinels. Order matters only for
// ServerErrorOf: the first sentinel an error matches decides its code.
var errorTable = []struct {
	code pulsarpb.ServerError
	err  error
}{
	{pulsarpb.ServerError_UnknownError, ErrUnknown},
	{pulsarpb.ServerError_MetadataError, ErrMetadata},
	{pulsarpb.ServerError_PersistenceError, ErrPersistence},
	{pulsarpb.ServerError_AuthenticationError, ErrAuthentication},
	{pulsarpb.ServerError_AuthorizationError, ErrAuthorization},
	{pulsarpb.ServerError_ConsumerBusy, ErrConsumerBusy},
	{pulsarpb.ServerError_ServiceNotReady, ErrServiceNotReady},
	{pulsarpb.ServerError_ProducerBlockedQuotaExceededError, ErrProducerBlockedQuotaExceeded},
	{pulsarpb.ServerError_ProducerBlockedQuotaExceededException, ErrProducerBlockedQuotaExceededException},
	{pulsarpb.ServerError_ChecksumError, ErrChecksum},
	{pulsarpb.ServerError_UnsupportedVersionError, ErrUnsupportedVersion},
	{pulsarpb.ServerError_TopicNotFound, ErrTopicNotFound},
	{pulsarpb.ServerError_SubscriptionNotFound, ErrSubscriptionNotFound},
	{pulsarpb.ServerError_ConsumerNotFound, ErrConsumerNotFound},
	{pulsarpb.ServerError_TooManyRequests, ErrTooManyRequests},
	{pulsarpb.ServerError_TopicTerminatedError, ErrTopicTerminated},
	{pulsarpb.ServerError_ProducerBusy, ErrProducerBusy},
	{pulsarpb.ServerError_InvalidTopicName, ErrInvalidTopicName},
	{pulsarpb.ServerError_IncompatibleSchema, ErrIncompatibleSchema},
	{pulsarpb.ServerError_ConsumerAssignError, ErrConsumerAssign},
	{pulsarpb.ServerError_TransactionCoordinatorNotFound, ErrTransactionCoordinatorNotFound},
	{pulsarpb.ServerError_InvalidTxnStatus, ErrInvalidTxnStatus},
	{pulsarpb.ServerError_NotAllowedError, ErrNotAllowed},
	{pulsarpb.ServerError_TransactionConflict, ErrTransactionConflict},
	{pulsarpb.ServerError_TransactionNotFound, ErrTransactionNotFound},
	{pulsarpb.ServerError_ProducerFenced, ErrProducerFenced},
	// Codeless errors last: one-way, error -> code.
	{pulsarpb.ServerError_ServiceNotReady, ErrTopicMigrated},
	{pulsarpb.ServerError_NotAllowedError, ErrTooLarge},
}

// ServerError is an error reported by a broker with a code: what ErrorFromServer returns.
// errors.Is(err, wire.ErrTopicNotFound) holds for a ServerError with code TopicNotFound.
type ServerError struct {
	Code    pulsarpb.ServerError
	Message string
}

// Error renders like the Go Pulsar client does ("server error: <Code>: <message>").
func (e *ServerError) Error() string {
	return fmt.Sprintf("server error: %s: %s", e.Code, e.Message)
}

// Is matches the sentinel of the error's code.
func (e *ServerError) Is(target error) bool {
	return SentinelOf(e.Code) == target
}

// Unwrap returns the sentinel of the error's code, so errors.Is also works through it.
func (e *ServerError) Unwrap() error { return SentinelOf(e.Code) }

// SentinelOf returns the sentinel error of a code; ErrUnknown for codes this build does not know.
func SentinelOf(code pulsarpb.ServerError) error {
	for _, row := range errorTable {
		if row.code == code {
			return row.err
		}
	}
	return ErrUnknown
}

// ServerErrorOf returns the code to send to a client for err: the code of a *ServerError in
// err's chain, else of the first sentinel err matches (errors.Is), else UnknownError.
func ServerErrorOf(err error) pulsarpb.ServerError {
	if err == nil {
		return pulsarpb.ServerError_UnknownError
	}
	var se *ServerError
	if errors.As(err, &se) {
		return se.Code
	}
	for _, row := range errorTable {
		if errors.Is(err, row.err) {
			return row.code
		}
	}
	return pulsarpb.ServerError_UnknownError
}

// ErrorFromServer builds the error for a code and message received from a broker.
func ErrorFromServer(code pulsarpb.ServerError, msg string) error {
	return &ServerError{Code: code, Message: msg}
}
