package channel_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/mlx5kit/mlx5kit/channel"
)

// TestOneMethodPerOperation checks the shape of the API: a Channel is its
// MultiChannel (embedded, not a second set of forwarding methods) with only
// the peer-less Remote, RemoteRegion and QP of its own, plus Reestablish
// and ReestablishConn, which rebuild it as a Channel, and the blocking
// calls take a context.Context first instead of having …Context twins.
func TestOneMethodPerOperation(t *testing.T) {
	ch := reflect.TypeFor[channel.Channel]()
	if ch.NumField() != 1 || !ch.Field(0).Anonymous || ch.Field(0).Type != reflect.TypeFor[*channel.MultiChannel]() {
		t.Fatalf("Channel does not embed *MultiChannel alone: %v", ch)
	}
	multi := reflect.TypeFor[*channel.MultiChannel]()
	own := map[string]bool{"Remote": true, "RemoteRegion": true, "QP": true, "Reestablish": true, "ReestablishConn": true}
	chp := reflect.TypeFor[*channel.Channel]()
	for i := range chp.NumMethod() {
		m := chp.Method(i)
		mm, promoted := multi.MethodByName(m.Name)
		if own[m.Name] {
			continue
		}
		if !promoted || m.Type.NumIn() != mm.Type.NumIn() {
			t.Errorf("Channel.%s is not MultiChannel's", m.Name)
		}
	}
	contextType := reflect.TypeFor[context.Context]()
	blocking := []string{"Send", "Receive", "Write", "Read", "CompareSwap", "FetchAdd", "Scope",
		"ScatterSend", "ScatterWrite", "GatherReceive", "GatherRead", "MulticastSend"}
	for _, name := range blocking {
		m, ok := multi.MethodByName(name)
		if !ok {
			t.Errorf("MultiChannel has no %s", name)
			continue
		}
		if m.Type.NumIn() < 2 || m.Type.In(1) != contextType {
			t.Errorf("MultiChannel.%s does not take a context.Context first: %v", name, m.Type)
		}
	}
	if w, _ := reflect.TypeFor[channel.Pending]().MethodByName("Wait"); w.Type.NumIn() != 2 || w.Type.In(1) != contextType {
		t.Errorf("Pending.Wait does not take a context.Context: %v", w.Type)
	}
	for _, typ := range []reflect.Type{multi, chp, reflect.TypeFor[channel.Pending]()} {
		for i := range typ.NumMethod() {
			if name := typ.Method(i).Name; strings.HasSuffix(name, "Context") {
				t.Errorf("%v has %s, a second door to the method that takes a context", typ, name)
			}
		}
	}
}
