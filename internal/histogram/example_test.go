package histogram_test

import (
	"fmt"
	"os"

	"github.com/mlx5kit/mlx5kit/internal/histogram"
)

func Example() {
	h := new(histogram.Histogram)
	for i := uint64(0); i < 1000; i++ {
		h.Record(1000 + i%100) // a steady 1.0-1.1 µs
	}
	h.Record(9000) // one slow round trip
	fmt.Println(h.Percentile(50), h.Percentile(99.9), h.Max())
	_ = h.WriteText(os.Stdout, histogram.Scale{Factor: 1e-3, Unit: "µs"})
	// Output:
	// 1047 1095 9000
	// n=1001 min=1µs p50=1.047µs p99=1.095µs p99.9=1.095µs max=9µs mean=1.057µs
	//      0.896 - 1.023µs      |#############                           | 240 23.976%
	//      1.024 - 1.279µs      |########################################| 760 99.900%
	//       1.28 - 1.535µs      |                                        | 0 99.900%
	//      1.536 - 1.791µs      |                                        | 0 99.900%
	//      1.792 - 2.047µs      |                                        | 0 99.900%
	//      2.048 - 2.559µs      |                                        | 0 99.900%
	//       2.56 - 3.071µs      |                                        | 0 99.900%
	//      3.072 - 3.583µs      |                                        | 0 99.900%
	//      3.584 - 4.095µs      |                                        | 0 99.900%
	//      4.096 - 5.119µs      |                                        | 0 99.900%
	//       5.12 - 6.143µs      |                                        | 0 99.900%
	//      6.144 - 7.167µs      |                                        | 0 99.900%
	//      7.168 - 8.191µs      |                                        | 0 99.900%
	//      8.192 - 10.24µs      |#                                       | 1 100.000%
}
