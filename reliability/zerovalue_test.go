package reliability

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/bufpool"
	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/expvarpub"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// zeroValues are pointers to the zero value of every exported struct type
// of the public packages that has methods.
var zeroValues = map[string]any{
	"blueflame.Register":           new(blueflame.Register),
	"blueflame.SendDoorbell":       new(blueflame.SendDoorbell),
	"bufpool.Pool":                 new(bufpool.Pool),
	"channel.Channel":              new(channel.Channel),
	"channel.EventError":           new(channel.EventError),
	"channel.Memory":               new(channel.Memory),
	"channel.MultiChannel":         new(channel.MultiChannel),
	"channel.PeerError":            new(channel.PeerError),
	"channel.Pending":              new(channel.Pending),
	"channel.Prepared":             new(channel.Prepared),
	"channel.PreparedMulti":        new(channel.PreparedMulti),
	"channel.Scope":                new(channel.Scope),
	"completion.Notifier":          new(completion.Notifier),
	"ctx.AddressHandle":            new(ctx.AddressHandle),
	"ctx.AsyncEvent":               new(ctx.AsyncEvent),
	"ctx.Buffer":                   new(ctx.Buffer),
	"ctx.Clock":                    new(ctx.Clock),
	"ctx.ClockInfo":                new(ctx.ClockInfo),
	"ctx.CompletionQueue":          new(ctx.CompletionQueue),
	"ctx.Context":                  new(ctx.Context),
	"ctx.DeviceAttr":               new(ctx.DeviceAttr),
	"ctx.EventRouter":              new(ctx.EventRouter),
	"ctx.EventSubscription":        new(ctx.EventSubscription),
	"ctx.GIDSelector":              new(ctx.GIDSelector),
	"ctx.MemoryRegion":             new(ctx.MemoryRegion),
	"ctx.OpError":                  new(ctx.OpError),
	"ctx.ProtectionDomain":         new(ctx.ProtectionDomain),
	"ctx.QueuePair":                new(ctx.QueuePair),
	"ctx.SharedReceiveQueue":       new(ctx.SharedReceiveQueue),
	"dc.DCI":                       new(dc.DCI),
	"dc.DCT":                       new(dc.DCT),
	"dc.Remote":                    new(dc.Remote),
	"endpoint.Endpoint":            new(endpoint.Endpoint),
	"endpoint.Error":               new(endpoint.Error),
	"endpoint.MeshListener":        new(endpoint.MeshListener),
	"endpoint.MeshWatch":           new(endpoint.MeshWatch),
	"endpoint.RemoteRegion":        new(endpoint.RemoteRegion),
	"expvarpub.Publisher":          new(expvarpub.Publisher),
	"ibpath.AddressCache":          new(ibpath.AddressCache),
	"ibpath.Path":                  new(ibpath.Path),
	"monocq.CQ":                    new(monocq.CQ),
	"monocq.CompletionError":       new(monocq.CompletionError),
	"monocq.Table":                 new(monocq.Table[transport.Queue]),
	"rc.QP":                        new(rc.QP),
	"sim.Fabric":                   new(sim.Fabric),
	"sim.Violation":                new(sim.Violation),
	"transport.CQCounters":         new(transport.CQCounters),
	"transport.Completion":         new(transport.Completion),
	"transport.ErrorCounts":        new(transport.ErrorCounts),
	"transport.Poller":             new(transport.Poller),
	"transport.Queue":              new(transport.Queue),
	"transport.QueueCounters":      new(transport.QueueCounters),
	"transport.RecvStage":          new(transport.RecvStage),
	"transport.SharedReceiveQueue": new(transport.SharedReceiveQueue),
	"ud.QP":                        new(ud.QP),
	"ud.Remote":                    new(ud.Remote),
	"wqebuilder.AtomicStage":       new(wqebuilder.AtomicStage),
	"wqebuilder.CtrlStage":         new(wqebuilder.CtrlStage),
	"wqebuilder.DataStage":         new(wqebuilder.DataStage),
	"wqebuilder.DatagramStage":     new(wqebuilder.DatagramStage),
	"wqebuilder.FinishStage":       new(wqebuilder.FinishStage),
	"wqebuilder.InlineStage":       new(wqebuilder.InlineStage),
	"wqebuilder.OpStage":           new(wqebuilder.OpStage),
	"wqebuilder.PostError":         new(wqebuilder.PostError),
	"wqebuilder.ScatterStage":      new(wqebuilder.ScatterStage),
	"wqebuilder.SendQueue":         new(wqebuilder.SendQueue),
}

