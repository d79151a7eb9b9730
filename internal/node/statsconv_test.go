package node

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/broker"
)

// statsRenames are the broker fields whose adminapi (Pulsar) name differs.
var statsRenames = map[string]string{
	"SubscriptionStats.NonContiguousDeletedMessagesRanges": "NonContiguousDeletedMessagesRange",
	"InternalStats.PendingAddEntries":                      "PendingAddEntriesCount",
	"CursorStats.MessagesConsumed":                         "MessagesConsumedCounter",
	"CursorStats.Backlog":                                  "NumberOfEntriesSinceFirstNotAckedMessage",
}

// fillDistinct sets every field reachable from v to a value no other field has (two elements in
// every slice and map), so a field the converter drops or swaps shows up as a mismatch.
func fillDistinct(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	case reflect.String:
		v.SetString(fmt.Sprintf("v%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillDistinct(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fillDistinct(v.Index(i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k := reflect.New(v.Type().Key()).Elem()
			fillDistinct(k, n)
			e := reflect.New(v.Type().Elem()).Elem()
			fillDistinct(e, n)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fillDistinct(v.Field(i), n)
		}
	default:
		panic("fillDistinct: unhandled kind " + v.Kind().String())
	}
}

// sameStats reports every broker field (recursively) whose value is not found in the adminapi field
// of the same name (or its statsRenames name).
func sameStats(path string, src, dst reflect.Value) []string {
	switch src.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if asInt(src) != asInt(dst) {
			return []string{fmt.Sprintf("%s: %v, want %v", path, dst, src)}
		}
	case reflect.Float32, reflect.Float64, reflect.String, reflect.Bool:
		if src.Interface() != dst.Interface() {
			return []string{fmt.Sprintf("%s: %v, want %v", path, dst, src)}
		}
	case reflect.Pointer:
		if dst.Kind() != reflect.Pointer || dst.IsNil() {
			return []string{path + ": not carried over"}
		}
		return sameStats(path, src.Elem(), dst.Elem())
	case reflect.Slice:
		if dst.Len() != src.Len() {
			return []string{fmt.Sprintf("%s: %d elements, want %d", path, dst.Len(), src.Len())}
		}
		var out []string
		for i := range src.Len() {
			out = append(out, sameStats(fmt.Sprintf("%s[%d]", path, i), src.Index(i), dst.Index(i))...)
		}
		return out
	case reflect.Map:
		var out []string
		for _, k := range src.MapKeys() {
			d := dst.MapIndex(k)
			if !d.IsValid() {
				out = append(out, fmt.Sprintf("%s[%v]: missing", path, k))
				continue
			}
			out = append(out, sameStats(fmt.Sprintf("%s[%v]", path, k), src.MapIndex(k), d)...)
		}
		return out
	case reflect.Struct:
		var out []string
		for i := range src.NumField() {
			f := src.Type().Field(i)
			name := f.Name
			if r, ok := statsRenames[src.Type().Name()+"."+f.Name]; ok {
				name = r
			}
			df := dst.FieldByName(name)
			if !df.IsValid() {
				out = append(out, fmt.Sprintf("%s.%s: adminapi.%s has no field %s", path, f.Name, dst.Type().Name(), name))
				continue
			}
			out = append(out, sameStats(path+"."+f.Name, src.Field(i), df)...)
		}
		return out
	}
	return nil
}

func asInt(v reflect.Value) int64 {
	if v.CanInt() {
		return v.Int()
	}
	return int64(v.Uint())
}

// TestStatsConvertersCarryEveryBrokerField fills every broker stats field with a distinct value and
// checks that it arrives in the adminapi field of the same (or the Pulsar) name: a field added to
// the broker's types and not to the converters fails here.
func TestStatsConvertersCarryEveryBrokerField(t *testing.T) {
	var n int
	var ts broker.TopicStats
	fillDistinct(reflect.ValueOf(&ts).Elem(), &n)
	for _, problem := range sameStats("TopicStats", reflect.ValueOf(ts), reflect.ValueOf(adminTopicStats(ts))) {
		t.Error(problem)
	}
	var is broker.InternalStats
	fillDistinct(reflect.ValueOf(&is).Elem(), &n)
	for _, problem := range sameStats("InternalStats", reflect.ValueOf(is), reflect.ValueOf(adminInternalStats(is))) {
		t.Error(problem)
	}
	// Absent lists stay absent (JSON null), present empty ones stay present (JSON []/{}).
	if got := adminTopicStats(broker.TopicStats{}); got.Publishers != nil || got.Subscriptions != nil || got.TopicEpoch != nil {
		t.Errorf("zero stats converted to %+v", got)
	}
	if got := adminTopicStats(broker.TopicStats{Publishers: []broker.PublisherStats{}}); got.Publishers == nil {
		t.Error("an empty publisher list became null")
	}
}

// TestTopicStatsJSONUsesPulsarNames checks the names and types of the fields whose broker form
// differs from Pulsar's.
func TestTopicStatsJSONUsesPulsarNames(t *testing.T) {
	epoch := uint64(3)
	st := adminTopicStats(broker.TopicStats{
		TopicEpoch: &epoch, TopicCreationTimeStamp: 1, LastPublishTimeStamp: 2,
		Publishers:    []broker.PublisherStats{{ProducerID: 7}},
		Subscriptions: map[string]broker.SubscriptionStats{"s": {Consumers: []broker.ConsumerStats{{AvailablePermits: 9, UnackedMessages: 4}}}},
	})
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TopicEpoch             *int64 `json:"topicEpoch"`
		TopicCreationTimeStamp int64  `json:"topicCreationTimeStamp"`
		LastPublishTimeStamp   int64  `json:"lastPublishTimeStamp"`
		Publishers             []struct {
			ProducerID int64 `json:"producerId"`
		} `json:"publishers"`
		Subscriptions map[string]struct {
			Consumers []struct {
				AvailablePermits int `json:"availablePermits"`
				UnackedMessages  int `json:"unackedMessages"`
			} `json:"consumers"`
		} `json:"subscriptions"`
	}
	// Exact names: decode through a map first (encoding/json matches struct fields case-insensitively).
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"topicEpoch", "topicCreationTimeStamp", "lastPublishTimeStamp", "publishers", "subscriptions"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("no %q in %s", k, raw)
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	c := doc.Subscriptions["s"].Consumers
	if doc.TopicEpoch == nil || *doc.TopicEpoch != 3 || doc.LastPublishTimeStamp != 2 || doc.Publishers[0].ProducerID != 7 ||
		len(c) != 1 || c[0].AvailablePermits != 9 || c[0].UnackedMessages != 4 {
		t.Errorf("stats JSON %s", raw)
	}
}

// BenchmarkTopicStatsToAdmin measures the per-topic cost of a stats request and of each topic on a
// /metrics scrape: the field-by-field converter, and for comparison a JSON round trip between the
// two types (the way it was once done).
func BenchmarkTopicStatsToAdmin(b *testing.B) {
	var n int
	var st broker.TopicStats
	fillDistinct(reflect.ValueOf(&st).Elem(), &n) // 2 publishers, 2 subscriptions of 2 consumers
	b.Run("explicit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = adminTopicStats(st)
		}
	})
	b.Run("jsonRoundTrip", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raw, err := json.Marshal(st)
			if err != nil {
				b.Fatal(err)
			}
			var out adminapi.TopicStats
			if err := json.Unmarshal(raw, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
