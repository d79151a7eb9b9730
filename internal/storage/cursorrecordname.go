package storage

import "fmt"

// CursorRecordName is the name of the cursor an exported cursor record (LedgerExport.Cursors)
// describes. A record that does not decode is ErrCorrupt.
func CursorRecordName(record []byte) (string, error) {
	if len(record) < 2 || record[0] != cState {
		return "", fmt.Errorf("%w: not a cursor state record", ErrCorrupt)
	}
	st, err := decodeCursorState(record[1:])
	if err != nil {
		return "", err
	}
	return st.name, nil
}
