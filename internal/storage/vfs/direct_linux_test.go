package vfs

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDirectWrite appends 256 KiB blocks to a file on the real file system (the temporary
// directory), through an O_DIRECT handle and through a buffered one, without syncing and with an
// fdatasync after every MiB. The file is truncated to zero every 64 MiB, as a segment's space is
// given back. Besides MB/s it reports the process's system and user CPU per block (getrusage), the
// cost direct writes exist to cut.
func BenchmarkDirectWrite(b *testing.B) {
	const block, rotate, syncEvery = 256 << 10, 64 << 20, 1 << 20
	for _, mode := range []string{"direct", "buffered"} {
		for _, sync := range []bool{false, true} {
			name := mode
			if sync {
				name += "+datasync1MiB"
			}
			b.Run(name, func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "seg")
				bf, err := OS{}.OpenFile(path, ReadWrite|Create|Excl)
				if err != nil {
					b.Fatal(err)
				}
				defer bf.Close()
				f := bf
				if mode == "direct" {
					d, err := OpenDirect(OS{}, path)
					if errors.Is(err, ErrDirectUnsupported) {
						b.Skip(err)
					} else if err != nil {
						b.Fatal(err)
					}
					defer d.Close()
					f = d
				}
				buf := AlignedBuffer(block)
				for i := range buf {
					buf[i] = byte(i)
				}
				b.SetBytes(block)
				var before, after syscall.Rusage
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				var off int64
				for range b.N {
					if off == rotate {
						if err := f.Truncate(0); err != nil {
							b.Fatal(err)
						}
						off = 0
					}
					if _, err := f.WriteAt(buf, off); err != nil {
						b.Fatal(err)
					}
					off += block
					if sync && off%syncEvery == 0 {
						if err := DataSync(f); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
					b.Fatal(err)
				}
				cpu := func(a, b syscall.Timeval) float64 {
					return float64(time.Duration(a.Nano() - b.Nano()).Microseconds())
				}
				b.ReportMetric(cpu(after.Stime, before.Stime)/float64(b.N), "sys-µs/op")
				b.ReportMetric(cpu(after.Utime, before.Utime)/float64(b.N), "user-µs/op")
			})
		}
	}
}