// apiSentinels are the sentinel errors of the public packages: an error a
// public call returns wraps one of them (or is a typed error that carries
// its cause, which wraps one).
var apiSentinels = append(append([]error{}, lfSentinels...),
	channel.ErrPeer, channel.ErrTimeout, channel.ErrStale, channel.ErrNestedScope, channel.ErrUsed,
	channel.ErrHandshake, channel.ErrFailed, channel.ErrAsyncEvent,
	completion.ErrNoEventChannel, completion.ErrMismatch,
	monocq.ErrNoUAR, monocq.ErrCompletion, monocq.ErrUnknownSyndrome,
	endpoint.ErrTooManyRegions, endpoint.ErrRejected, endpoint.ErrListenerUsed, endpoint.ErrNoCertificate,
	endpoint.ErrPeerGone, endpoint.ErrKeyRequired, endpoint.ErrBadKey, endpoint.ErrAuth,
	bufpool.ErrEmpty, bufpool.ErrBadIndex, bufpool.ErrNotInUse, ibpath.ErrNotReceive, expvarpub.ErrExists,
	transport.ErrBadGRH, sim.ErrNotIdle, sim.ErrViolation, sim.ErrWrongMode,
	context.Canceled, context.DeadlineExceeded,
	// The errors of a connection an exchange runs over.
	io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe, net.ErrClosed, os.ErrDeadlineExceeded)

// wrapsSentinel reports whether err wraps one of apiSentinels, or an
// error number (syscall.Errno: the kernel's answer, as EIO after a fatal
// device error, which errors.Is matches too).
func wrapsSentinel(err error) bool {
	for _, s := range apiSentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	var errno syscall.Errno
	return errors.As(err, &errno)
}

// zeroValueExempt are the calls on a zero value that are documented, or
// designed, to panic, each for its reason.
var zeroValueExempt = map[string]string{}

func init() {
	exempt := func(reason string, names ...string) {
		for _, n := range names {
			zeroValueExempt[n] = reason
		}
	}
	// A receive post on a zero Queue (or a zero queue pair that embeds
	// one) and the stage it returns keep their inline budget by not
	// checking for a missing ring.
	exempt("receive post on a zero queue",
		"transport.Queue.BeginRecv", "transport.Queue.PostRecv", "rc.QP.BeginRecv", "rc.QP.PostRecv",
		"ud.QP.BeginRecv", "ud.QP.PostRecv", "dc.DCI.BeginRecv", "dc.DCI.PostRecv",
		"dc.DCT.BeginRecv", "dc.DCT.PostRecv",
		"transport.RecvStage.SGE", "transport.RecvStage.Finish", "transport.RecvStage.FinishDoorbell")
	// The zero stage is not a WQE: its methods panic (package wqebuilder's
	// documentation), and so does Begin on a SendQueue not made by New,
	// the one call of a post before Finish.
	for _, st := range []string{"OpStage", "CtrlStage", "DataStage", "InlineStage", "ScatterStage",
		"AtomicStage", "DatagramStage", "FinishStage"} {
		for _, m := range []string{"Send", "SendImm", "SendInv", "RdmaWrite", "RdmaWriteImm", "RdmaRead",
			"AtomicCS", "AtomicFA", "MaskedCS32", "MaskedCS64", "MaskedFA32", "MaskedFA64", "Nop",
			"DC", "DCStream", "UD", "SGE", "Inline", "Result", "Finish", "FinishBlueFlame"} {
			exempt("the zero stage is not a WQE", "wqebuilder."+st+"."+m)
		}
	}
	// Begin, the first call of a post, and Complete, which reads its
	// record before it checks the counter, do not look for a SendQueue
	// not made by New.
	exempt("the post and retire of a zero send queue", "wqebuilder.SendQueue.Begin", "wqebuilder.SendQueue.Complete")
	// The polls and doorbells of the rings compile into the caller's
	// loop with no check for a ring not made by their constructor.
	exempt("the poll of a zero ring", "monocq.CQ.Poll", "monocq.CQ.Release",
		"blueflame.SendDoorbell.Post", "blueflame.SendDoorbell.Ring")
	// Complete decodes the CQE it is given: a nil one is not a CQE.
	for _, q := range []string{"transport.Queue", "rc.QP", "ud.QP", "dc.DCI", "dc.DCT"} {
		exempt("a nil CQE", q+".Complete", q+".CompleteSend", q+".CompleteRecv")
	}
	// An index out of range panics, like a slice index (package bufpool),
	// and every index is out of the range of a zero pool.
	exempt("an index out of range", "bufpool.Pool.Addr", "bufpool.Pool.Buffer", "bufpool.Pool.SGE")
	// An OpError with no cause formats as an os.PathError with none does.
	exempt("an OpError without its cause", "ctx.OpError.Error")
}

