package expvarpub_test

import (
	"expvar"
	"fmt"
	"log"

	"github.com/mlx5kit/mlx5kit/expvarpub"
	"github.com/mlx5kit/mlx5kit/transport"
)

// counted stands for a queue pair whose counting is enabled (an *rc.QP
// after EnableCounters).
type counted struct{ posts uint64 }

func (c *counted) Counters() transport.QueueCounters {
	var q transport.QueueCounters
	q.Posts, q.Doorbells, q.SendCompletions = c.posts, c.posts, c.posts
	return q
}

// Publishing counters: add the sources once, call Refresh from the
// goroutine that posts and polls, and /debug/vars (or expvar.Get) shows the
// last snapshot as JSON.
func Example() {
	pub, err := expvarpub.New("mlx5kit_example")
	if err != nil {
		log.Fatal(err)
	}
	qp := &counted{}
	if err := pub.AddQueue("rc0", qp); err != nil {
		log.Fatal(err)
	}
	qp.posts = 3 // the owner posts...
	pub.Refresh()
	fmt.Println(expvar.Get("mlx5kit_example").String())
	// Output:
	// {"rc0":{"Posts":3,"BlueFlameCopies":0,"Doorbells":3,"SendCompletions":3,"RecvCompletions":0,"Errors":{"total":0},"RetriesCounted":false,"RNRRetries":0,"TransportRetries":0}}
}
