package procstat

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRead(t *testing.T) {
	state, start, err := Read(os.Getpid())
	require.NoError(t, err)
	require.False(t, Ended(state))
	require.NotZero(t, start)

	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	_, childStart, err := Read(pid)
	require.NoError(t, err)
	require.GreaterOrEqual(t, childStart, start, "the child started after this process")
	require.NoError(t, cmd.Process.Kill())
	require.Eventually(t, func() bool {
		state, s, err := Read(pid)
		return err == nil && s == childStart && Ended(state)
	}, 10*time.Second, time.Millisecond, "the killed child a zombie, its start time kept")
	_ = cmd.Wait()
	_, _, err = Read(pid)
	require.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
}
