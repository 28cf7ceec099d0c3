//go:build !amd64 && !arm64

package blueflame

var availableModes = []Mode{ModeGeneric}

func modePost(Mode) postFunc { return postGeneric }
