package vfs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// fillBlock returns an aligned buffer of n bytes of a pattern that differs per seed and offset.
func fillBlock(n int, seed byte) []byte {
	b := AlignedBuffer(n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

// readAll reads f's whole content through f (a buffered handle).
func readAll(t *testing.T, f File) []byte {
	t.Helper()
	n, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if n > 0 {
		if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
			t.Fatal(err)
		}
	}
	return b
}

func directWrite(t *testing.T, f File, b []byte, off int64) {
	t.Helper()
	if n, err := f.WriteAt(b, off); err != nil || n != len(b) {
		t.Fatalf("direct write of %d bytes at %d: %d, %v", len(b), off, n, err)
	}
}

// wantMisaligned checks that err is the refusal of a misaligned direct call on the file at name.
func wantMisaligned(t *testing.T, what string, err error, name string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("%s: %v, want EINVAL", what, err)
	}
	if !strings.Contains(err.Error(), name) {
		t.Fatalf("%s: error %q does not name the file %s", what, err, name)
	}
}

// checkDirectFile runs the behaviours every direct file must have against fsys, with name an
// existing empty file and buffered an open buffered handle of it.
func checkDirectFile(t *testing.T, fsys FS, name string, buffered File) {
	t.Helper()
	if _, err := OpenDirect(fsys, name+".missing"); !IsNotExist(err) || errors.Is(err, ErrDirectUnsupported) {
		t.Fatalf("OpenDirect of a missing file: %v, want not-exist", err)
	}
	d, err := OpenDirect(fsys, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()

	// Aligned writes at 0 and past the end extend the file (with a hole read as zeros).
	var want []byte
	b0 := fillBlock(DirectAlign, 1)
	directWrite(t, d, b0, 0)
	want = append(want, b0...)
	b2 := fillBlock(2*DirectAlign, 2)
	directWrite(t, d, b2, 2*DirectAlign)
	want = append(append(want, make([]byte, DirectAlign)...), b2...)
	if got := readAll(t, buffered); !bytes.Equal(got, want) {
		t.Fatalf("buffered handle reads %d bytes differing from the %d written directly", len(got), len(want))
	}
	if n, err := d.Size(); err != nil || n != int64(len(want)) {
		t.Fatalf("Size of the direct handle: %d, %v, want %d", n, err, len(want))
	}
	if err := DataSync(d); err != nil {
		t.Fatal(err)
	}

	// Misaligned offset, length and buffer each fail and leave the file alone. Offsets and
	// lengths are not multiples of 512 either, the smallest logical block size O_DIRECT may accept.
	blk := fillBlock(2*DirectAlign, 9)
	_, err = d.WriteAt(blk[:DirectAlign], 100)
	wantMisaligned(t, "write at a misaligned offset", err, name)
	_, err = d.WriteAt(blk[:100], 0)
	wantMisaligned(t, "write of a misaligned length", err, name)
	_, err = d.WriteAt(blk[100:100+DirectAlign], 0)
	wantMisaligned(t, "write from a misaligned buffer", err, name)
	// (Not tested: a misaligned length spanning several blocks. ext4 checks alignment per extent
	// and may write the aligned leading blocks before it fails: the package doc says so.)
	if got := readAll(t, buffered); !bytes.Equal(got, want) {
		t.Fatalf("the file changed after refused misaligned writes: %d bytes, want %d", len(got), len(want))
	}
	_, err = d.ReadAt(blk[:100], 0)
	wantMisaligned(t, "read of a misaligned length", err, name)

	// Rewrite the partial last block as the engine does: the same bytes up to the logical end (in
	// the last block: 1000 bytes), then new ones, zero padded to the block's end.
	logicalEnd := 3*DirectAlign + 1000
	last := AlignedBuffer(DirectAlign)
	copy(last, want[3*DirectAlign:logicalEnd])
	directWrite(t, d, last, 3*DirectAlign) // bytes after 1000 become zeros
	copy(want[logicalEnd:], make([]byte, len(want)-logicalEnd))
	if got := readAll(t, buffered); !bytes.Equal(got, want) { // the buffered handle had them cached
		t.Fatal("buffered handle does not see the zero padding of the rewritten last block")
	}
	next := fillBlock(DirectAlign, 7)
	copy(last[1000:], next[:DirectAlign-1000])
	directWrite(t, d, last, 3*DirectAlign)
	second := AlignedBuffer(DirectAlign)
	copy(second, next[DirectAlign-1000:])
	directWrite(t, d, second, 4*DirectAlign)
	want = append(want[:logicalEnd], next...)
	want = append(want, make([]byte, 5*DirectAlign-len(want))...)
	if got := readAll(t, buffered); !bytes.Equal(got, want) {
		t.Fatal("rewritten last block and its successor do not read back")
	}

	// Truncate to the logical (unaligned) size; an aligned direct read of the last block stops there.
	logicalEnd = 4*DirectAlign + 1000
	if err := d.Truncate(int64(logicalEnd)); err != nil {
		t.Fatal(err)
	}
	want = want[:logicalEnd]
	if got := readAll(t, buffered); !bytes.Equal(got, want) {
		t.Fatalf("after Truncate to %d: %d bytes, want %d", logicalEnd, len(got), len(want))
	}
	rb := AlignedBuffer(DirectAlign)
	if n, err := d.ReadAt(rb, 4*DirectAlign); n != 1000 || err != io.EOF || !bytes.Equal(rb[:n], want[4*DirectAlign:]) {
		t.Fatalf("direct read of the last block: %d, %v, want 1000, EOF and the data", n, err)
	}
	if err := DataSync(d); err != nil {
		t.Fatal(err)
	}
}

// TestOSDirectFile: direct writes on the real file system (the test's temporary directory: ext4
// on the project's VM) extend the file, read back through a buffered handle that had the old
// pages cached, refuse misaligned calls with EINVAL (naming the file) without changing anything,
// rewrite a last block, and truncate to an unaligned size.
func TestOSDirectFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "seg")
	buffered, err := OS{}.OpenFile(name, ReadWrite|Create|Excl)
	if err != nil {
		t.Fatal(err)
	}
	defer buffered.Close()
	if d, err := OpenDirect(OS{}, name); errors.Is(err, ErrDirectUnsupported) {
		t.Skipf("the temporary directory's file system has no direct I/O: %v", err)
	} else if err != nil {
		t.Fatal(err)
	} else {
		if _, ok := d.(osFile); !ok {
			t.Fatalf("OpenDirect returned a %T, want an osFile", d)
		}
		d.Close()
	}
	checkDirectFile(t, OS{}, name, buffered)
}

