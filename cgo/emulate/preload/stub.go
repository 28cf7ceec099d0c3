//go:build !cgo || !linux

// Command preload is the emulated uverbs kernel as a preloadable library
// (go build -buildmode=c-shared); it needs cgo and Linux.
package main

func main() {}
