// Package protocompat proves that Meridian's own description of the Pulsar binary protocol
// (internal/wire/pulsarpb, package meridian.pulsarwire) matches the one compiled into
// pulsar-client-go v0.19.0 (PulsarApi.proto, package pulsar.proto) field by field: every message and
// enum the client knows exists in ours with the same field numbers, kinds, cardinalities, defaults
// and enum values. Names may differ only by package.
package protocompat

import (
	"fmt"
	"sort"
	"testing"

	_ "github.com/apache/pulsar-client-go/pulsar" // registers PulsarApi.proto in protoregistry.GlobalFiles
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOurProtoMatchesTheClients(t *testing.T) {
	theirs, err := protoregistry.GlobalFiles.FindFileByPath("PulsarApi.proto")
	if err != nil {
		t.Fatalf("pulsar-client-go's PulsarApi.proto is not registered: %v", err)
	}
	ours := pulsarpb.File_pulsar_wire_proto
	var problems, missing []string
	compareEnums(theirs.Enums(), ours, &problems, &missing)
	compareMessages(theirs.Messages(), ours, &problems, &missing)
	if compared == 0 {
		t.Fatal("no message was compared: name mapping broken")
	}
	t.Logf("compared %d messages and their fields", compared)
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Logf("%d types of the client's protocol are not in ours (features not implemented): %v", len(missing), missing)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// ourName maps a full name in package pulsar.proto to ours.
func ourName(ours protoreflect.FileDescriptor, theirs protoreflect.FullName) protoreflect.FullName {
	rel := theirs[len("pulsar.proto."):]
	return protoreflect.FullName(string(ours.Package()) + "." + string(rel))
}

func findMessage(ours protoreflect.FileDescriptor, name protoreflect.FullName) protoreflect.MessageDescriptor {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(ourName(ours, name))
	if err != nil {
		return nil
	}
	md, _ := d.(protoreflect.MessageDescriptor)
	return md
}

func findEnum(ours protoreflect.FileDescriptor, name protoreflect.FullName) protoreflect.EnumDescriptor {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(ourName(ours, name))
	if err != nil {
		return nil
	}
	ed, _ := d.(protoreflect.EnumDescriptor)
	return ed
}

func compareEnums(list protoreflect.EnumDescriptors, ours protoreflect.FileDescriptor, problems, missing *[]string) {
	for i := 0; i < list.Len(); i++ {
		theirs := list.Get(i)
		mine := findEnum(ours, theirs.FullName())
		if mine == nil {
			*missing = append(*missing, string(theirs.FullName()))
			continue
		}
		for j := 0; j < theirs.Values().Len(); j++ {
			v := theirs.Values().Get(j)
			mv := mine.Values().ByName(v.Name())
			switch {
			case mv == nil:
				*problems = append(*problems, fmt.Sprintf("enum %s: value %s (%d) missing", theirs.FullName(), v.Name(), v.Number()))
			case mv.Number() != v.Number():
				*problems = append(*problems, fmt.Sprintf("enum %s: value %s is %d, the client's is %d", theirs.FullName(), v.Name(), mv.Number(), v.Number()))
			}
		}
	}
}

var compared int

func compareMessages(list protoreflect.MessageDescriptors, ours protoreflect.FileDescriptor, problems, missing *[]string) {
	for i := 0; i < list.Len(); i++ {
		theirs := list.Get(i)
		compareEnums(theirs.Enums(), ours, problems, missing)
		compareMessages(theirs.Messages(), ours, problems, missing)
		mine := findMessage(ours, theirs.FullName())
		if mine == nil {
			*missing = append(*missing, string(theirs.FullName()))
			continue
		}
		compared++
		for j := 0; j < theirs.Fields().Len(); j++ {
			f := theirs.Fields().Get(j)
			mf := mine.Fields().ByNumber(f.Number())
			where := fmt.Sprintf("message %s field %s (%d)", theirs.FullName(), f.Name(), f.Number())
			if mf == nil {
				*problems = append(*problems, where+": missing in ours")
				continue
			}
			if mf.Name() != f.Name() {
				*problems = append(*problems, fmt.Sprintf("%s: ours is named %s", where, mf.Name()))
			}
			if mf.Kind() != f.Kind() {
				*problems = append(*problems, fmt.Sprintf("%s: kind %v, the client's %v", where, mf.Kind(), f.Kind()))
			}
			if mf.Cardinality() != f.Cardinality() {
				*problems = append(*problems, fmt.Sprintf("%s: cardinality %v, the client's %v", where, mf.Cardinality(), f.Cardinality()))
			}
			if mf.HasDefault() != f.HasDefault() || f.HasDefault() && fmt.Sprint(mf.Default().Interface()) != fmt.Sprint(f.Default().Interface()) {
				*problems = append(*problems, fmt.Sprintf("%s: default %v, the client's %v", where, mf.Default().Interface(), f.Default().Interface()))
			}
			if f.IsPacked() != mf.IsPacked() {
				*problems = append(*problems, fmt.Sprintf("%s: packed %v, the client's %v", where, mf.IsPacked(), f.IsPacked()))
			}
			if (f.Message() != nil) != (mf.Message() != nil) || f.Message() != nil && f.Message().Name() != mf.Message().Name() {
				*problems = append(*problems, fmt.Sprintf("%s: message type differs", where))
			}
			if (f.Enum() != nil) != (mf.Enum() != nil) || f.Enum() != nil && f.Enum().Name() != mf.Enum().Name() {
				*problems = append(*problems, fmt.Sprintf("%s: enum type differs", where))
			}
		}
	}
}