// TestMemDirectFile: the same behaviours on Mem.
func TestMemDirectFile(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	buffered, err := m.OpenFile("/d/seg", ReadWrite|Create|Excl)
	if err != nil {
		t.Fatal(err)
	}
	defer buffered.Close()
	checkDirectFile(t, m, "/d/seg", buffered)
}

// TestMemDirectAlignment: a Mem direct file refuses each kind of misalignment with ErrMisaligned
// (before injection, changing nothing), accepts an empty write, and its other methods work.
func TestMemDirectAlignment(t *testing.T) {
	m, _ := newSyncedFile(t, []byte("durable"))
	d, err := m.OpenDirect("/f")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m.SetInjector(func(op Op, name string) error { return EIO })
	buf := AlignedBuffer(2 * DirectAlign)
	for _, c := range []struct {
		what string
		p    []byte
		off  int64
	}{
		{"offset 512", buf[:DirectAlign], 512},
		{"offset 4095", buf[:DirectAlign], DirectAlign - 1},
		{"length 512", buf[:512], 0},
		{"length 4097", buf[:DirectAlign+1], 0},
		{"buffer +512", buf[512 : 512+DirectAlign], 0},
		{"buffer +1", buf[1 : 1+DirectAlign], DirectAlign},
	} {
		if _, err := d.WriteAt(c.p, c.off); !errors.Is(err, ErrMisaligned) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("write, %s: %v, want ErrMisaligned", c.what, err)
		}
		if _, err := d.ReadAt(c.p, c.off); !errors.Is(err, ErrMisaligned) {
			t.Errorf("read, %s: %v, want ErrMisaligned", c.what, err)
		}
	}
	// Aligned calls reach the injector.
	if _, err := d.WriteAt(buf[:DirectAlign], 0); !errors.Is(err, EIO) {
		t.Fatalf("aligned write under an EIO injector: %v", err)
	}
	if _, err := d.ReadAt(buf[:DirectAlign], 0); !errors.Is(err, EIO) {
		t.Fatalf("aligned read under an EIO injector: %v", err)
	}
	if err := d.Sync(); !errors.Is(err, EIO) {
		t.Fatalf("Sync under an EIO injector: %v", err)
	}
	m.SetInjector(nil)
	if n, err := d.WriteAt(nil, 3); n != 0 || err != nil {
		t.Fatalf("empty write: %d, %v", n, err)
	}
	if got := memContent(t, m, "/f"); string(got) != "durable" {
		t.Fatalf("content %q after refused writes", got)
	}
	if err := CheckAligned(buf[DirectAlign:], DirectAlign); err != nil {
		t.Fatal(err)
	}
}

