package transporttest

import (
	"sync"
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// Log records what the transports asked of the provider: the attributes of
// every queue-pair modify that succeeded, by QPN (a DCT's by its DCT
// number), and of every address handle created, so that a test can check
// them, the ones the software HCA keeps but does not act on (PSNs, path
// MTU, timeouts, retry counts, RDMA read depths, a DLID beside a GRH)
// included.
type Log struct {
	mu   sync.Mutex
	byQP map[uint32][]ctx.QPAttr
	ahs  []ctx.AddressAttr
}

// NewRecording builds an Env as New does, with its contexts opened through
// a provider that records in the returned Log.
func NewRecording(t testing.TB, opts sim.Options) (*Env, *Log) {
	t.Helper()
	log := &Log{byQP: map[uint32][]ctx.QPAttr{}}
	return newEnv(t, opts, log), log
}

// Of returns the attributes of the modifies of QP qpn, oldest first.
func (m *Log) Of(qpn uint32) []ctx.QPAttr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ctx.QPAttr(nil), m.byQP[qpn]...)
}

// Last returns the attributes of the last modify of QP qpn to state s.
func (m *Log) Last(qpn uint32, s ctx.QPState) (ctx.QPAttr, bool) {
	all := m.Of(qpn)
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].State == s {
			return all[i], true
		}
	}
	return ctx.QPAttr{}, false
}

// States returns the states QP qpn was moved to, in order.
func (m *Log) States(qpn uint32) []ctx.QPState {
	var out []ctx.QPState
	for _, a := range m.Of(qpn) {
		out = append(out, a.State)
	}
	return out
}

// AddressHandles returns the attributes of the address handles created,
// oldest first.
func (m *Log) AddressHandles() []ctx.AddressAttr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ctx.AddressAttr(nil), m.ahs...)
}

func (m *Log) add(qpn uint32, a ctx.QPAttr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byQP[qpn] = append(m.byQP[qpn], a)
}

func (m *Log) addAH(a ctx.AddressAttr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ahs = append(m.ahs, a)
}

// recordingProvider is the Fabric as a provider.Provider whose protection
// domains record the address handles they create and hand out queue pairs
// that record their modifies. Everything else
// is the Fabric's own object, so the model sees its own CQs and SRQs.
type recordingProvider struct {
	f   *sim.Fabric
	log *Log
}

func (p recordingProvider) Devices() ([]provider.DeviceInfo, error) {
	return simadopt.Provider(p.f).Devices()
}

func (p recordingProvider) OpenDevice(name string) (provider.Device, error) {
	d, err := simadopt.Provider(p.f).OpenDevice(name)
	if err != nil {
		return nil, err
	}
	return recordingDevice{d, p.log}, nil
}

type recordingDevice struct {
	provider.Device
	log *Log
}

func (d recordingDevice) AllocProtectionDomain() (provider.ProtectionDomain, error) {
	pd, err := d.Device.AllocProtectionDomain()
	if err != nil {
		return nil, err
	}
	return recordingPD{pd, d.log}, nil
}

type recordingPD struct {
	provider.ProtectionDomain
	log *Log
}

func (pd recordingPD) CreateQueuePair(cfg provider.QueuePairConfig) (provider.QueuePair, error) {
	qp, err := pd.ProtectionDomain.CreateQueuePair(cfg)
	if err != nil {
		return nil, err
	}
	return recordingQP{qp, pd.log}, nil
}

func (pd recordingPD) CreateAddressHandle(attr ctx.AddressAttr) (provider.AddressHandle, error) {
	ah, err := pd.ProtectionDomain.CreateAddressHandle(attr)
	if err != nil {
		return nil, err
	}
	pd.log.addAH(attr)
	return ah, nil
}

type recordingQP struct {
	provider.QueuePair
	log *Log
}

func (q recordingQP) Modify(a ctx.QPAttr) error {
	if err := q.QueuePair.Modify(a); err != nil {
		return err
	}
	q.log.add(q.Descriptor().QPN, a)
	return nil
}
