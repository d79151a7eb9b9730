package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseReadsPulsarsFormat(t *testing.T) {
	in := "\xef\xbb\xbf# Pulsar broker.conf excerpt\n" +
		"\n" +
		"clusterName=standalone\n" +
		"   ! a Java properties comment\n" +
		"  brokerServicePort = 6650  \r\n" +
		"brokerServicePortTls=\n" +
		"brokerClientAuthenticationParameters={\"tlsCertFile\":\"/c.pem\",\"k\":\"a=b\"}\n" +
		"tokenSecretKey=data:;base64,c2VjcmV0==\n" +
		"path.with.dots=C:\\temp\\x\n" +
		"last=value without newline"
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{"clusterName", "standalone", 3},
		{"brokerServicePort", "6650", 5},
		{"brokerServicePortTls", "", 6},
		{"brokerClientAuthenticationParameters", `{"tlsCertFile":"/c.pem","k":"a=b"}`, 7},
		{"tokenSecretKey", "data:;base64,c2VjcmV0==", 8},
		{"path.with.dots", `C:\temp\x`, 9},
		{"last", "value without newline", 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseRefusesWhatItCannotReadExactly(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a=1\njust words\n", "line 2: \"just words\" is not key=value"},
		{"=value\n", "line 1: a line starts with '='"},
		{"two words=x\n", `line 1: key "two words"`},
		{"key\x01=x\n", "line 1: key"},
		{"a=1\nb=first \\\n  second\n", "line 2: b: the value ends with a backslash"},
		{"a=\xff\xfe\n", "line 1: a: the value is not valid UTF-8"},
		{strings.Repeat("#", MaxFileBytes+1), "larger than"},
	} {
		_, err := Parse(strings.NewReader(tc.in))
		var pe *ParseError
		if err == nil || !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.40q) = %v, want a ParseError containing %q", tc.in, err, tc.want)
		}
	}
}

func TestParseEmptyFile(t *testing.T) {
	got, err := Parse(strings.NewReader("# only comments\n\n"))
	if err != nil || len(got) != 0 {
		t.Fatalf("Parse = %v, %v; want nothing", got, err)
	}
}
