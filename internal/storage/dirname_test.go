package storage

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// legacyHashedDirName is the directory name earlier builds gave a name whose escaped form exceeds
// 200 bytes: "~" + hex(crc32c) + hex(crc32) + "-" + the first 120 escaped bytes.
func legacyHashedDirName(name string) string {
	d, _ := dirName(name)
	return fmt.Sprintf("~%08x%08x-%s", crc([]byte(name)), crc32.ChecksumIEEE([]byte(name)), d[len(d)-120:])
}

// crcCollision returns a name other than victim with the same crc32c and crc32 (so the same
// legacy directory name): both checksums are affine in the message bits, so flipping a
// combination of bits in 12 bytes near the end (96 unknowns, 64 equations) cancels out.
func crcCollision(victim string) string {
	n := len(victim)
	zero := make([]byte, n)
	base := uint64(crc(zero))<<32 | uint64(crc32.ChecksumIEEE(zero))
	const free = 96
	first := n - 16 // the bits flipped are in bytes n-16 .. n-5
	type vec struct {
		v    uint64    // checksum difference
		comb [2]uint64 // which free bits make it up
	}
	var basis [64]*vec
	for i := 0; i < free; i++ {
		d := make([]byte, n)
		d[first+i/8] ^= 1 << (i % 8)
		x := &vec{v: (uint64(crc(d))<<32 | uint64(crc32.ChecksumIEEE(d))) ^ base}
		x.comb[i/64] |= 1 << (i % 64)
		for bit := 63; bit >= 0; bit-- {
			if x.v&(1<<bit) == 0 {
				continue
			}
			if basis[bit] == nil {
				basis[bit] = x
				break
			}
			x.v ^= basis[bit].v
			x.comb[0] ^= basis[bit].comb[0]
			x.comb[1] ^= basis[bit].comb[1]
		}
		if x.v == 0 {
			out := []byte(victim)
			for j := 0; j < free; j++ {
				if x.comb[j/64]&(1<<(j%64)) != 0 {
					out[first+j/8] ^= 1 << (j % 8)
				}
			}
			return string(out)
		}
	}
	panic("no collision")
}

// TestLegacyDirNamesCanBeForcedToCollide shows why the hashed directory names changed: a second
// name with the old name's directory is easy to compute; the new names differ.
func TestLegacyDirNamesCanBeForcedToCollide(t *testing.T) {
	victim := "persistent://public/default/" + strings.Repeat("v", 300)
	attacker := crcCollision(victim)
	if attacker == victim || legacyHashedDirName(attacker) != legacyHashedDirName(victim) {
		t.Fatal("no legacy collision computed")
	}
	a, _ := dirName(attacker)
	v, _ := dirName(victim)
	if a == v {
		t.Fatalf("dirName still collides for %q and %q: %s", victim, attacker, a)
	}
}

// TestLedgerLoadChecksName: a hashed directory whose NAME names another ledger is not loaded
// as this one (the two names would share segments and cursors, and append into one directory).
func TestLedgerLoadChecksName(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	name := "persistent://public/default/" + strings.Repeat("x", 300)
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	d, hashed := dirName(name)
	if !hashed {
		t.Fatal("not hashed")
	}
	writeFileForTest(t, mem, "/data/ledgers/"+d+"/NAME", []byte("persistent://public/default/another"))
	e = openMem(t, mem, nil)
	defer e.Close()
	if _, err := e.OpenLedger(ctx, name); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), d) {
		t.Fatalf("OpenLedger over a directory of another ledger: %v", err)
	}
	if ok, _ := e.LedgerExists(ctx, name); ok {
		t.Fatal("LedgerExists says yes for a directory of another ledger")
	}
}

// TestTornNameFileRewritten: a NAME file whose content was not durable at a crash (a prefix of
// the name, or empty) belongs to the ledger whose hash names the directory: it is written again.
func TestTornNameFileRewritten(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	name := "persistent://public/default/" + strings.Repeat("t", 300)
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, l, 3)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	d, _ := dirName(name)
	writeFileForTest(t, mem, "/data/ledgers/"+d+"/NAME", []byte(name[:17]))
	e = openMem(t, mem, nil)
	defer e.Close()
	l, err = e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.LastConfirmed(); got != ps[2] {
		t.Fatalf("last confirmed %v, want %v", got, ps[2])
	}
	if got := string(readFileForTest(t, mem, "/data/ledgers/"+d+"/NAME")); got != name {
		t.Fatalf("NAME holds %q after the load", got)
	}
}

// TestLegacyHashedDirOpens: a data directory written by a build with the crc-based directory
// names still opens: its ledgers are found under their old directory, and a name whose old
// directory collides with one of them gets a directory of its own.
func TestLegacyHashedDirOpens(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	victim := "persistent://public/default/" + strings.Repeat("v", 300)
	e := openMem(t, mem, nil)
	l, err := e.OpenLedger(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, l, 5)
	c, err := l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MarkDelete(ctx, ps[1]); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Move the directory to the name an earlier build gave it.
	d, _ := dirName(victim)
	legacy := legacyHashedDirName(victim)
	if err := mem.Rename("/data/ledgers/"+d, "/data/ledgers/"+legacy); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/data/ledgers"); err != nil {
		t.Fatal(err)
	}

	e = openMem(t, mem, nil)
	l, err = e.OpenLedger(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	if l.Entries() != 5 || l.Cursor("sub") == nil || l.Cursor("sub").MarkDeletePosition() != ps[1] {
		t.Fatalf("the ledger in its legacy directory: %d entries, cursor %+v", l.Entries(), l.Cursor("sub"))
	}
	more := appendN(t, l, 2)
	names, err := e.ListLedgers(ctx, "persistent://")
	if err != nil || len(names) != 1 || names[0] != victim {
		t.Fatalf("ListLedgers: %v %v", names, err)
	}
	attacker := crcCollision(victim)
	a, err := e.OpenLedger(ctx, attacker)
	if err != nil {
		t.Fatal(err)
	}
	if a.Entries() != 0 || len(a.Cursors()) != 0 {
		t.Fatalf("the colliding name sees the other ledger's data: %d entries", a.Entries())
	}
	appendN(t, a, 1)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Stat("/data/ledgers/" + legacy + "/" + fmt.Sprintf("%016x.seg", more[0].LedgerID)); err != nil {
		t.Fatalf("appends after the upgrade are not in the legacy directory: %v", err)
	}

	// After a crash the journal replay finds the legacy directory too.
	e = openMem(t, mem, nil)
	l, err = e.OpenLedger(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 1)
	crashed := mem.Crash(nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, crashed, nil)
	defer e.Close()
	l, err = e.OpenLedger(ctx, victim)
	if err != nil || l.Entries() != 8 {
		t.Fatalf("after a crash: %v, %d entries", err, l.Entries())
	}
	if err := e.DeleteLedger(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.Stat("/data/ledgers/" + legacy); !vfs.IsNotExist(err) {
		t.Fatalf("the legacy directory after DeleteLedger: %v", err)
	}
	l, err = e.OpenLedger(ctx, victim)
	if err != nil || l.Entries() != 0 {
		t.Fatalf("recreated after the delete: %v, %d entries", err, l.Entries())
	}
}
