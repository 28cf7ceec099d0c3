package names

import "testing"

type color uint8

var colorNames = [...]string{1: "red", 2: "green", 4: "blue"}

func TestOf(t *testing.T) {
	for v, want := range map[color]string{
		0:   "color(0)",
		1:   "red",
		2:   "green",
		3:   "color(3)",
		4:   "blue",
		5:   "color(5)",
		255: "color(255)",
	} {
		if got := Of(v, colorNames[:], "color"); got != want {
			t.Errorf("Of(%d) = %q, want %q", v, got, want)
		}
	}
	if got := Of(uint32(1<<31), nil, "Big"); got != "Big(2147483648)" {
		t.Errorf("Of(1<<31) = %q", got)
	}
}
