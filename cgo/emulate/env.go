package emulate

// The environment the emulation reads when the process starts.
const (
	// EnvEmulate switches the emulation on when it is "1".
	EnvEmulate = "MLX5KIT_EMULATE"
	// envLink chooses the link layer of the emulated ports: "infiniband"
	// (the default) or "ethernet" (RoCE, with the GID table a ConnectX
	// fills for an IPv4 and an IPv6 address).
	envLink = "MLX5KIT_EMULATE_LINK"
	// envABI set to abiWrite makes the emulated kernel answer every ioctl
	// with ENOTTY, as a kernel without the uverbs ioctl framework:
	// libibverbs then uses the write commands and sysfs alone.
	envABI = "MLX5KIT_EMULATE_ABI"
	// abiWrite is the value of envABI that turns the ioctl methods off.
	abiWrite = "write"
	// envNames chooses the names libibverbs sees: unset, empty or
	// namesModel for the model's (sim0, sim1), namesMLX5 for a ConnectX
	// host's (mlx5_0, mlx5_1), so that scripts written for a NIC run
	// unchanged. The model keeps its own names.
	envNames = "MLX5KIT_EMULATE_NAMES"
	// envPorts is the number of ports of each emulated device, 1 (the
	// default) to 255; ports after the first mirror port 1 (see
	// sim.Options.Ports).
	envPorts = "MLX5KIT_EMULATE_PORTS"
	// namesModel is the value of envNames for the model's device names.
	namesModel = "sim"
	// namesMLX5 is the value of envNames for mlx5_<uverbs index>.
	namesMLX5 = "mlx5"
)
