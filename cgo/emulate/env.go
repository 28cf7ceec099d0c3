package emulate

// The environment the emulation reads when the process starts.
const (
	// EnvEmulate switches the emulation on when it is "1".
	EnvEmulate = "MLX5KIT_EMULATE"
	// EnvLink chooses the link layer of the emulated ports: "infiniband"
	// (the default) or "ethernet" (RoCE, with the GID table a ConnectX
	// fills for an IPv4 and an IPv6 address).
	EnvLink = "MLX5KIT_EMULATE_LINK"
	// EnvABI set to ABIWrite makes the emulated kernel answer every ioctl
	// with ENOTTY, as a kernel without the uverbs ioctl framework:
	// libibverbs then uses the write commands and sysfs alone.
	EnvABI = "MLX5KIT_EMULATE_ABI"
	// ABIWrite is the value of EnvABI that turns the ioctl methods off.
	ABIWrite = "write"
	// EnvNames chooses the names libibverbs sees: unset, empty or
	// NamesModel for the model's (sim0, sim1), NamesMLX5 for a ConnectX
	// host's (mlx5_0, mlx5_1), so that scripts written for a NIC run
	// unchanged. The model keeps its own names.
	EnvNames = "MLX5KIT_EMULATE_NAMES"
	// EnvPorts is the number of ports of each emulated device, 1 (the
	// default) to 255; ports after the first mirror port 1 (see
	// sim.Options.Ports).
	EnvPorts = "MLX5KIT_EMULATE_PORTS"
	// NamesModel is the value of EnvNames for the model's device names.
	NamesModel = "sim"
	// NamesMLX5 is the value of EnvNames for mlx5_<uverbs index>.
	NamesMLX5 = "mlx5"
)