// callResult is what one reflective call did.
type callResult struct {
	out   []reflect.Value
	panic any
	stack []byte
}

// callBounded calls m with args on its own goroutine and waits at most
// limit for it: a call on a zero value must not block.
func callBounded(m reflect.Value, args []reflect.Value, limit time.Duration) (callResult, bool) {
	done := make(chan callResult, 1)
	go func() {
		var r callResult
		defer func() {
			if p := recover(); p != nil {
				r.panic, r.stack = p, debug.Stack()
			}
			done <- r
		}()
		r.out = m.Call(args)
	}()
	select {
	case r := <-done:
		return r, true
	case <-time.After(limit):
		return callResult{}, false
	}
}

// zeroArgs returns a zero argument of each parameter type of m, except a
// context.Context, which is one that ends soon (no call may wait for it).
func zeroArgs(m reflect.Type, c context.Context) []reflect.Value {
	args := make([]reflect.Value, m.NumIn())
	ctxType := reflect.TypeFor[context.Context]()
	for i := range args {
		t := m.In(i)
		if t == ctxType {
			args[i] = reflect.ValueOf(c)
			continue
		}
		if m.IsVariadic() && i == m.NumIn()-1 {
			args[i] = reflect.Zero(t)
			continue
		}
		args[i] = reflect.Zero(t)
	}
	return args
}

// TestZeroValueMethods calls every exported method of the zero value of
// every exported struct type of the public packages, with zero arguments
// (a context that ends soon for a context.Context), and of the values
// those calls return: none may panic (but zeroValueExempt, each for its
// documented reason) or block, and every error returned wraps a sentinel.
// The types are found in the source: each one with methods must be in
// zeroValues.
func TestZeroValueMethods(t *testing.T) {
	for _, name := range publicStructsWithMethods(t) {
		if _, ok := zeroValues[name]; !ok {
			t.Errorf("add new(%s) to zeroValues", name)
		}
	}
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// name is the type's (package.Type), path how the value was made.
	var sweep func(name, path string, v reflect.Value, depth int)
	sweep = func(name, path string, v reflect.Value, depth int) {
		for i := range v.NumMethod() {
			mt := v.Type().Method(i)
			if _, ok := zeroValueExempt[name+"."+mt.Name]; ok {
				continue
			}
			what := path + "." + mt.Name
			m := v.Method(i)
			if m.Type().IsVariadic() {
				// Call with the variadic slice as its zero value.
				r, ok := callBounded(m, zeroArgs(m.Type(), c), 5*time.Second)
				zeroCheck(t, what, r, ok)
				continue
			}
			r, ok := callBounded(m, zeroArgs(m.Type(), c), 5*time.Second)
			zeroCheck(t, what, r, ok)
			if depth == 0 || !ok || r.panic != nil {
				continue
			}
			for j, out := range r.out {
				if out.Kind() == reflect.Struct && out.NumMethod() > 0 &&
					strings.HasPrefix(out.Type().PkgPath(), "github.com/mlx5kit/mlx5kit/") &&
					!out.Type().Implements(reflect.TypeFor[error]()) {
					p := reflect.New(out.Type())
					p.Elem().Set(out)
					sweep(out.Type().String(), fmt.Sprintf("%s()[%d]", what, j), p, depth-1)
				}
			}
		}
	}
	for name, z := range zeroValues {
		sweep(name, name, reflect.ValueOf(z), 2)
	}
}

