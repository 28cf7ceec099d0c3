package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEnvironmentSetsTheEmulation checks the variables the program gets:
// the emulation on, the fabric and link layer of the flags, the library
// in front of an LD_PRELOAD the caller set, and stale values replaced.
func TestEnvironmentSetsTheEmulation(t *testing.T) {
	env := environment([]string{
		"HOME=/home/x", envEmulate + "=0", envFabric + "=old", envLink + "=ethernet",
		envABI + "=write", envNames + "=sim", envPreload + "=/opt/other.so",
	}, config{fabric: "f1", link: "infiniband", names: "mlx5", abi: "ioctl"}, "/lib/emu.so")
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		_, dup := got[k]
		require.False(t, dup, "%s set twice in %q", k, env)
		got[k] = v
	}
	require.Equal(t, map[string]string{
		"HOME": "/home/x", envEmulate: "1", envFabric: "f1", envLink: "infiniband",
		envNames: "mlx5", envABI: "", envPreload: "/lib/emu.so /opt/other.so",
	}, got)

	env = environment([]string{envPreload + "=/lib/emu.so"}, config{fabric: "f", link: "ethernet", abi: "write"}, "/lib/emu.so")
	require.Contains(t, env, envPreload+"=/lib/emu.so")
	require.Contains(t, env, envABI+"=write")
	require.Contains(t, env, envLink+"=ethernet")

	// A TCP link replaces the shared fabric; the key passes through.
	env = environment([]string{envFabric + "=old", envTCP + "=old:1", envTCPKey + "=k"}, config{fabric: "default", tcp: "listen:127.0.0.1:7471", link: "infiniband"}, "/lib/emu.so")
	require.Contains(t, env, envTCP+"=listen:127.0.0.1:7471")
	require.Contains(t, env, envTCPKey+"=k")
	for _, kv := range env {
		require.False(t, strings.HasPrefix(kv, envFabric+"="), "%s with a TCP link: %q", envFabric, env)
	}
}

// TestSweeperEnvParses: the sweeper's environment and flags parse where
// the link variable is exported (the launcher's -tcp= turned it off).
func TestSweeperEnvParses(t *testing.T) {
	env := sweeperEnv([]string{"HOME=/h", envTCP + "=h:1", envPreload + "=/lib/emu.so"})
	require.NotContains(t, env, envTCP+"=h:1")
	require.NotContains(t, env, envPreload+"=/lib/emu.so")
	require.Contains(t, env, envSweepReady+"=3")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	os.Unsetenv(envTCP)
	_, err := parse([]string{"-fabric", "f", "-sweep-after", "1"}, new(bytes.Buffer))
	require.NoError(t, err)
	t.Setenv(envTCP, "h:1")
	_, err = parse([]string{"-fabric", "f", "-sweep-after", "1"}, new(bytes.Buffer))
	require.ErrorContains(t, err, "$"+envTCP, "with the variable")
}

// TestRunOverTCPLink: -tcp gives the program the link and no fabric, and
// starts no sweeper (nothing of a link is in /dev/shm).
func TestRunOverTCPLink(t *testing.T) {
	lib := filepath.Join(t.TempDir(), libName)
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	t.Setenv(envTCPKey, "sixteen-byte-key")
	var gotEnv []string
	swept := false
	var stdout, stderr bytes.Buffer
	code := run([]string{"-lib", lib, "-tcp", "host1:7471", "--", "true"}, &stdout, &stderr,
		func(_ string, _, env []string) error { gotEnv = env; return nil },
		func(string) error { swept = true; return nil })
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, gotEnv, envTCP+"=host1:7471")
	require.False(t, swept, "a sweeper for a TCP link")
}

// TestRunExecsTheProgram checks that the launcher replaces itself with
// the program found on PATH, with its arguments and the environment.
func TestRunExecsTheProgram(t *testing.T) {
	lib := filepath.Join(t.TempDir(), libName)
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	t.Setenv(envFabric, "from-env")
	var gotPath string
	var gotArgv, gotEnv []string
	exec := func(path string, argv, env []string) error {
		gotPath, gotArgv, gotEnv = path, argv, env
		return nil
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-lib", lib, "--", "sh", "-c", "true"}, &stdout, &stderr, exec, nil)
	require.Equal(t, 0, code, stderr.String())
	require.True(t, filepath.IsAbs(gotPath), gotPath)
	require.Equal(t, "sh", filepath.Base(gotPath))
	require.Equal(t, []string{"sh", "-c", "true"}, gotArgv)
	require.Contains(t, gotEnv, envFabric+"=from-env")
	require.Contains(t, gotEnv, envEmulate+"=1")
	require.Contains(t, gotEnv, envPreload+"="+lib)

	// An exec that fails is reported with status 1.
	code = run([]string{"-lib", lib, "--", "sh"}, &stdout, &stderr, func(string, []string, []string) error { return errors.New("refused") }, nil)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "refused")
}

