package adminapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodeBody decodes one JSON value from data into v. Field names v does not define are ignored at
// every depth, as Pulsar's own JSON mapper ignores them, so newer pulsar-admin and pulsarctl versions
// that send fields this broker does not know keep working. Malformed JSON, a wrong JSON type and
// trailing data are refused; an empty body (or only whitespace) returns ErrEmptyBody.
func DecodeBody(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return ErrEmptyBody
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return describeJSONError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid JSON: unexpected data after the value")
	}
	return nil
}

// ErrEmptyBody is returned by DecodeBody for an empty body.
var ErrEmptyBody = errors.New("empty body")

func describeJSONError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("invalid JSON at offset %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Errorf("invalid JSON: field %q: cannot use %s as %s", typ.Field, typ.Value, typ.Type)
		}
		return fmt.Errorf("invalid JSON: cannot use %s as %s", typ.Value, typ.Type)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("invalid JSON: unexpected end of body")
	default:
		return fmt.Errorf("invalid JSON: %s", trimJSONPrefix(err.Error()))
	}
}

func trimJSONPrefix(s string) string {
	const p = "json: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
