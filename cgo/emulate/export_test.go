//go:build cgo && linux

package emulate

// CallCount returns how many times the process's emulated kernel answered
// a command ("ioctl GET_CONTEXT", "write QUERY_DEVICE", "mmap UAR").
func CallCount(name string) int {
	if k := active(); k != nil {
		return k.callCount(name)
	}
	return 0
}

// MappingCount returns the number of UAR and clock info pages mapped in
// the process's emulated kernel.
func MappingCount() int {
	if k := active(); k != nil {
		return k.mappingCount()
	}
	return 0
}

// The environment's names and values, for the external tests.
const (
	EnvLink    = envLink
	EnvABI     = envABI
	ABIWrite   = abiWrite
	EnvPorts   = envPorts
	RoCENetdev = netdevRoCE
)
