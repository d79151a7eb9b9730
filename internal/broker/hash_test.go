package broker

import "testing"

func TestMurmur3KnownVectors(t *testing.T) {
	tests := []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"", 0, 0},
		{"", 1, 0x514e28b7},
		{"hello", 0, 0x248bfa47},
		{"Hello, world!", 0x9747b28c, 0x24884cba},
		{"The quick brown fox jumps over the lazy dog", 0x9747b28c, 0x2fa826cd},
	}
	for _, tt := range tests {
		if got := murmur3([]byte(tt.in), tt.seed); got != tt.want {
			t.Errorf("murmur3(%q, %x) = %x, want %x", tt.in, tt.seed, got, tt.want)
		}
	}
	if h := keyHash([]byte("key")); h >= 65536 {
		t.Fatalf("keyHash out of range: %d", h)
	}
}
