package broker

import (
	"context"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// peekNth is what the admin peek does with the broker's answer: the n-th backlog entry.
func peekNth(top *Topic, sub string, n int) (mtypes.Entry, bool, error) {
	return top.PeekEntry(context.Background(), sub, n)
}
