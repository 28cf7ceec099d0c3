//go:build cgo && linux

package emulate

import (
	"os"
	"testing"
)

// BenchmarkInterposedWrite measures what the interposed write costs a
// descriptor the emulation does not own (here with the emulation on, one
// more table lookup than with it off) against the bare system call.
func BenchmarkInterposedWrite(b *testing.B) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	for _, c := range []struct {
		name   string
		direct bool
	}{{"syscall", true}, {"interposed", false}} {
		b.Run(c.name, func(b *testing.B) {
			const batch = 1000
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				writeLoop(fd, min(batch, b.N-i), c.direct)
			}
		})
	}
}