// TestMemDirectCrash: direct writes not followed by Sync are dropped or torn by Crash like buffered
// ones (a torn append keeps a prefix of the unsynced bytes, a torn overwrite a prefix of the
// changed range); synced ones survive.
func TestMemDirectCrash(t *testing.T) {
	m := NewMem()
	f, err := m.OpenFile("/seg", ReadWrite|Create)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDirect(m, "/seg")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b0 := fillBlock(DirectAlign, 1)
	directWrite(t, d, b0, 0)
	if err := DataSync(d); err != nil {
		t.Fatal(err)
	}
	b1 := fillBlock(DirectAlign, 2)
	directWrite(t, d, b1, DirectAlign) // unsynced append
	if got := memContent(t, m.Crash(nil), "/seg"); !bytes.Equal(got, b0) {
		t.Fatalf("after a crash: %d bytes, want the %d synced", len(got), len(b0))
	}
	kept := map[int]bool{}
	for seed := range uint64(200) {
		got := memContent(t, m.Crash(rand.New(rand.NewPCG(seed, 3))), "/seg")
		if !bytes.Equal(got[:len(b0)], b0) || !bytes.Equal(got[len(b0):], b1[:len(got)-len(b0)]) {
			t.Fatalf("torn append (seed %d) is not the synced block and a prefix of the next", seed)
		}
		kept[len(got)-len(b0)] = true
	}
	if !kept[0] || len(kept) < 10 {
		t.Fatalf("torn appends kept %d distinct prefixes (none kept: %v)", len(kept), kept[0])
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	// An unsynced direct rewrite of durable blocks tears as a prefix of the changed range.
	over := fillBlock(2*DirectAlign, 5)
	directWrite(t, d, over, 0)
	old := append(append([]byte(nil), b0...), b1...)
	kept = map[int]bool{}
	for seed := range uint64(200) {
		got := memContent(t, m.Crash(rand.New(rand.NewPCG(seed, 4))), "/seg")
		k := 0
		for k < len(got) && got[k] == over[k] {
			k++
		}
		if len(got) != len(old) || !bytes.Equal(got[k:], old[k:]) {
			t.Fatalf("torn overwrite (seed %d) is not a prefix of the new blocks over the old ones", seed)
		}
		kept[k] = true
	}
	if len(kept) < 10 {
		t.Fatalf("torn overwrites kept %d distinct prefixes", len(kept))
	}
	if err := DataSync(d); err != nil {
		t.Fatal(err)
	}
	if got := memContent(t, m.Crash(rand.New(rand.NewPCG(1, 1))), "/seg"); !bytes.Equal(got, over) {
		t.Fatal("synced direct rewrite did not survive a crash")
	}
}

// TestMemDirectUnsupported: SetDirectUnsupported and an OpOpenDirect injection make OpenDirect fail
// (with ErrDirectUnsupported where asked for), handles already open keep working, the setting
// survives a crash, and a file system without DirectOpener is unsupported.
func TestMemDirectUnsupported(t *testing.T) {
	m, f := newSyncedFile(t, nil)
	defer f.Close()
	d, err := m.OpenDirect("/f")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m.SetDirectUnsupported(true)
	if _, err := OpenDirect(m, "/f"); !errors.Is(err, ErrDirectUnsupported) {
		t.Fatalf("OpenDirect with direct I/O off: %v", err)
	}
	directWrite(t, d, AlignedBuffer(DirectAlign), 0)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	crashed := m.Crash(nil)
	if _, err := OpenDirect(crashed, "/f"); !errors.Is(err, ErrDirectUnsupported) {
		t.Fatalf("OpenDirect after a crash of a Mem without direct I/O: %v", err)
	}
	crashed.SetDirectUnsupported(false)
	if d2, err := OpenDirect(crashed, "/f"); err != nil {
		t.Fatal(err)
	} else {
		d2.Close()
	}
	m.SetDirectUnsupported(false)
	m.SetInjector(func(op Op, name string) error {
		if op == OpOpenDirect {
			return ErrDirectUnsupported
		}
		return nil
	})
	if _, err := OpenDirect(m, "/f"); !errors.Is(err, ErrDirectUnsupported) || !strings.Contains(err.Error(), "opendirect") {
		t.Fatalf("OpenDirect with an injected ErrDirectUnsupported: %v", err)
	}
	m.SetInjector(func(op Op, name string) error {
		if op == OpOpenDirect {
			return EIO
		}
		return nil
	})
	if _, err := OpenDirect(m, "/f"); !errors.Is(err, EIO) || errors.Is(err, ErrDirectUnsupported) {
		t.Fatalf("OpenDirect with an injected EIO: %v", err)
	}
	m.SetInjector(nil)
	type plainFS struct{ FS }
	if _, err := OpenDirect(plainFS{m}, "/f"); !errors.Is(err, ErrDirectUnsupported) {
		t.Fatalf("OpenDirect on a file system without DirectOpener: %v", err)
	}
}

// TestAlignedBuffer: the buffer is aligned, zeroed, rounded up, and its capacity ends with it.
func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{0, 1, 511, DirectAlign - 1, DirectAlign, DirectAlign + 1, 256 << 10, 1<<20 + 3} {
		b := AlignedBuffer(n)
		want := (n + DirectAlign - 1) / DirectAlign * DirectAlign
		if len(b) != want || cap(b) != want || AlignUp(n) != want || AlignUp(int64(n)) != int64(want) {
			t.Fatalf("AlignedBuffer(%d): len %d cap %d, want %d", n, len(b), cap(b), want)
		}
		if addr := uintptr(unsafe.Pointer(unsafe.SliceData(b))); addr%DirectAlign != 0 {
			t.Fatalf("AlignedBuffer(%d) starts at %#x", n, addr)
		}
		if bytes.ContainsFunc(b, func(r rune) bool { return r != 0 }) {
			t.Fatalf("AlignedBuffer(%d) is not zeroed", n)
		}
		if err := CheckAligned(b, int64(AlignDown(n))); err != nil {
			t.Fatalf("AlignedBuffer(%d): %v", n, err)
		}
	}
	if AlignDown(int64(DirectAlign+5)) != DirectAlign || AlignDown(5) != 0 {
		t.Fatal("AlignDown")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("AlignedBuffer(-1) did not panic")
		}
	}()
	AlignedBuffer(-1)
}
