package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// exportedNames returns the exported top-level names and "Type.Method"
// methods declared in the non-test files of each public package matched
// by patterns, keyed "importpath.Name".
func exportedNames(t *testing.T, patterns []string) map[string]bool {
	t.Helper()
	pkgs, err := publicPackages(patterns)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range pkgs {
		fset := token.NewFileSet()
		for _, name := range append(p.GoFiles, p.CgoFiles...) {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv == nil {
						names[p.ImportPath+"."+d.Name.Name] = true
					} else if recv := receiverName(d.Recv.List[0].Type); recv != "" {
						names[p.ImportPath+"."+recv+"."+d.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.ValueSpec:
							for _, n := range s.Names {
								names[p.ImportPath+"."+n.Name] = n.IsExported()
							}
						case *ast.TypeSpec:
							names[p.ImportPath+"."+s.Name.Name] = s.Name.IsExported()
						}
					}
				}
			}
		}
	}
	return names
}

// receiverName returns the name of a method's receiver type.
func receiverName(t ast.Expr) string {
	switch t := t.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return receiverName(t.X)
	case *ast.IndexExpr:
		return receiverName(t.X)
	case *ast.IndexListExpr:
		return receiverName(t.X)
	}
	return ""
}

// TestNoSecondDoors checks that names which only duplicated another way of
// doing the same thing stay out of the public API, and that the doors they
// duplicated are still there.
func TestNoSecondDoors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	names := exportedNames(t, []string{"github.com/mlx5kit/mlx5kit/..."})
	const m = "github.com/mlx5kit/mlx5kit/"
	gone := map[string]string{ // removed name: the door that stays
		"transport.PollerStats":             "transport.Poller.Counters",
		"transport.Poller.Stats":            "transport.Poller.Counters",
		"transport.Queue.MaxRecvSGE":        "transport.Queue.Limits",
		"transport.Queue.Type":              "transport.Queue.Handle",
		"transport.MaxSGELength":            "wqebuilder.MaxSGELength",
		"ctx.Buffer.PageSize":               "ctx.Buffer.HugePages",
		"sim.Fabric.Options":                "sim.New",
		"blueflame.Register.Post":           "blueflame.SendDoorbell.Post",
		"blueflame.Register.Doorbell":       "blueflame.SendDoorbell.Ring",
		"blueflame.Register.Address":        "blueflame.NewRegister",
		"ctx.AddressAttr.Validate":          "ctx.ProtectionDomain.CreateAddressHandle",
		"ctx.QPAttr.Validate":               "ctx.QueuePair.Modify",
		"ctx.EventFilter.Match":             "ctx.EventRouter.Subscribe",
		"dc.DCT.Number":                     "transport.Queue.QPN",
		"dc.DCT.SRQ":                        "transport.Queue.SRQ",
		"dc.Remote.Endpoint":                "dc.DCI.NewRemote",
		"expvarpub.PollerSource":            "expvarpub.Publisher.AddPoller",
		"monocq.CQE.Bytes":                  "monocq.CQE",
		"monocq.CQE.GRH":                    "monocq.CQE.HasGRH",
		"monocq.CQ.CQESize":                 "monocq.CQ.CQECnt",
		"channel.Scope.Poll":                "channel.MultiChannel.Poll",
		"channel.Channel.QP":                "channel.MultiChannel.QP",
		"channel.Channel.Remote":            "channel.MultiChannel.Remote",
		"channel.Channel.RemoteRegion":      "channel.MultiChannel.RemoteRegion",
		"channel.MultiChannel.Counting":     "transport.Queue.Counting",
		"channel.MultiChannel.PeerCounters": "transport.Queue.Counters",
		"ibpath.Path.InitAttr":              "ibpath.ModifyToInit",
		"ibpath.Path.RTRAttr":               "ibpath.ModifyToRTR",
		"ibpath.Path.RTSAttr":               "ibpath.ModifyToRTS",
		"ibpath.Path.AddressAttr":           "ibpath.AddressCache.AddressHandle",
		"ctx.Context.ReadAsyncEvent":        "ctx.EventRouter.Subscribe",
		"ctx.Context.AsyncEventFD":          "ctx.Context.EventRouter",
		"expvarpub.QueueSource":             "expvarpub.Publisher.AddQueue",
		"expvarpub.ChannelSource":           "expvarpub.Publisher.AddChannel",
		"ctx.CompletionQueue.Descriptor":    "transport.NewCQ",
		"endpoint.MaxPSN":                   "ctx.MaxPSN",
		"wqebuilder.Address":                "ctx.AddressHandle.AV",
		"ctx.CompletionQueue.EventFD":       "completion.NewNotifier",
		"ctx.CompletionQueue.ReadEvent":     "completion.Notifier.Wait",
		"ctx.Context.Logger":                "ctx.Context.SetLogger",
		"ctx.AddressHandle.Attr":            "ctx.ProtectionDomain.CreateAddressHandle",
		"endpoint.Endpoint.EncodedSize":     "endpoint.Endpoint.MarshalBinary",
		"channel.Memory.PerPeer":            "channel.Memory.Total",
		"transport.SRQConfig":               "ctx.SRQConfig",
	}
	for name, door := range gone {
		if names[m+name] {
			t.Errorf("%s is exported again; %s already does it", name, door)
		}
		if !names[m+door] {
			t.Errorf("%s (the door that replaces %s) is missing", door, name)
		}
	}
	if !names[m+"ctx.Open"] {
		t.Fatalf("ctx.Open not found among %d exported names", len(names))
	}
}
