package blueflame_test

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/blueflame"
)

// A send queue posts through a SendDoorbell bound once to its register, its
// doorbell record and its ring. Here plain memory stands in for what
// mlx5dv_init_obj hands out: a ring of four 64-byte basic blocks, a
// doorbell record, and a BlueFlame register of two 64-byte buffers.
func ExampleSendDoorbell() {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer unix.Munmap(mem)
	ring := unsafe.Pointer(&mem[0])
	dbrec := unsafe.Pointer(&mem[1024])
	reg, err := blueflame.NewRegister(unsafe.Pointer(&mem[2048]), 64)
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := blueflame.NewSendDoorbell(reg, dbrec, ring, unsafe.Add(ring, 4*64))
	if err != nil {
		fmt.Println(err)
		return
	}

	// A one-basic-block WQE in slot 0 (only its first bytes matter here:
	// a NOP with WQE index 0), then its post: producer index 1.
	copy(mem[0:8], []byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x01})
	d.Post(1, ring, 64)

	fmt.Printf("doorbell record[1]: % x\n", mem[1028:1032])
	fmt.Printf("BlueFlame buffer 0: % x ...\n", mem[2048:2056])
	fmt.Println("next post writes buffer at offset", d.Offset())
	// Output:
	// doorbell record[1]: 00 00 00 01
	// BlueFlame buffer 0: 00 00 00 00 00 00 12 01 ...
	// next post writes buffer at offset 64
}
