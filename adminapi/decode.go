package adminapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodeStrict decodes one JSON value from data into v, refusing unknown field names (at every depth)
// and trailing data. An empty body (or only whitespace) returns ErrEmptyBody.
func DecodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return ErrEmptyBody
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeJSONError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid JSON: unexpected data after the value")
	}
	return nil
}

// ErrEmptyBody is returned by DecodeStrict for an empty body.
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
		// encoding/json reports unknown fields as `json: unknown field "x"`.
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
