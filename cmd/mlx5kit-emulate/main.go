// Command mlx5kit-emulate runs a program, unmodified, on the software HCA:
// it starts PROGRAM with the emulated uverbs kernel preloaded
// (LD_PRELOAD of the library built from ./cgo/emulate/preload),
// MLX5KIT_EMULATE=1, the shared fabric to join and the link layer of the
// emulated ports, so that libibverbs and libmlx5 as packaged see mlx5
// devices (mlx5_0, mlx5_1) and processes started on one fabric reach each
// other's QPs.
//
// Usage:
//
//	mlx5kit-emulate [-fabric name | -tcp [listen:]HOST:PORT] [-link infiniband|ethernet] [-names mlx5|sim] [-abi write] [-lib path] -- PROGRAM [ARGS...]
//
//	-fabric  the shared fabric (default $MLX5KIT_SIM_FABRIC, else "default")
//	-tcp     join a TCP link of software HCAs instead of a shared fabric:
//	         listen:HOST:PORT listens, HOST:PORT connects to a listening
//	         end (default $MLX5KIT_SIM_LINK); the link's pre-shared key,
//	         at least 16 bytes, is read from $MLX5KIT_SIM_LINK_KEY (and
//	         passed on to the program). A test tool for hosts without
//	         RDMA NICs, not a transport: every frame copied and sealed.
//	         Every process of the program's tree joins the link: run the
//	         listening end directly or through a wrapper that execs
//	         (taskset, numactl), not one that forks it (timeout, sh -c),
//	         whose own process would take the port
//	-link    the link layer of the emulated ports (default
//	         $MLX5KIT_EMULATE_LINK, else infiniband; ethernet is RoCE)
//	-names   the device names libibverbs sees: mlx5 (mlx5_0, mlx5_1, as on
//	         a ConnectX host) or sim (the model's sim0, sim1); default
//	         $MLX5KIT_EMULATE_NAMES, else mlx5
//	-abi     "write" answers every ioctl with ENOTTY (the write ABI only)
//	-lib     the preload library to use (default $MLX5KIT_EMULATE_LIB)
//	-print-lib  print the library's path and exit
//	-sweep-after PID  wait for process PID to end, then remove what
//	         processes that are gone left of the fabric (the launcher
//	         starts itself so)
//
// For example, a perftest server and its client in two shells:
//
//	mlx5kit-emulate -- ib_write_lat -d mlx5_0 -F
//	mlx5kit-emulate -- ib_write_lat -d mlx5_0 -F localhost
//
// and on two hosts, over a TCP link (port 7471 for the link, perftest's
// own exchange on its port 18515 as usual):
//
//	export MLX5KIT_SIM_LINK_KEY=...   # the same key, 16 bytes or more, on both
//	host1$ mlx5kit-emulate -tcp listen:0.0.0.0:7471 -- ib_write_lat -d mlx5_0 -F
//	host2$ mlx5kit-emulate -tcp host1:7471 -- ib_write_lat -d mlx5_0 -F host1
//
// The preload library is found in this order: -lib; $MLX5KIT_EMULATE_LIB;
// libmlx5kit-emulate.so next to this executable (put there with go build
// -buildmode=c-shared -o DIR/libmlx5kit-emulate.so ./cgo/emulate/preload);
// else it is built from the mlx5kit module that holds the current
// directory with go build -buildmode=c-shared into the user cache directory
// (mlx5kit/emulate/<digest of the module's path>/ under os.UserCacheDir)
// and rebuilt there when a source file of the module is newer than it.
//
// The program replaces the launcher (execve): its exit status and signals
// are the program's. Such a program joins the fabric and never leaves it,
// so before the execve the launcher starts a sweeper (itself, with
// -sweep-after PID, in a session of its own and not the program's child)
// that waits for the program to end and then removes what it left in
// /dev/shm (sim.SweepFabric). The launcher exits with status 2 for bad flags and 1
// when the library cannot be found or built or the program not started.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/sim"
)

// The environment the launcher reads and sets.
const (
	envEmulate = "MLX5KIT_EMULATE"
	envLink    = "MLX5KIT_EMULATE_LINK"
	envABI     = "MLX5KIT_EMULATE_ABI"
	envNames   = "MLX5KIT_EMULATE_NAMES"
	envFabric  = "MLX5KIT_SIM_FABRIC"
	envTCP     = "MLX5KIT_SIM_LINK"
	envTCPKey  = "MLX5KIT_SIM_LINK_KEY"
	envLib     = "MLX5KIT_EMULATE_LIB"
	envPreload = "LD_PRELOAD"
)

const (
	libName       = "libmlx5kit-emulate.so"
	modulePath    = "github.com/mlx5kit/mlx5kit"
	preloadPkg    = modulePath + "/cgo/emulate/preload"
	defaultFabric = "default"
)

// errNoLibrary is returned when the preload library is neither given,
// next to the executable, nor buildable from a module checkout.
var errNoLibrary = errors.New("no preload library")

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, syscall.Exec, startSweeper)) }