// publicStructsWithMethods returns package.Type for every exported struct
// type of the public packages (not internal, cmd or bench) that declares a
// method.
func publicStructsWithMethods(t *testing.T) []string {
	t.Helper()
	structs := map[string]bool{}
	methods := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "internal", "cmd", "bench", "testdata", ".git", "scripts", "docs":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := f.Name.Name
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.IsExported() {
						if _, ok := ts.Type.(*ast.StructType); ok {
							structs[pkg+"."+ts.Name.Name] = true
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || !d.Name.IsExported() {
					continue
				}
				typ := d.Recv.List[0].Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				if ix, ok := typ.(*ast.IndexExpr); ok {
					typ = ix.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					methods[pkg+"."+id.Name] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for name := range structs {
		if methods[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		t.Fatal("no public struct type found")
	}
	return out
}

func zeroCheck(t *testing.T, what string, r callResult, ok bool) {
	t.Helper()
	if !ok {
		t.Errorf("%s on a zero value blocks", what)
		return
	}
	if r.panic != nil {
		t.Errorf("%s on a zero value panics: %v\n%s", what, r.panic, r.stack)
		return
	}
	for _, out := range r.out {
		if out.Type() != reflect.TypeFor[error]() || out.IsNil() {
			continue
		}
		err := out.Interface().(error)
		if !wrapsSentinel(err) {
			t.Errorf("%s on a zero value: %v (%T) wraps no sentinel", what, err, err)
		}
	}
}

// liveObjects makes one live object of each public type that has methods,
// on an engine-mode Fabric: a connected RC pair, a UD pair, a DC initiator
// and target, an SRQ, a Notifier, a buffer pool, and a connected channel
// pair. The Fabric and every object close at the test's end.
func liveObjects(t *testing.T) map[string]any {
	f := sim.New(sim.Options{Mode: sim.Engine})
	t.Cleanup(func() { _ = f.Close() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var cs [2]*ctx.Context
	var pds [2]*ctx.ProtectionDomain
	var mrs [2]*ctx.MemoryRegion
	var cqs [2]*ctx.CompletionQueue
	for i := range cs {
		c, err := f.Open(fmt.Sprintf("sim%d", i))
		must(err)
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
		pds[i], err = c.AllocProtectionDomain()
		must(err)
		buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{Guard: true})
		must(err)
		t.Cleanup(func() { _ = buf.Close() })
		mrs[i], err = pds[i].RegisterBuffer(buf, allAccess)
		must(err)
		cqs[i], err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64, EventChannel: true})
		must(err)
	}
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	must(err)
	t.Cleanup(func() { _ = buf.Close() })
	poller, err := transport.NewPoller(cqs[0])
	must(err)
	notifier, err := completion.NewNotifier(cqs[0], poller.CQ())
	must(err)
	t.Cleanup(func() { _ = notifier.Close() })
	r0, err := rc.New(pds[0], cqs[0], rc.Config{SendDepth: 4, RecvDepth: 4})
	must(err)
	r1, err := rc.New(pds[1], cqs[1], rc.Config{SendDepth: 4, RecvDepth: 4})
	must(err)
	must(r0.Connect(r1.Endpoint()))
	must(r1.Connect(r0.Endpoint()))
	must(poller.Add(r0))
	u, err := ud.New(pds[0], cqs[0], ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 7})
	must(err)
	uremote, err := u.NewRemote(u.Endpoint())
	must(err)
	srq, err := transport.NewSharedReceiveQueue(pds[1], ctx.SRQConfig{Depth: 4})
	must(err)
	dci, err := dc.NewDCI(pds[0], cqs[0], dc.DCIConfig{SendDepth: 4})
	must(err)
	dct, err := dc.NewDCT(pds[1], cqs[1], dc.DCTConfig{SRQ: srq, Key: 7})
	must(err)
	dremote, err := dci.NewRemote(dct.Endpoint())
	must(err)
	pool, err := bufpool.New(pds[0], 4, 64, ctx.AccessLocalWrite)
	must(err)
	t.Cleanup(func() { _ = pool.Close() })
	clock, err := cs[0].Clock()
	must(err)
	router, err := cs[0].EventRouter()
	must(err)
	sub, err := router.Subscribe(ctx.EventFilter{All: true}, func(ctx.AsyncEvent) {})
	must(err)
	ring, err := transport.NewCQ(cqs[1])
	must(err)
	ah, err := pds[0].CreateAddressHandle(ctx.AddressAttr{Port: 1, DLID: 1})
	must(err)
	prep, err := channel.New(pds[0], channel.Options{})
	must(err)
	t.Cleanup(func() { _ = prep.Close() })
	pm, err := channel.NewMulti(pds[0], 1, channel.Options{})
	must(err)
	t.Cleanup(func() { _ = pm.Close() })
	pa, err := channel.New(pds[0], channel.Options{})
	must(err)
	pb, err := channel.New(pds[1], channel.Options{})
	must(err)
	must(pa.Share(mrs[0]))
	must(pb.Share(mrs[1]))
	ea, eb := pa.Endpoint(), pb.Endpoint()
	cha, err := pa.Handshake(eb)
	must(err)
	t.Cleanup(func() { _ = cha.Close() })
	chb, err := pb.Handshake(ea)
	must(err)
	t.Cleanup(func() { _ = chb.Close() })
	return map[string]any{
		"ctx.Context": cs[0], "ctx.ProtectionDomain": pds[0], "ctx.MemoryRegion": mrs[0],
		"ctx.CompletionQueue": cqs[1], "ctx.Buffer": buf, "ctx.Clock": clock, "ctx.EventRouter": router,
		"ctx.EventSubscription": sub, "ctx.QueuePair": r1.Handle(), "ctx.AddressHandle": ah,
		"transport.Poller": poller, "transport.SharedReceiveQueue": srq, "completion.Notifier": notifier,
		"rc.QP": r0, "ud.QP": u, "ud.Remote": uremote, "dc.DCI": dci, "dc.DCT": dct, "dc.Remote": dremote,
		"bufpool.Pool": pool, "monocq.CQ": ring, "channel.Prepared": prep, "channel.PreparedMulti": pm,
		"channel.Channel": cha, "channel.MultiChannel": chb.MultiChannel, "sim.Fabric": f,
	}
}

// liveArgsExempt are the calls with zero arguments on a live object that
// are documented to panic.
var liveArgsExempt = map[string]string{
	"monocq.CQ.Poll": "a nil fn panics (monocq.CQ.Poll)",
}

func init() {
	for _, q := range []string{"rc.QP", "ud.QP", "dc.DCI", "dc.DCT"} {
		for _, m := range []string{"Complete", "CompleteSend", "CompleteRecv"} {
			liveArgsExempt[q+"."+m] = "a nil CQE"
		}
	}
}

// TestZeroArgumentsOnLiveObjects calls every exported method of a live
// object of each public type with zero arguments (nil pointers, slices,
// functions and interfaces, zero structs, a context that ends soon): no
// call may panic (but liveArgsExempt) or block, and every error wraps a
// sentinel. The closing methods run last.
func TestZeroArgumentsOnLiveObjects(t *testing.T) {
	objs := liveObjects(t)
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	closing := map[string]bool{"Close": true, "Fail": true, "Reset": true, "Cancel": true}
	for _, last := range []bool{false, true} {
		for name, obj := range objs {
			v := reflect.ValueOf(obj)
			for i := range v.NumMethod() {
				mname := v.Type().Method(i).Name
				what := name + "." + mname
				// The Fabric's calls (a fatal device error, a port
				// down) come with the closes.
				if _, ok := liveArgsExempt[what]; ok || (closing[mname] || name == "sim.Fabric") != last {
					continue
				}
				m := v.Method(i)
				r, ok := callBounded(m, zeroArgs(m.Type(), c), 5*time.Second)
				zeroCheck(t, what+" (zero arguments, live object)", r, ok)
			}
		}
	}
}

// zeroArgFuncs are the package-level functions of the public packages that
// take arguments, called by TestZeroArgumentFunctions. Left out: those
// that listen or dial on an address (an empty one is every interface),
// SweepFabric (it removes files), channel.Slice (documented to panic on a
// nil region) and the barriers, which take none.
var zeroArgFuncs = map[string]any{
	"bufpool.New":                     bufpool.New,
	"bufpool.PostReceives":            bufpool.PostReceives[*rc.QP],
	"bufpool.Repost":                  bufpool.Repost[*ud.QP],
	"channel.New":                     channel.New,
	"channel.NewMulti":                channel.NewMulti,
	"channel.At":                      channel.At,
	"completion.NewNotifier":          completion.NewNotifier,
	"completion.Completions":          completionsOf,
	"ctx.AllocBuffer":                 ctx.AllocBuffer,
	"ctx.ChooseGID":                   ctx.ChooseGID,
	"ctx.MTUFromBytes":                ctx.MTUFromBytes,
	"ctx.NewClock":                    ctx.NewClock,
	"ctx.ParseLinkLayer":              ctx.ParseLinkLayer,
	"dc.NewDCI":                       dc.NewDCI,
	"dc.NewDCT":                       dc.NewDCT,
	"endpoint.CheckExchange":          endpoint.CheckExchange,
	"endpoint.Exchange":               endpoint.Exchange,
	"endpoint.NewMeshListener":        endpoint.NewMeshListener,
	"endpoint.WatchConn":              endpoint.WatchConn,
	"ibpath.ModifyToConnected":        ibpath.ModifyToConnected,
	"ibpath.ModifyToInit":             ibpath.ModifyToInit,
	"ibpath.ModifyToRTR":              ibpath.ModifyToRTR,
	"ibpath.ModifyToRTS":              ibpath.ModifyToRTS,
	"ibpath.NewAddressCache":          ibpath.NewAddressCache,
	"ibpath.FromCompletion":           ibpath.FromCompletion[*transport.Completion],
	"ibpath.Local":                    ibpath.Local,
	"ibpath.Reply":                    ibpath.Reply[*transport.Completion],
	"monocq.New":                      monocq.New,
	"rc.New":                          rc.New,
	"sim.CheckFabricName":             sim.CheckFabricName,
	"sim.FromContext":                 sim.FromContext,
	"transport.ParseGRH":              transport.ParseGRH,
	"transport.NewPoller":             transport.NewPoller,
	"transport.NewSharedReceiveQueue": transport.NewSharedReceiveQueue,
	"transport.NewCQ":                 transport.NewCQ,
	"ud.New":                          ud.New,
	"wqebuilder.New":                  wqebuilder.New,
}

// completionsOf runs completion.Completions to its end.
func completionsOf(c context.Context, n *completion.Notifier, p *transport.Poller) error {
	var errs []error
	for _, err := range completion.Completions[*transport.Completion](c, n, p) {
		errs = append(errs, err)
		if err != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// TestZeroArgumentFunctions calls each of zeroArgFuncs with zero
// arguments, and again with every pointer argument to the zero value of
// its type (a ctx object not made by its constructor): neither may panic
// or block, every error wraps a sentinel, and what it returns that has a
// Close is closed.
func TestZeroArgumentFunctions(t *testing.T) {
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	for name, fn := range zeroArgFuncs {
		f := reflect.ValueOf(fn)
		for _, zeroPointers := range []bool{false, true} {
			args := zeroArgs(f.Type(), c)
			if zeroPointers {
				for i, a := range args {
					if a.Kind() == reflect.Pointer && a.IsNil() && a.Type().Elem().Kind() == reflect.Struct {
						args[i] = reflect.New(a.Type().Elem())
					}
				}
			}
			what := fmt.Sprintf("%s (zero pointers %v)", name, zeroPointers)
			r, ok := callBounded(f, args, 5*time.Second)
			zeroCheck(t, what, r, ok)
			for _, out := range r.out {
				if cl, ok := out.Interface().(interface{ Close() error }); ok && out.Kind() == reflect.Pointer && !out.IsNil() {
					_ = cl.Close()
				}
			}
		}
	}
}
