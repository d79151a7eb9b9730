package storage

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestDirNameEscapes: dirName escapes exactly as the %XX form it documents, for every byte and
// for random names (short, and long enough to be hashed), and nameFromDir reverses it.
func TestDirNameEscapes(t *testing.T) {
	reference := func(name string) string {
		var b strings.Builder
		for i := 0; i < len(name); i++ {
			c := name[i]
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || (c == '.' && i > 0) {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String()
	}
	var names []string
	for c := 0; c < 256; c++ {
		names = append(names, string([]byte{byte(c)}), "x"+string([]byte{byte(c)}))
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for i := 0; i < 500; i++ {
		b := make([]byte, rng.IntN(150))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		names = append(names, string(b), "persistent://public/default/"+string(b))
	}
	for _, name := range names {
		dir, hashed := dirName(name)
		want := reference(name)
		if hashed != (len(want) > 200) || (!hashed && dir != want) || (hashed && !strings.HasSuffix(dir, "-"+want[:120])) {
			t.Fatalf("dirName(%q) = %q %v, want %q", name, dir, hashed, want)
		}
		if back, ok := nameFromDir(dir); !hashed && name != "" && (!ok || back != name) {
			t.Fatalf("nameFromDir(%q) = %q %v, want %q", dir, back, ok, name)
		}
	}
}

func BenchmarkDirName(b *testing.B) {
	for b.Loop() {
		dirName("public/default/persistent/catch-up-topic-partition-3")
	}
}
