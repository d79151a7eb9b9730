package main

import (
	"math"
	"strconv"
	"testing"
	"time"
)

// TestTimeAndSizeFlagsRefuseValuesThatOverflow: a time or size flag whose seconds or bytes do not
// fit an int64 is refused, not wrapped into a small value the broker would accept: --size 16777216T
// was 0 bytes (no retention at all) and --ttl 30500568904944w 579584 s (less than a week).
func TestTimeAndSizeFlagsRefuseValuesThatOverflow(t *testing.T) {
	for _, c := range []struct {
		in   string
		unit int64
	}{
		{"30500568904944w", 1},
		{"213503982334602d", 1},
		{strconv.FormatInt(math.MaxInt64/604800+1, 10) + "w", 1},
		{strconv.FormatInt(math.MaxInt64/60+1, 10), 60},
		{strconv.FormatInt(math.MaxInt64, 10) + "m", 1},
	} {
		if got, err := parseSeconds(c.in, c.unit); err == nil {
			t.Errorf("parseSeconds(%q, %d) = %d, want an error", c.in, c.unit, got)
		}
	}
	for _, c := range []struct {
		in   string
		unit int64
		want int64
	}{
		{"1w", 1, 604800},
		{strconv.FormatInt(math.MaxInt64/604800, 10) + "w", 1, math.MaxInt64 / 604800 * 604800},
		{strconv.FormatInt(math.MaxInt64/60, 10), 60, math.MaxInt64 / 60 * 60},
	} {
		if got, err := parseSeconds(c.in, c.unit); err != nil || got != c.want {
			t.Errorf("parseSeconds(%q, %d) = %d, %v; want %d", c.in, c.unit, got, err, c.want)
		}
	}
	for _, in := range []string{"16777216T", "16777217T", "9007199254740992K"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
	if got, err := parseBytes("8388607T"); err != nil || got != 8388607<<40 {
		t.Errorf("parseBytes(8388607T) = %d, %v; want %d", got, err, int64(8388607)<<40)
	}
}

// TestParseWhenSaturatesALongAgo: a time given as seconds before now that is longer ago than a
// Duration holds is the earliest time a Duration reaches, not a wrapped one: 18446744074 s ago was
// 290 ms ago, and a cursor reset to it skipped the whole backlog.
func TestParseWhenSaturatesALongAgo(t *testing.T) {
	for _, in := range []string{"18446744074", "18446744074s", "9223372037", "15250284452w"} {
		got, err := parseWhen(in)
		if err != nil || got.After(time.Now().Add(-290*365*24*time.Hour)) {
			t.Errorf("parseWhen(%q) = %v, %v; want a time more than 290 years ago", in, got, err)
		}
	}
	if got, err := parseWhen("1h"); err != nil || time.Since(got) < time.Hour || time.Since(got) > 2*time.Hour {
		t.Errorf("parseWhen(1h) = %v, %v", got, err)
	}
}