// TestRunRejectsBadInput checks the exit status and message of bad flags,
// a missing program, a missing library and one whose path LD_PRELOAD
// cannot carry, and that nothing is started.
func TestRunRejectsBadInput(t *testing.T) {
	t.Setenv(envTCPKey, "")
	lib := filepath.Join(t.TempDir(), libName)
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	// Libraries whose paths LD_PRELOAD cannot carry.
	spaced := filepath.Join(t.TempDir(), "a dir", libName)
	colon := filepath.Join(t.TempDir(), "a:dir", libName)
	for _, p := range []string{spaced, colon} {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-lib", lib, "-link", "fddi", "--", "true"}, 2, `-link "fddi"`},
		{[]string{"-lib", lib, "-abi", "mmap", "--", "true"}, 2, `-abi "mmap"`},
		{[]string{"-lib", lib, "-names", "cx7", "--", "true"}, 2, `-names "cx7"`},
		{[]string{"-lib", lib, "-fabric", "", "--", "true"}, 2, "-fabric"},
		{[]string{"-lib", lib, "-fabric", "a/b", "--", "true"}, 2, "-fabric: sim: fabric name \"a/b\""},
		{[]string{"-lib", lib, "-fabric", ".hidden", "--", "true"}, 2, "not starting with a dot"},
		{[]string{"-lib", lib, "-fabric", "f", "-tcp", "h:1", "--", "true"}, 2, "-fabric and -tcp"},
		{[]string{"-lib", lib, "-tcp", "no-port", "--", "true"}, 2, `-tcp "no-port"`},
		{[]string{"-lib", lib, "-tcp", "h:abc", "--", "true"}, 2, `-tcp "h:abc"`},
		{[]string{"-lib", lib, "-tcp", "h:0", "--", "true"}, 2, `-tcp "h:0"`},
		{[]string{"-lib", lib, "-tcp", "listen:h:1", "--", "true"}, 2, "MLX5KIT_SIM_LINK_KEY holds 0 bytes"},
		{[]string{"-lib", lib}, 2, "no program to run"},
		{[]string{"-lib", lib, "--", "no-such-program-mlx5kit"}, 1, `program "no-such-program-mlx5kit"`},
		{[]string{"-lib", lib + ".missing", "--", "true"}, 1, "preload library"},
		{[]string{"-lib", spaced, "--", "true"}, 1, "LD_PRELOAD splits its list at spaces and colons"},
		{[]string{"-lib", colon, "--", "true"}, 1, "LD_PRELOAD splits its list at spaces and colons"},
		{[]string{"-lib", spaced, "-print-lib"}, 1, "cannot name this path"},
	} {
		var stdout, stderr bytes.Buffer
		started := false
		code := run(c.args, &stdout, &stderr, func(string, []string, []string) error { started = true; return nil }, nil)
		require.Equal(t, c.code, code, "%q: %s", c.args, stderr.String())
		require.Contains(t, stderr.String(), c.msg, "%q", c.args)
		require.False(t, started, "%q started the program", c.args)
		require.Empty(t, stdout.String(), "%q", c.args)
	}
}

// TestModuleRoot checks that the checkout is found from a directory below
// its go.mod, and that a directory outside any checkout of the module
// gets errNoLibrary.
func TestModuleRoot(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	root, err := moduleRoot(wd)
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "cgo", "emulate", "preload", "main.go"))

	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o644))
	_, err = moduleRoot(filepath.Join(other))
	require.ErrorIs(t, err, errNoLibrary)
}

// TestBuildCachedReusesAFreshLibrary checks that a cached library newer
// than every source file is used as it is, without a build.
func TestBuildCachedReusesAFreshLibrary(t *testing.T) {
	root, cache := t.TempDir(), t.TempDir()
	src := filepath.Join(root, "x.go")
	require.NoError(t, os.WriteFile(src, []byte("package x\n"), 0o644))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(src, old, old))
	// A first call with no library builds, which fails here: root is no
	// module, so go build reports the error.
	_, err := buildCached(root, cache, &bytes.Buffer{})
	require.Error(t, err)
	matches, err := filepath.Glob(filepath.Join(cache, "mlx5kit", "emulate", "*"))
	require.NoError(t, err)
	require.Len(t, matches, 1)
	lib := filepath.Join(matches[0], libName)
	require.NoError(t, os.WriteFile(lib, []byte("cached"), 0o644))
	got, err := buildCached(root, cache, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, lib, got)

	// A source file newer than the library makes it stale: a build runs
	// (and fails, as above) instead of the stale file being returned.
	future := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(src, future, future))
	_, err = buildCached(root, cache, &bytes.Buffer{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "go build")
}

// TestHelpExitsZero: -h prints the usage and exits 0, starting nothing; a
// bad flag exits 2.
func TestHelpExitsZero(t *testing.T) {
	var stdout, stderr bytes.Buffer
	started := false
	start := func(string, []string, []string) error { started = true; return nil }
	require.Equal(t, 0, run([]string{"-h"}, &stdout, &stderr, start, nil))
	require.Contains(t, stderr.String(), "-fabric")
	require.Contains(t, stderr.String(), "$MLX5KIT_EMULATE_LIB") // -lib's help names its variable
	require.False(t, started)
	require.Equal(t, 2, run([]string{"-nosuch", "--", "true"}, &stdout, &stderr, start, nil))
	require.False(t, started)
}

// TestRunRejectsNegativeSweepPID: -sweep-after takes a process id; a
// negative one is a bad flag (exit 2, one line naming it), not ignored
// while the program runs.
func TestRunRejectsNegativeSweepPID(t *testing.T) {
	lib := filepath.Join(t.TempDir(), libName)
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	for _, args := range [][]string{
		{"-lib", lib, "-sweep-after", "-1", "--", "true"},
		{"-lib", lib, "-sweep-after", "-1"},
	} {
		var stdout, stderr bytes.Buffer
		started := false
		code := run(args, &stdout, &stderr, func(string, []string, []string) error { started = true; return nil }, nil)
		require.Equal(t, 2, code, "%q: %s", args, stderr.String())
		require.Equal(t, "mlx5kit-emulate: -sweep-after -1: want a process id above 0\n", stderr.String(), "%q", args)
		require.False(t, started, "%q started the program", args)
	}
}