// execFunc replaces the process with a program (syscall.Exec).
type execFunc func(path string, argv, env []string) error

// config is what the flags decide.
type config struct {
	fabric, tcp, link, names, abi, lib string
	printLib                           bool
	sweepAfter                         int
	argv                               []string
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("mlx5kit-emulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mlx5kit-emulate [flags] -- PROGRAM [ARGS...]")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.fabric, "fabric", envOr(envFabric, defaultFabric), "the shared fabric the program's software HCA joins")
	fs.StringVar(&c.tcp, "tcp", os.Getenv(envTCP), "`[listen:]HOST:PORT`: join a TCP link of software HCAs instead of a shared fabric (the key in $"+envTCPKey+")")
	fs.StringVar(&c.link, "link", envOr(envLink, "infiniband"), "link layer of the emulated ports: infiniband or ethernet (RoCE)")
	fs.StringVar(&c.names, "names", envOr(envNames, "mlx5"), "device names: mlx5 (mlx5_0, mlx5_1) or sim (the model's sim0, sim1)")
	fs.StringVar(&c.abi, "abi", os.Getenv(envABI), `"write": the emulated kernel answers every ioctl with ENOTTY`)
	fs.StringVar(&c.lib, "lib", os.Getenv(envLib), "the preload library (default: $"+envLib+", else next to this executable, else built into the user cache)")
	fs.BoolVar(&c.printLib, "print-lib", false, "print the preload library's path and exit")
	fs.IntVar(&c.sweepAfter, "sweep-after", 0, "wait for process `pid` to end, then remove what processes that are gone left of the fabric (the launcher starts itself so before it runs PROGRAM)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.sweepAfter < 0 {
		return c, fmt.Errorf("-sweep-after %d: want a process id above 0", c.sweepAfter)
	}
	if _, err := ctx.ParseLinkLayer(c.link); err != nil {
		return c, fmt.Errorf("-link %q: %w", c.link, err)
	}
	switch c.names {
	case "mlx5", "sim":
	default:
		return c, fmt.Errorf("-names %q: want mlx5 or sim", c.names)
	}
	switch c.abi {
	case "", "ioctl", "write":
	default:
		return c, fmt.Errorf("-abi %q: want write or ioctl", c.abi)
	}
	if c.fabric == "" {
		return c, errors.New("-fabric: the name is empty")
	}
	if err := sim.CheckFabricName(c.fabric); err != nil {
		return c, fmt.Errorf("-fabric: %w", err)
	}
	if c.tcp != "" {
		fabricSet := false
		fs.Visit(func(f *flag.Flag) { fabricSet = fabricSet || f.Name == "fabric" })
		if fabricSet {
			return c, fmt.Errorf("-fabric and -tcp (or $%s): the software HCA joins a shared fabric or a TCP link, not both", envTCP)
		}
		_, port, err := net.SplitHostPort(strings.TrimPrefix(c.tcp, "listen:"))
		if n, perr := strconv.ParseUint(port, 10, 16); err == nil && (perr != nil || n == 0 && !strings.HasPrefix(c.tcp, "listen:")) {
			err = fmt.Errorf("port %q", port)
		}
		if err != nil {
			return c, fmt.Errorf("-tcp %q: want listen:HOST:PORT or HOST:PORT: %w", c.tcp, err)
		}
		if n := len(os.Getenv(envTCPKey)); n < endpoint.MinKeySize {
			return c, fmt.Errorf("-tcp: $%s holds %d bytes, the link's pre-shared key needs %d or more", envTCPKey, n, endpoint.MinKeySize)
		}
	}
	c.argv = fs.Args()
	if len(c.argv) == 0 && !c.printLib && c.sweepAfter == 0 {
		fs.Usage()
		return c, errors.New("no program to run")
	}
	return c, nil
}

// run runs the launcher: exec replaces it with the program, once sweeper
// (when not nil) has started the process that tidies the fabric after the
// program ends.
func run(args []string, stdout, stderr io.Writer, exec execFunc, sweeper func(fabric string) error) int {
	c, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the usage asked for, printed
		}
		fmt.Fprintf(stderr, "mlx5kit-emulate: %v\n", err)
		return 2
	}
	if c.sweepAfter > 0 {
		return sweepAfter(c.fabric, c.sweepAfter, stderr)
	}
	lib, err := findLibrary(c.lib, stderr)
	if err == nil {
		err = checkPreloadPath(lib)
	}
	if err != nil {
		fmt.Fprintf(stderr, "mlx5kit-emulate: %v\n", err)
		return 1
	}
	if c.printLib {
		fmt.Fprintln(stdout, lib)
		return 0
	}
	path, err := lookPath(c.argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "mlx5kit-emulate: %v\n", err)
		return 1
	}
	env := environment(os.Environ(), c, lib)
	if sweeper != nil && c.tcp == "" { // a TCP link leaves nothing in /dev/shm
		if err := sweeper(c.fabric); err != nil {
			fmt.Fprintf(stderr, "mlx5kit-emulate: the fabric's files stay after the program (until another process joins or leaves): %v\n", err)
		}
	}
	if err := exec(path, c.argv, env); err != nil {
		fmt.Fprintf(stderr, "mlx5kit-emulate: start %s: %v\n", path, err)
		return 1
	}
	return 0
}

