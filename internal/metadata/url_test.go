package metadata

import (
	"reflect"
	"testing"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		in   string
		want Location
		bad  bool
	}{
		{in: "", want: Location{Kind: "local"}},
		{in: "local", want: Location{Kind: "local"}},
		{in: "memory", want: Location{Kind: "memory"}},
		{in: "etcd://h1:2379,h2:2379", want: Location{Kind: "etcd", Endpoints: []string{"h1:2379", "h2:2379"}, Prefix: "/meridian"}},
		{in: "etcd://h1/geo/prod", want: Location{Kind: "etcd", Endpoints: []string{"h1:2379"}, Prefix: "/geo/prod"}},
		{in: "etcd://127.0.0.1:2379/x/", want: Location{Kind: "etcd", Endpoints: []string{"127.0.0.1:2379"}, Prefix: "/x"}},
		{in: "etcd://", bad: true},
		{in: "etcd://a,,b", bad: true},
		{in: "http://h:2379", bad: true},
		{in: "etcd://h/a//b", want: Location{Kind: "etcd", Endpoints: []string{"h:2379"}, Prefix: "/a/b"}},
	}
	for _, c := range cases {
		got, err := ParseURL(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("ParseURL(%q) = %+v, want an error", c.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"/a", "/admin/clusters/east", "/a b/ü"} {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "/", "a", "/a/", "//a", "/a\x00", "/\xff"} {
		if err := ValidateKey(k); err == nil {
			t.Errorf("ValidateKey(%q) accepted", k)
		}
	}
}
