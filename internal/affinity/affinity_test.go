package affinity

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseList(t *testing.T) {
	for in, want := range map[string][]int{
		"0":         {0},
		"2,4":       {2, 4},
		"4,2":       {4, 2},
		"0-3":       {0, 1, 2, 3},
		" 1 , 5-6 ": {1, 5, 6},
		"3,1-3":     {3, 1, 2},
	} {
		got, err := ParseList(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "a", "1,", "3-1", "-1", "1-x", "1--2"} {
		_, err := ParseList(bad)
		require.Error(t, err, bad)
	}
}

func TestCPUsFromEnvironment(t *testing.T) {
	allowed, err := Allowed()
	require.NoError(t, err)
	if runtime.GOOS == "linux" {
		require.NotEmpty(t, allowed)
	}

	t.Setenv(EnvCPUs, "")
	cpus, err := CPUs()
	require.NoError(t, err)
	require.Equal(t, allowed, cpus)

	if len(allowed) > 0 {
		last := allowed[len(allowed)-1]
		t.Setenv(EnvCPUs, fmt.Sprintf("%d,%d", last, allowed[0]))
		cpus, err = CPUs()
		require.NoError(t, err)
		want := []int{last, allowed[0]}
		if last == allowed[0] {
			want = want[:1]
		}
		require.Equal(t, want, cpus, "the order of the list is kept")

		t.Setenv(EnvCPUs, fmt.Sprint(maxCPUs-1))
		_, err = CPUs()
		require.ErrorContains(t, err, "outside the allowed set")
	}
	t.Setenv(EnvCPUs, "x")
	_, err = CPUs()
	require.ErrorContains(t, err, EnvCPUs)
}

func TestPinMovesTheThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU binding is only implemented on Linux")
	}
	allowed, err := Allowed()
	require.NoError(t, err)
	before := len(allowed)
	for _, cpu := range allowed {
		p, err := Pin(cpu)
		require.NoError(t, err)
		require.Equal(t, cpu, p.CPU())
		now, err := Allowed()
		require.NoError(t, err)
		require.Equal(t, []int{cpu}, now, "the thread must be bound to exactly the CPU asked for")
		runtime.Gosched()
		on, err := Current()
		require.NoError(t, err)
		require.Equal(t, cpu, on)
		require.NoError(t, p.Release())
	}
	after, err := Allowed()
	require.NoError(t, err)
	require.Len(t, after, before, "Release must restore the previous CPU set")
}

func TestPinRejectsMissingCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU binding is only implemented on Linux")
	}
	_, err := Pin(100000)
	require.Error(t, err)
}

// TestParseListRefusesCPUsNoKernelHas: a range past the largest CPU number
// a kernel can have (a typo such as "0-1000000000") is refused at once
// rather than expanded CPU by CPU.
func TestParseListRefusesCPUsNoKernelHas(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		_, err := ParseList("0-1000000000")
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "1000000000")
	case <-time.After(5 * time.Second):
		t.Fatal("ParseList(\"0-1000000000\") still runs after 5 s")
	}
	_, err := ParseList(fmt.Sprint(maxCPUs))
	require.Error(t, err)
	cpus, err := ParseList(fmt.Sprintf("%d", maxCPUs-1))
	require.NoError(t, err)
	require.Equal(t, []int{maxCPUs - 1}, cpus)
}

// TestPinRejectsNegativeCPU: a negative CPU number is refused, where the
// CPU set's bit arithmetic would turn -63 into CPU 1 and -64 into an index
// before the set.
func TestPinRejectsNegativeCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU binding is only implemented on Linux")
	}
	before, err := Allowed()
	require.NoError(t, err)
	for _, cpu := range []int{-1, -63, -64, -65} {
		require.NotPanics(t, func() {
			p, err := Pin(cpu)
			if err == nil {
				_ = p.Release()
			}
			require.Error(t, err, "Pin(%d)", cpu)
			require.ErrorContains(t, err, fmt.Sprintf("CPU %d", cpu))
		}, "Pin(%d)", cpu)
	}
	after, err := Allowed()
	require.NoError(t, err)
	require.Equal(t, before, after)
}