func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("program %q: %w", name, err)
	}
	return filepath.Abs(p)
}

// environment returns env with the emulation's variables set: LD_PRELOAD
// gets lib in front of what it held.
func environment(env []string, c config, lib string) []string {
	abi := c.abi
	if abi == "ioctl" {
		abi = ""
	}
	preload := lib
	out := make([]string, 0, len(env)+5)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case envEmulate, envFabric, envTCP, envLink, envNames, envABI:
			continue
		case envPreload:
			if v != "" && !containsField(v, lib) {
				preload = lib + " " + v
			} else if v != "" {
				preload = v
			}
			continue
		}
		out = append(out, kv)
	}
	join := envFabric + "=" + c.fabric
	if c.tcp != "" {
		join = envTCP + "=" + c.tcp
	}
	return append(out, envEmulate+"=1", join, envLink+"="+c.link, envNames+"="+c.names, envABI+"="+abi, envPreload+"="+preload)
}

// checkPreloadPath refuses a library path the dynamic loader would read
// as two: LD_PRELOAD separates its entries with spaces and colons and has
// no way to escape either, so such a path would start the program without
// the emulation, or with a library the path's first part names.
func checkPreloadPath(lib string) error {
	if strings.ContainsAny(lib, " :") {
		return fmt.Errorf("preload library %q: %s splits its list at spaces and colons and cannot name this path; give -lib (or $%s) a path without them", lib, envPreload, envLib)
	}
	return nil
}

func containsField(list, s string) bool {
	for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ' ' || r == ':' }) {
		if f == s {
			return true
		}
	}
	return false
}

// findLibrary returns the preload library: the one given, the one next
// to the executable, or one built into the user cache directory from the
// module checkout holding the working directory.
func findLibrary(given string, log io.Writer) (string, error) {
	if given != "" {
		p, err := filepath.Abs(given)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("preload library: %w", err)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			p := filepath.Join(filepath.Dir(exe), libName)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := moduleRoot(wd)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: no user cache directory to build it into: %w", errNoLibrary, err)
	}
	return buildCached(root, cache, log)
}

// moduleRoot returns the directory, dir or above, whose go.mod declares
// the mlx5kit module.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && declaresModule(string(b)) {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("%w: none given (-lib, $%s), none next to the executable (%s), and %s is not inside a checkout of %s to build one from", errNoLibrary, envLib, libName, dir, modulePath)
		}
		d = up
	}
}

func declaresModule(gomod string) bool {
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "module" && strings.Trim(f[1], `"`) == modulePath {
			return true
		}
	}
	return false
}

// buildCached returns the library built from the module at root into the
// cache directory, building it when it is missing or older than a source
// file of the module.
func buildCached(root, cache string, log io.Writer) (string, error) {
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cache, "mlx5kit", "emulate", hex.EncodeToString(sum[:8]))
	lib := filepath.Join(dir, libName)
	newest, err := newestSource(root)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(lib); err == nil && st.ModTime().After(newest) {
		return lib, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("preload library: %w", err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		if p := filepath.Join("/usr/local/go/bin", "go"); fileExists(p) {
			goTool = p
		} else {
			return "", fmt.Errorf("%w: build it: %w", errNoLibrary, err)
		}
	}
	tmp, err := os.CreateTemp(dir, ".lib-*.so")
	if err != nil {
		return "", fmt.Errorf("preload library: %w", err)
	}
	_ = tmp.Close()
	defer func() { _ = os.Remove(tmp.Name()) }()
	fmt.Fprintf(log, "mlx5kit-emulate: building %s from %s\n", lib, root)
	cmd := exec.Command(goTool, "build", "-buildmode=c-shared", "-o", tmp.Name(), preloadPkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -buildmode=c-shared %s: %w\n%s", preloadPkg, err, out)
	}
	_ = os.Remove(strings.TrimSuffix(tmp.Name(), ".so") + ".h")
	if err := os.Rename(tmp.Name(), lib); err != nil {
		return "", fmt.Errorf("preload library: %w", err)
	}
	return lib, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// newestSource returns the latest modification time of the module's Go,
// C and module files (directories starting with a dot or named testdata
// are skipped).
func newestSource(root string) (time.Time, error) {
	var newest time.Time
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".go", ".c", ".h", ".s", ".mod", ".sum":
		default:
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.ModTime().After(newest) {
			newest = info.ModTime()
		}
		return nil
	})
	if err != nil {
		return newest, fmt.Errorf("preload library: scan %s: %w", root, err)
	}
	return newest, nil
}

// envOr returns the variable's value, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
